"""What Dataflow's `--setup_file ./setup.py` ships to its workers, installed and run elsewhere.

Beam 2.77's stager builds the source distribution with `python -m build --no-isolation --sdist
--outdir TMP <folder of setup.py>` from that folder (`runners/portability/stager.py`,
`_build_setup_package`), and every worker pip-installs it. This test runs the same command,
checks the archive holds every module and every manifest/data file, installs it into a fresh
virtual environment, and builds the miniature benchmark from that installation, from a working
directory outside the source tree, comparing the shards with the build from the source tree.

To keep it fast and offline, the sdist is first built into a wheel by the running interpreter
(`pip wheel --no-deps --no-build-isolation`, the build a worker's pip does), then the wheel is
installed with `--no-deps --no-index` into a new environment whose dependencies, Beam included,
come from the running environment's site-packages through a `.pth` file (as the worker image's
would). That is hermetic: `venv --system-site-packages` would expose the *base* interpreter's
packages, not those of the virtual environment the tests run in, and pass or fail with whatever
the machine happens to hold. A path listed in a `.pth` file is not itself a site directory, so
the `.pth` import hook of this repository's editable install stays inactive in the new
environment; the test still proves that the source tree is not on `sys.path`, and that after
the build every loaded `proactivebench_builder` module (including those the DoFns imported
while running in-process) was loaded from the environment's own copy.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import tarfile

import pytest
from conftest import builds, shard_files

SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_FOLDERS = ("pipeline", "transforms", "filters", "source_manifests", "runtime", "core",
                   "fetch")
DATA_SUFFIXES = (".yaml", ".json")

# Runs inside the new environment: proves where the code comes from, then builds.
DRIVER = r'''
import json, os, sys
source_tree, report_path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]

def inside(path, folder):
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)

def loaded_files():
    return {name: getattr(module, "__file__", None) for name, module in sorted(sys.modules.items())
            if name.startswith("proactivebench_builder.")}

# a virtual environment made inside the clone (.venv) lends its site-packages to this run: that
# exposes installed dependencies, not the source tree (where modules load from is checked below)
on_path = [p for p in sys.path if p and os.path.isdir(p) and os.path.basename(p) != "site-packages"
           and (inside(p, source_tree) or os.path.realpath(p) == os.path.realpath(source_tree))]
from proactivebench_builder.pipeline.commands import main as cli
status = cli.main(argv)
json.dump({"status": status, "prefix": sys.prefix, "source_tree_on_path": on_path,
           "cwd": os.getcwd(), "modules": loaded_files()}, open(report_path, "w"))
'''


def expected_members() -> set[str]:
    """Every module and data file of the package folders, as the source tree has them."""
    found = set()
    for folder in PACKAGE_FOLDERS:
        for parent, dirs, names in os.walk(os.path.join(SOURCE_TREE, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            relative = os.path.relpath(parent, SOURCE_TREE)
            for name in names:
                if name.endswith(".py") or (folder == "source_manifests" and
                                            name.endswith(DATA_SUFFIXES)):
                    found.add(f"{relative}/{name}")
    return found


def build_sdist(tree: str, outdir: str) -> str:
    """The archive Beam's stager would build for `--setup_file <tree>/setup.py` (same command)."""
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir",
                    outdir, tree], cwd=tree, check=True, capture_output=True)
    archives = [n for n in os.listdir(outdir) if n.endswith(".tar.gz")]
    assert len(archives) == 1, archives
    return os.path.join(outdir, archives[0])


def install_in_fresh_venv(sdist: str, tmp_path_factory) -> str:
    """The python of a fresh virtual environment with `sdist` installed (see the module
    docstring)."""
    wheels = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "--wheel-dir", str(wheels), sdist],
                   check=True, capture_output=True)
    wheel = [str(wheels / n) for n in os.listdir(wheels) if n.endswith(".whl")]
    assert len(wheel) == 1, wheel
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    python = str(venv / "bin" / "python")
    own_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], check=True, capture_output=True,
                              text=True).stdout.strip()
    with open(os.path.join(own_site, "dependencies-of-the-test-run.pth"), "w") as pth:
        pth.write("\n".join(site.getsitepackages()) + "\n")
    # The running environment's pip installs into the new one (--target would skip its metadata);
    # --ignore-installed, or pip would first uninstall the running environment's own copy (the
    # user's `pip install -e .`), leaving it without the package after the test run.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--ignore-installed", "--prefix", str(venv), "--no-warn-script-location",
                    wheel[0]], check=True, capture_output=True)
    return python


@pytest.fixture(scope="module")
@builds
def sdist(tmp_path_factory) -> str:
    return build_sdist(SOURCE_TREE, str(tmp_path_factory.mktemp("sdist")))


@pytest.fixture(scope="module")
@builds
def venv_python(sdist, tmp_path_factory) -> str:
    """A fresh virtual environment with the sdist installed (see the module docstring)."""
    return install_in_fresh_venv(sdist, tmp_path_factory)


def test_sdist_holds_every_module_and_manifest(sdist):
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    root = names[0].split("/", 1)[0]
    members = {n.split("/", 1)[1] for n in names if "/" in n}
    missing = expected_members() - members
    assert not missing, f"the sdist lacks {sorted(missing)}"
    assert {"setup.py", "PKG-INFO"} <= members
    manifests = {m for m in members if m.startswith("source_manifests/")
                 and m.endswith(DATA_SUFFIXES)}
    assert len(manifests) >= 7 and root.startswith("proactivebench")


def test_installed_sdist_builds_the_benchmark_outside_the_source_tree(
        venv_python, tmp_path, built_miniature):
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    (workdir / "driver.py").write_text(DRIVER)
    report_path = str(workdir / "where.json")
    output = str(workdir / "out")
    # No --sources_root: the installed package writes its own miniature sources under workdir.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([venv_python, "driver.py", SOURCE_TREE, report_path,
                           f"--output={output}", "--runner=FnApiRunner"],
                          cwd=str(workdir), env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(report_path, encoding="utf-8") as handle:
        where = json.load(handle)
    assert where["status"] == 0
    venv = where["prefix"]
    assert where["source_tree_on_path"] == []
    assert not where["cwd"].startswith(SOURCE_TREE)
    assert where["modules"]["proactivebench_builder.pipeline"].startswith(venv + os.sep)
    from_elsewhere = {n: f for n, f in where["modules"].items()
                      if f is not None and not f.startswith(venv + os.sep)}
    assert not from_elsewhere, f"modules not loaded from the installed copy: {from_elsewhere}"
    assert "proactivebench_builder.transforms.quickdraw" in where["modules"]
    assert os.path.isdir(workdir / "build" / "miniature_sources")
    # The installed code builds exactly what the source tree builds.
    installed, reference = shard_files(output), shard_files(built_miniature)
    assert installed and sorted(installed) == sorted(reference)
    for name in installed:
        assert installed[name] == reference[name], f"{name} differs from the source-tree build"
    for report in ("dead_letters.jsonl",):
        with open(os.path.join(output, "reports", report), "rb") as a, \
                open(os.path.join(built_miniature, "reports", report), "rb") as b:
            assert a.read() == b.read()
