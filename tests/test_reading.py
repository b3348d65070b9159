"""pipeline/reading.py, a scenario's units read into raw items and samples: an unexpected error
inside one raw item (or one train example) makes it alone a dead letter, and a unit failing part way is one dead letter
standing for the rest, with every scenario still accounted (raw items = samples + dead letters +
exclusions)."""
from __future__ import annotations

from conftest import IN_PROCESS, accounted, dead_letters, run
from proactivebench_builder.core import results
from proactivebench_builder.transforms import load_scenarios


def test_errors_inside_items_and_units_keep_every_scenario_accounted(tmp_path, miniature_root,
                                                                      monkeypatch):
    """For every scenario: its first built sample raises an unexpected error (it alone becomes
    a dead letter), and its first unit fails after its first raw item or part of one (the unit's
    dead letter stands for the rest): raw items = samples + dead letters + exclusions still holds."""
    failed_items, failed_units = set(), set()
    for name, cls in load_scenarios().items():
        build_sample, read_unit = cls.build_sample, cls.read_unit

        def failing_build(self, key, item, _original=build_sample):
            if self.name not in failed_items:
                failed_items.add(self.name)
                raise RuntimeError(f"injected failure in {key}")
            return _original(self, key, item)

        def failing_read(self, unit, _original=read_unit):
            counted = 0
            for value in _original(self, unit):
                yield value
                if (value.kind == "count" and value.what == "raw_items") or \
                        value.kind == "fragment":  # (ROD's archives hold parts of raw items)
                    counted += 1
                if counted and self.name not in failed_units:
                    failed_units.add(self.name)
                    raise OSError(f"injected failure in {unit}")

        monkeypatch.setattr(cls, "build_sample", failing_build)
        monkeypatch.setattr(cls, "read_unit", failing_read)
    output = str(tmp_path / "out")
    report = run(output, miniature_root, "all", "--max_bad_fraction=1", "--no_train", IN_PROCESS)
    accounted(report)
    letters = dead_letters(output)
    for name in load_scenarios():
        reasons = [d["reason"] for d in letters if d["scenario"] == name]
        if name in failed_units:
            assert any(r.startswith("unreadable source unit: OSError: injected") for r in reasons)
        if name in failed_items:
            assert any(r.startswith("unexpected error: RuntimeError: injected") for r in reasons)
    assert failed_units == set(load_scenarios())


def test_an_unexpected_error_in_one_train_example_is_its_dead_letter(tmp_path, monkeypatch):
    """A test item that fails unexpectedly is its own dead letter (BuildSample); a train item
    that did took the whole build down with a runner traceback. Now it is the same."""
    from proactivebench_builder.core.config import BuildConfig
    from proactivebench_builder.pipeline.reading import train_example_values
    from proactivebench_builder.transforms.coco.scenario import Coco

    def broken(self, key, item):
        raise RuntimeError("a plug-in's bug")

    monkeypatch.setattr(Coco, "build_train_example", broken)
    root = str(tmp_path)
    config = BuildConfig(seed=0, output="/unused", scenarios=("coco",), sources={"coco": root},
                         config_to_scenario={"coco2014": "coco"}, train_sources={"coco": root})
    values = list(train_example_values(results.Candidate("coco/train", "coco2014/k", {}), config))
    assert len(values) == 1 and isinstance(values[0], results.DeadLetter)
    assert values[0].scenario == "coco/train" and "RuntimeError: a plug-in's bug" in values[0].reason
