"""ImageNet-C's reading lists only what it needs: the release holds 19 corruptions x 5 severities
x 1,000 classes x 50 files (4.75 M files), and no listing may grow with all of them; a class
folder linked to its parent is read once."""
from __future__ import annotations

import os

from conftest import balanced, build, copy_sources, read_json
from proactivebench_builder.core import fileio
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.transforms.imagenet_c.scenario import ImageNetC

EXTRA = ("snow", "frost", "fog")  # in the release, not in the manifest


def test_reading_lists_one_folder_per_class_and_each_corruption_once(tmp_path, monkeypatch):
    corruptions = list(manifest_of("imagenet_c")["corruption_actions"]) + list(EXTRA)
    wnids = ["n01440764", "n01443537", "n01484850", "n01491361"]
    for c_index, corruption in enumerate(corruptions):
        for severity in range(1, 6):
            for wnid in wnids:
                folder = tmp_path / corruption / str(severity) / wnid
                folder.mkdir(parents=True)
                for i in range(8):
                    (folder / f"ILSVRC2012_val_{i:08d}.JPEG").touch()
    listed = []
    real = fileio.list_names
    monkeypatch.setattr(fileio, "list_names", lambda url: listed.append(url) or real(url))
    scenario = ImageNetC(0, str(tmp_path))
    units = scenario.list_units()
    values = [v for unit in units for v in scenario.read_unit(unit)]
    assert units == wnids
    assert sum(1 for v in values if v.kind == "candidate") == 4 * 5
    present = len(corruptions) - len(EXTRA)
    # the root once; each present corruption's severity-5 folder (to find the classes); then
    # one class folder per unit: never a severity below 5, never a class twice
    assert len(listed) == 1 + present + len(wnids)
    relative = [os.path.relpath(u, str(tmp_path)) for u in listed]
    assert all(r == "." or r.split(os.sep)[1] == "5" for r in relative)
    assert len(set(relative)) == len(relative)


def test_a_class_folder_linked_to_its_parent_is_read_once(tmp_path, miniature_root):
    """A link inside the root that loops (`n09999999 -> ..`) is no way out and no endless walk:
    the build ends, and what it reads through the link is accounted for."""
    sources = copy_sources(miniature_root, tmp_path, "ImageNet-C")
    os.symlink("..", os.path.join(sources, "ImageNet-C", "contrast", "5", "n09999999"))
    result, output = build(tmp_path, sources, "imagenet_c")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok" and balanced(report)
