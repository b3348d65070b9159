"""How the build chooses its runner settings: a local run uses every core unless told otherwise,
and the DaskRunner is accepted by its short name with a partition count."""
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from proactivebench_builder.pipeline import cli


def configured(argv):
    options = PipelineOptions(argv)
    runner = cli.configure_runner(options, argv)
    return runner, options.view_as(DirectOptions)


def test_a_local_run_uses_every_core_by_default():
    for argv in ([], ["--runner", "FnApiRunner"], ["--runner=DirectRunner"]):
        _, direct = configured(argv)
        assert direct.direct_num_workers == cli.available_cores()
        assert direct.direct_running_mode == cli.DEFAULT_LOCAL_MODE


def test_explicit_worker_settings_are_kept():
    _, direct = configured(["--runner=FnApiRunner", "--direct_num_workers=1"])
    assert (direct.direct_num_workers, direct.direct_running_mode) == (1, "in_memory")
    _, direct = configured(["--runner=FnApiRunner", "--direct_num_workers", "3",
                            "--direct_running_mode=multi_processing"])
    assert (direct.direct_num_workers, direct.direct_running_mode) == (3, "multi_processing")
    _, direct = configured(["--direct_running_mode=multi_processing"])
    assert direct.direct_num_workers == cli.available_cores()
    assert direct.direct_running_mode == "multi_processing"


def test_dask_runner_by_short_name_gets_partitions():
    from apache_beam.runners.dask.dask_runner import DaskOptions

    argv = ["--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:1"]
    options = PipelineOptions(argv)
    assert cli.configure_runner(options, argv) == cli.DASK_RUNNER
    assert options.view_as(DaskOptions).npartitions == cli.DEFAULT_DASK_PARTITIONS
    assert options.view_as(DirectOptions).direct_num_workers == 1  # not a local run: untouched
