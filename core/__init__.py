"""The core every other layer stands on: the record contract, file I/O, the output layout, errors,
typed configuration and the declarations scenarios make. It imports nothing else of ours."""
