"""How the build chooses its runner settings: a local run keeps Beam's single in-memory worker
unless told otherwise, and the DaskRunner is accepted by its short name with a partition count."""
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from proactivebench_builder.pipeline.commands import build as cli


def configured(argv):
    options = PipelineOptions(argv)
    runner = cli.configure_runner(options)
    return runner, options.view_as(DirectOptions)


def test_a_local_run_keeps_one_in_memory_worker_by_default():
    for argv in ([], ["--runner", "FnApiRunner"], ["--runner=DirectRunner"]):
        _, direct = configured(argv)
        assert (direct.direct_num_workers, direct.direct_running_mode) == (1, "in_memory")


def test_explicit_worker_settings_are_kept():
    _, direct = configured(["--runner=FnApiRunner", "--direct_num_workers", "3",
                            "--direct_running_mode=multi_processing"])
    assert (direct.direct_num_workers, direct.direct_running_mode) == (3, "multi_processing")


def test_dask_runner_by_short_name_gets_partitions():
    from apache_beam.runners.dask.dask_runner import DaskOptions

    argv = ["--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:1"]
    options = PipelineOptions(argv)
    assert cli.configure_runner(options) == cli.DASK_RUNNER
    assert options.view_as(DaskOptions).npartitions == cli.DEFAULT_DASK_PARTITIONS
