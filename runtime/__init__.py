"""The evaluation runtime: environments, prompt templates, answer parsing, metrics, model
adapters (`python -m proactivebench_builder.runtime`)."""
from proactivebench_builder.core import moved

moved.install()  # an import of a module that moved from here names its new home
