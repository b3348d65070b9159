"""Assembling the Beam graph that builds ProactiveBench: options, the build, writers, the
upstream export, reports and the commands around them."""
from proactivebench_builder.core import moved

__version__ = "0.1.0"
moved.install()  # an import of a module that moved from here names its new home
