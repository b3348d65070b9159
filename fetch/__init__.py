"""Getting the real sources: `run_pipeline.py fetch` and `--verify_sources [--record]`.

- `plan`: a manifest's `downloads:` section, checked, as the files to fetch and the manual steps;
- `download`: fetching those files over HTTP(S) into a source folder: parallel, resumable,
  verified against their pins while they stream in, one line per failed file;
- `folder_state`: fetch's own bookkeeping in a source folder (`.proactivebench-fetch/`);
- `extract`: unpacking a downloaded archive safely (tar, tar.gz, zip);
- `sizes`: what `fetch --dry_run` knows, offline, of each file's size;
- `source_lock`: a source folder's lock file (path, size, sha256 of every file);
- `verify`: comparing source folders with their manifests' pins and lock files.

It stands on the core and reads the scenarios' manifests; the commands (`pipeline/commands/fetch.py`,
the build's `--verify_sources`) sit on top of it.
"""
