"""Assembling the Beam graph that builds ProactiveBench: options, the build, writers, the
upstream export, reports and the commands around them."""
__version__ = "0.1.0"
