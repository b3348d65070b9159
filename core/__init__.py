"""The core every other layer stands on: the record contract, file I/O, the output layout, errors,
typed configuration and the declarations scenarios make. It imports nothing else of ours."""
from proactivebench_builder.core import moved

moved.install()  # an import of a module that moved from here names its new home
