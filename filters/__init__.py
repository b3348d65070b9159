"""Sample filters: first-round leakage filtering from stored predictions, the released keep
list."""
from proactivebench_builder.core import moved

moved.install()  # an import of a module that moved from here names its new home
