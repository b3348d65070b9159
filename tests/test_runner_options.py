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
    import socket

    from apache_beam.runners.dask.dask_runner import DaskOptions

    listener = socket.create_server(("127.0.0.1", 0))  # the scheduler's address is probed
    port = listener.getsockname()[1]
    argv = ["--runner=DaskRunner", f"--dask_client_address=tcp://127.0.0.1:{port}"]
    options = PipelineOptions(argv)
    assert cli.configure_runner(options, argv) == cli.DASK_RUNNER
    assert options.view_as(DaskOptions).npartitions == cli.DEFAULT_DASK_PARTITIONS
    assert options.view_as(DirectOptions).direct_num_workers == 1  # not a local run: untouched
    listener.close()


def test_a_local_build_runs_on_the_fn_api_runner_without_trying_prism(tmp_path, monkeypatch,
                                                                      miniature_root):
    """The default runner (DirectRunner) would first try Beam's Prism runner: download its
    binary where GitHub answers (the build would run on a runner never tested here) and, offline,
    leave an empty /tmp/beam-temp* folder behind. A local build names the FnApiRunner itself,
    with the pipeline's options provisioned to its workers as Beam's fallback does."""
    import tempfile

    from apache_beam.runners.portability import prism_runner
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    from proactivebench_builder.pipeline import beam_compat
    from proactivebench_builder.pipeline.commands.build import run_build

    tried = []
    real_run = prism_runner.PrismRunner.run_pipeline

    def record_prism(self, *args, **kwargs):
        tried.append("prism")  # an error raised here would be caught by Beam's fallback
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", record_prism)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where Beam's beam-temp would go
    (tmp_path / "out").mkdir()
    run_build(["--sources_root", str(miniature_root), "--scenarios", "quickdraw",
               "--direct_num_workers", "1", "--output", str(tmp_path / "out" / "build")])
    assert not tried
    assert not list(tmp_path.glob("beam-temp*"))
    runner = beam_compat.local_runner(PipelineOptions(["--direct_num_workers=2"]))
    assert isinstance(runner, fn_runner.FnApiRunner)
    options = dict(runner._provision_info.provision_info.pipeline_options.fields)
    assert options["beam:option:direct_num_workers:v1"].string_value == "2"
