"""One distribution; the top-level folders install under the `proactivebench_builder` namespace,
so nothing generic like `pipeline` or `filters` lands in site-packages. The same file is what
Dataflow's `--setup_file ./setup.py` packages for its workers."""
import os

from setuptools import setup

NAMESPACE = "proactivebench_builder"
FOLDERS = ("core", "fetch", "pipeline", "transforms", "filters", "source_manifests", "runtime")
# one folder per scenario under transforms/ (each a package)
HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO_FOLDERS = sorted(entry.name for entry in os.scandir(os.path.join(HERE, "transforms"))
                          if os.path.exists(os.path.join(entry.path, "__init__.py")))

setup(
    name="proactivebench-builder",
    version="0.1.0",
    description="Rebuilds the ProactiveBench benchmark from its raw sources on Apache Beam, "
                "with a thin evaluation runtime.",
    python_requires=">=3.10",
    packages=[f"{NAMESPACE}.{folder}" for folder in FOLDERS] + [f"{NAMESPACE}.pipeline.commands"]
    + [f"{NAMESPACE}.transforms.{name}" for name in SCENARIO_FOLDERS],
    package_dir={f"{NAMESPACE}.{folder}": folder for folder in FOLDERS},
    package_data={f"{NAMESPACE}.source_manifests": ["*.yaml", "*.json"]},
    install_requires=[
        "apache-beam>=2.77,<2.78",
        "pyarrow>=24,<26",          # beam pins <26, datasets needs >=24
        "pillow>=12.1.1,<13",       # beam's pin
        "numpy>=1.26,<2.5",
        "opencv-python-headless>=4.9",
        "datasets>=4.0",
        "huggingface_hub>=1.0",
        "fsspec>=2024.6",
        "pyyaml>=6",
        "tqdm>=4.66",               # the build's progress display on a terminal
        "requests>=2.31",           # fetch's downloads (fetch/download.py); Beam requires it too
        "filelock>=4.3",            # one build per output folder (its on_acquired holder record)
    ],
    extras_require={
        # wheel: setuptools installs an sdist offline with it (the Dataflow packaging test);
        # pycocotools: the reference the streaming COCO reader is checked against
        # pytest-xdist: the suite runs in two processes (-n 2), each with its own session builds
        "test": ["pytest>=8", "pytest-xdist>=3.5", "dask[distributed]>=2024.8", "build>=1.2",
                 "wheel", "pycocotools>=2.0.7",
                 "hypothesis>=6.100",   # tests/fuzz/: property-based fuzzing of every parser
                 # a real S3 API (moto's server) for publishing to a store that fails mid-way
                 "moto[server]>=5", "s3fs"],
        "dask": ["dask[distributed]>=2024.8"],
        "gcs": ["gcsfs"],            # gs:// sources and outputs (Dataflow workers need it too)
        "s3": ["s3fs"],
        # benchmarks/: memory of the whole process tree (psutil); the COCO reader compared with
        # ijson's C backend (ijson); realistic H.264 videos for ChangeIt (imageio-ffmpeg's ffmpeg)
        "bench": ["psutil", "ijson>=3.3", "imageio-ffmpeg>=0.5"],
        "transformers": ["transformers>=4.45", "torch"],
    },
    entry_points={"console_scripts": [
        # light launchers: Ctrl-C while Beam imports is one line too (core.cli.launch)
        "proactivebench-build=proactivebench_builder.pipeline.commands:build_main",
        "proactivebench-eval=proactivebench_builder.runtime.__main__:launch_evaluate",
    ]},
)
