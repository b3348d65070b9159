"""How the build chooses its runner settings: a local run uses every core (one worker process per
core) unless told otherwise, with Beam's timed data-plane flush off; the DaskRunner is accepted
by its short name with a partition count."""
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from proactivebench_builder.pipeline import local_runs as cli


def configured(argv):
    options = PipelineOptions(argv)
    runner = cli.configure_runner(options, argv)
    return runner, options.view_as(DirectOptions)


def test_a_local_run_uses_every_core_in_worker_processes_by_default():
    for argv in ([], ["--runner", "FnApiRunner"], ["--runner=DirectRunner"]):
        _, direct = configured(argv)
        assert direct.direct_num_workers == cli.available_cores()
        assert direct.direct_running_mode == cli.DEFAULT_LOCAL_MODE == "multi_processing"


def test_explicit_worker_settings_are_kept_in_either_spelling():
    _, direct = configured(["--runner=FnApiRunner", "--direct_num_workers", "3",
                            "--direct_running_mode=multi_processing"])
    assert (direct.direct_num_workers, direct.direct_running_mode) == (3, "multi_processing")
    _, direct = configured(["--direct_num_workers=1"])  # Beam's single in-memory worker
    assert (direct.direct_num_workers, direct.direct_running_mode) == (1, "in_memory")
    _, direct = configured(["--direct_num_workers", "3"])  # not 3 workers run as one in_memory
    assert (direct.direct_num_workers, direct.direct_running_mode) == (3, "multi_processing")
    _, direct = configured(["--direct_running_mode=multi_threading"])
    assert direct.direct_num_workers == cli.available_cores()
    assert direct.direct_running_mode == "multi_threading"
    assert cli.flag_given(["--direct-num-workers", "2"], "direct_num_workers")
    assert not cli.flag_given(["--direct_num_workers_extra=2"], "direct_num_workers")


def test_a_local_run_turns_off_the_timed_flush_that_lost_data(monkeypatch):
    monkeypatch.setattr(worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", 1000)
    configured(["--runner=FnApiRunner", "--direct_running_mode=multi_threading"])
    assert worker_handlers.DATA_BUFFER_TIME_LIMIT_MS == 0


def test_dask_runner_by_short_name_gets_partitions():
    from apache_beam.runners.dask.dask_runner import DaskOptions

    argv = ["--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:1"]
    options = PipelineOptions(argv)
    assert cli.configure_runner(options, argv) == cli.DASK_RUNNER
    assert options.view_as(DaskOptions).npartitions == cli.DEFAULT_DASK_PARTITIONS
    assert options.view_as(DirectOptions).direct_num_workers == 1  # not a local run: untouched
