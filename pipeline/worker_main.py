"""The entry point of a local multi-processing build's worker processes: Beam's own SDK worker
(`apache_beam.runners.worker.sdk_worker_main`), with the build's known noise silenced first.

Beam's import logs "apitools not found ..." through `logging.warning`, which, on a root logger
without handlers, also installs a stderr handler (`logging.basicConfig`); every later INFO line
of the worker's start-up ("Logging handler created.", "semi_persistent_directory: None", ...)
then lands on the user's terminal. Here the root logger gets the noise filter and a handler
that drops records before Beam is imported, so the worker logs only through Beam's own handler,
which relays each record to the build process (where `--sdk_harness_log_level_overrides`
applies). A crash still prints its traceback: that goes to stderr directly, not through logging.
`pipeline.local_runs` starts workers with this module instead of Beam's (it already hands
Beam's job service the Popen that starts each worker).
"""
import logging
import runpy

from proactivebench_builder.core.cli import silence_known_noise

BEAM_WORKER_MODULE = "apache_beam.runners.worker.sdk_worker_main"
# Logged (WARNING) by every local worker that starts without a staging folder, which a local
# build never has: the objects it warns about are not registered by this build.
NO_STAGING_FOLDER_NOISE = "No semi_persistent_directory found"


if __name__ == "__main__":
    silence_known_noise()
    # Beam's worker module runs as __main__, so its own logger is "__main__"
    silence_known_noise(logging.getLogger("__main__"), (NO_STAGING_FOLDER_NOISE,))
    logging.getLogger().addHandler(logging.NullHandler())
    # imported once the noise filter is in place: importing it imports Beam
    from proactivebench_builder.pipeline import beam_compat

    beam_compat.quiet_instruction_tracebacks()
    runpy.run_module(BEAM_WORKER_MODULE, run_name="__main__", alter_sys=True)
