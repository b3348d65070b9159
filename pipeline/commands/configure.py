"""The build's configuration, made from its command line and checked before any work: which
scenarios, where each source is, the `--set` overrides, the filter, the reproducibility stamp,
and whether this build updates part of an existing one (`core.config.BuildConfig`).

Every check here stops the command with one line (a `UsageError` or a `SystemExit` message)
before anything is read or written."""
from __future__ import annotations

import logging
import os

import yaml

from proactivebench_builder.core import fileio
from proactivebench_builder.core.cli import closest, unknown_name
from proactivebench_builder.core.config import (
    KEEP_LIST, NO_FILTER, PREDICTIONS, BuildConfig, Selection, network_url)
from proactivebench_builder.core.errors import (
    MissingPackage, ScenarioError, SourceError, UsageError)
from proactivebench_builder.core.manifests import (
    ManifestError, constraint_problems, parameter_problem, parameter_rule, settable_problem)
from proactivebench_builder.core.released import count_kept, released_counts, released_kept_ids
from proactivebench_builder.filters.coverage import check_before_work, pool_setting_changes
from proactivebench_builder.filters.leakage import (
    RELEASED, KeepListError, keep_list_problem, load_keep_list, released_count_problem)
from proactivebench_builder.filters.predictions import (
    PredictionsError, read_all_predictions, read_predictions, train_confidences,
    unknown_configs_problem)
from proactivebench_builder.pipeline import __version__
from proactivebench_builder.pipeline.import_check import (
    check_frames, check_records, check_unzipped, fingerprint, folder_stand_ins, present_configs,
    scan_config)
from proactivebench_builder.pipeline.miniature import MARKER, ensure_miniature_sources
from proactivebench_builder.pipeline.options import DEFAULT_MINIATURE_ROOT, BuildOptions
from proactivebench_builder.pipeline.partial_rebuild import UpdateRefused, plan_update
from proactivebench_builder.fetch.verify import record_sources, verify_sources
from proactivebench_builder.transforms import (
    PATH_VARIABLE, config_aliases, load_scenarios, manifest_of)
from proactivebench_builder.transforms.base import wrong_return

LOG = logging.getLogger("proactivebench_builder")


def absolute(url: str) -> str:
    return url if "://" in url else os.path.abspath(url)


def choose_scenarios(spec: str) -> dict:
    """The scenarios `--scenarios` names, each with a manifest that loads, checked before any
    work (a scenario author's mistake is one line naming the file)."""
    try:
        registered = load_scenarios()
    except ScenarioError as err:  # a scenario author's mistake
        raise SystemExit(f"scenario registry: {err}") from None
    if spec == "all":
        chosen = registered
    else:
        chosen = {}
        for given in (s.strip() for s in spec.split(",") if s.strip()):
            name = scenario_named(given, registered)
            if name is None:
                raise UsageError("--scenarios: " + unknown_name("scenario", given, registered)
                                 + f"; a scenario of your own is found through {PATH_VARIABLE}"
                                 "=FOLDER or an entry point (README: Adding a scenario)")
            chosen[name] = registered[name]
    for name, cls in chosen.items():
        try:
            cls.read_manifest()
        except ManifestError as err:
            raise SystemExit(f"{cls.manifest_location()}: {err}") from None
    if not chosen:
        raise UsageError(f"--scenarios {spec!r} names no scenario (known: "
                         f"{', '.join(registered)}, or all)")
    return chosen


def scenario_named(given: str, registered: dict) -> str | None:
    """The scenario a --scenarios name means: its own name, or any name `evaluate` takes for its
    config (config name, table short name such as IN-C, declared aliases; any case)."""
    if given in registered:
        return given
    config = config_aliases().get(given.lower())
    return next((n for n, cls in registered.items() if cls.config_name == config), None)


def resolve_sources(opts: BuildOptions, scenarios: dict) -> dict[str, str]:
    """Each scenario's source root: --source NAME=URL, else --sources_root/<source_subdir>, else
    the bundled miniature source (written on first use)."""
    overrides = {}
    for item in opts.source:
        name, sep, url = item.partition("=")
        if not sep or not url.strip():
            raise UsageError(f"--source expects SCENARIO=URL, got {item!r}")
        if name not in scenarios:
            registered = load_scenarios()
            raise UsageError(
                f"--source {item!r}: " + (f"{name} is not among the scenarios built "
                                          f"({', '.join(sorted(scenarios))}; see --scenarios)"
                                          if name in registered else
                                          unknown_name("scenario", name, registered)))
        overrides[name] = absolute(url)
    root = opts.sources_root
    missing = [n for n in scenarios if n not in overrides]
    if root is None and missing:
        root = ensure_miniature_sources(absolute(DEFAULT_MINIATURE_ROOT),
                                        {n: scenarios[n] for n in missing})
    sources = {n: overrides.get(n) or fileio.join(absolute(root), manifest_of(n)["source_subdir"])
               for n in scenarios}
    absent = {n: url for n, url in sources.items() if not source_folder_exists(n, url)}
    if absent:
        raise SystemExit("source folders not found: " + "; ".join(
            f"{n}: {url}" for n, url in sorted(absent.items())) + " (docs/sources.md gives the "
            "layout each scenario expects and where to get it)")
    return sources


def comparable_path(url: str) -> str:
    """A URL as a path to compare folders by: a local one resolved (links, `..`), others as
    written, without a trailing slash."""
    if fileio.is_local(url):
        return os.path.realpath(fileio.local_path(url))
    return url.rstrip("/")


def inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_output_apart(output: str, reads: dict[str, str]) -> None:
    """A build never writes inside what it reads, nor reads inside what it writes: an --output
    in (or holding) a source folder would read its own output as sources on the next build, and
    clearing the output would delete sources. Refused before any work, naming both."""
    out = comparable_path(absolute(output))
    for label, url in reads.items():
        where = comparable_path(url)
        if inside(out, where) or inside(where, out):
            relation = ("is" if out == where else "is inside" if inside(out, where)
                        else "holds")
            raise UsageError(f"--output {output} {relation} {label} ({url}): a build writes "
                             "apart from what it reads; choose an --output outside the sources")


def source_folder_exists(name: str, url: str) -> bool:
    """Whether the source folder `url` exists (a URL the build cannot read: one line); a store
    that cannot be reached is said to be so, in one line (offline, a Dataflow launch read its
    gs:// sources as "not found")."""
    check_readable_url(f"source of {name}", url)
    try:
        return fileio.folder_exists(url)
    except MissingPackage:
        raise
    except Exception as err:  # noqa: BLE001 - the store's own error (network, credentials)
        text = (str(err).splitlines() or [""])[0]
        raise SourceError(f"cannot reach {url}: {type(err).__name__}: {text} (no network, or "
                          "no credentials for the store? The launcher reads the sources' "
                          "folders before any work, on every runner)") from None


def check_readable_url(what: str, url: str) -> None:
    """One line (UsageError) for a folder URL the build may not read (http://: a build does not
    download) or cannot (an unknown protocol); a known protocol whose fsspec package is not
    installed is MissingPackage, naming what to install."""
    if network_url(url):
        raise UsageError(f"{what}: {url}: a build reads folders and storage URLs (gs://, s3://, "
                         "...), not the network: download it first (sources: run_pipeline.py "
                         "fetch)")
    try:
        fileio.filesystem(url)
    except MissingPackage:
        raise
    except (ImportError, ValueError) as err:
        raise UsageError(f"{what}: {url}: cannot be read "
                         f"({' '.join(str(err).split())[:200]})") from None


def parameter_overrides(items: list[str], scenarios: dict) -> dict[str, dict]:
    """--set SCENARIO.PARAMETER=VALUE, checked against the chosen scenarios' manifests: each
    value against its parameter's rule, then the values in force against the manifest's rules
    across parameters (core/manifests.py)."""
    overrides: dict[str, dict] = {}
    for item in items:
        target, sep, value = item.partition("=")
        name, dot, parameter = target.partition(".")
        if not sep or not dot or name not in scenarios:
            raise SystemExit(f"--set expects SCENARIO.PARAMETER=VALUE for a chosen scenario, "
                             f"got {item!r}")
        manifest, see = manifest_of(name), f"(see {scenarios[name].manifest_location()})"
        if parameter not in manifest["parameters"]:
            raise SystemExit(f"--set {item!r}: {name} has no parameter {parameter!r} {see}")
        parsed, problem = None, settable_problem(parameter)
        if problem is None:
            parsed, problem = set_value(value)
        if problem is None:
            problem = parameter_problem(manifest, parameter, parsed) or \
                data_file_problem(scenarios[name], manifest, parameter, parsed)
        if problem:
            raise SystemExit(f"--set {name}.{parameter}: {problem} {see}")
        if parameter in overrides.get(name, {}):
            raise SystemExit(f"--set {name}.{parameter} given twice; give each parameter once")
        overrides.setdefault(name, {})[parameter] = parsed
    for name, values in sorted(overrides.items()):
        manifest = manifest_of(name)
        problems = constraint_problems(manifest, {**manifest["parameters"], **values})
        if problems:
            raise SystemExit(f"--set: {name}: {problems[0]} "
                             f"(see {scenarios[name].manifest_location()})")
    return overrides


def set_value(text: str) -> tuple[object, str | None]:
    """(the value, None) of a --set VALUE read as plain YAML (numbers, strings, booleans, lists,
    mappings), or (None, why not). Anchors and aliases are refused: a value is written out."""
    try:
        if any(isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)
               for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            return None, f"{text[:60]!r}: YAML anchors and aliases (& and *) are not accepted here"
        return yaml.safe_load(text), None
    # PyYAML fails on some malformed scalars with its own IndexError or ValueError (`!!float`
    # alone, `!!binary x`), not a YAMLError: every failure to read the text is the user's
    except Exception as err:  # noqa: BLE001
        detail = " ".join(str(err).split()) or type(err).__name__
        return None, f"{text[:60]!r} is not a plain YAML value ({detail[:160]})"


def data_file_problem(cls, manifest: dict, parameter: str, value) -> str | None:
    """A parameter naming a data file (its rule says `data_file: true`): the file exists beside
    the manifest and reads, before any work."""
    if not parameter_rule(manifest, parameter).get("data_file"):
        return None
    try:
        cls.data_file(value)
    except ManifestError as err:
        return str(err)
    return None


def selection_settings(opts: BuildOptions, aliases: dict[str, str]) -> Selection:
    """The filter settings, checked before any work: a bad predictions file (or one naming a
    config no scenario has), a bad keep list or a keep list on a freshly built pool stops here
    with a clear message. `aliases`: every name of a config, lower case -> the config."""
    if opts.predictions and opts.keep_list:
        raise SystemExit("--predictions and --keep_list are alternatives; give one")
    mode = PREDICTIONS if opts.predictions else KEEP_LIST if opts.keep_list else NO_FILTER
    try:
        if mode == PREDICTIONS:
            problem = unknown_configs_problem(read_all_predictions(opts.predictions),
                                              opts.predictions, aliases)
            if problem:
                raise PredictionsError(problem)
            read_predictions(opts.predictions)  # the test split's rows: the filter's input
            train_confidences(opts.predictions)  # its train rows, if any, fill the train split
        if mode == KEEP_LIST:
            if not opts.import_upstream:
                raise KeepListError(
                    "--keep_list names upstream's sample ids, which only an imported upstream "
                    "release carries (--import_upstream DIR); a pool built from the raw sources "
                    "has its own ids. Filter a fresh pool with --predictions FILE instead.")
            check_keep_list_keyword(opts.keep_list)
            load_keep_list(opts.keep_list)
    except (PredictionsError, KeepListError) as err:
        raise SystemExit(f"cannot filter: {err}") from None
    # recorded absolute (filter.json, the card's stamp): a relative path means nothing elsewhere
    return Selection(mode=mode, predictions=opts.predictions and absolute(opts.predictions),
                     keep_list=opts.keep_list if opts.keep_list in (None, RELEASED)
                     else absolute(opts.keep_list),
                     threshold=opts.filter_threshold, min_models=opts.min_models,
                     allow_partial=opts.allow_partial_predictions)


def check_keep_list_keyword(spec: str) -> None:
    """A keep list that is no file but looks like the keyword (`relased`): say which was meant."""
    if spec != RELEASED and "://" not in spec and not os.path.exists(spec) and closest(
            spec.lower(), [RELEASED]):
        raise KeepListError(f"--keep_list {spec!r}: no such file; did you mean {RELEASED!r} "
                            "(the published keep list)?")


def check_keep_list(spec: str, configs, aliases: dict[str, str]) -> None:
    """Before any work: the keep list names only known configs and lists every config the
    build imports (filters.leakage.keep_list_problem)."""
    problem = keep_list_problem(spec, load_keep_list(spec), list(configs), aliases)
    if problem:
        raise SystemExit(f"cannot filter: {problem}")


def build_config(opts: BuildOptions, argv: list[str]) -> BuildConfig:
    """The whole configuration of the build `argv` asks for, checked before any work."""
    scenarios = choose_scenarios(opts.scenarios)
    config_to_scenario = {cls.config_name: n for n, cls in load_scenarios().items()}
    aliases = config_aliases()
    selection = selection_settings(opts, aliases)
    overrides = parameter_overrides(opts.overrides, scenarios)
    imported = {}
    train_sources = {}
    if opts.import_upstream:
        folder = absolute(opts.import_upstream)
        check_readable_url("--import_upstream", folder)
        check_output_apart(opts.output, {"--import_upstream": folder})
        if not fileio.folder_exists(folder):
            raise UsageError(f"--import_upstream {folder}: no such folder (give the release's "
                             "test/ folder: README, Regenerating the benchmark)")
        configs = present_configs(folder, {scenarios[n].config_name: n for n in scenarios})
        if not configs:
            inner = fileio.join(folder, "test")
            hint = (f"; the release keeps them in its test/ folder: --import_upstream {inner}"
                    if present_configs(inner, {scenarios[n].config_name: n for n in scenarios})
                    else "")
            raise SystemExit(f"--import_upstream {folder}: no <config>_preprocessed.jsonl of the "
                             f"chosen scenarios there{hint}")
        released = selection.keep_list == RELEASED
        if released:
            check_released_present(folder, [scenarios[n].config_name for n in scenarios], configs)
        if selection.mode == KEEP_LIST:
            check_keep_list(opts.keep_list, configs, aliases)
        scans = scan_release(folder, configs, config_to_scenario)
        check_unzipped(folder, scans)
        if released:
            check_released_counts(folder, scans)
        kept_of = kept_ids(selection, opts.keep_list, scans)
        for scan in scans:
            check_records(folder, scan, kept_of.get(scan.config), opts.max_bad_fraction,
                          released)
        check_frames(folder, scans, kept_of, opts.max_bad_fraction, released)
        scenarios = {config_to_scenario[c]: scenarios[config_to_scenario[c]] for c in configs}
        imported = {"import_upstream": folder, "import_configs": tuple(configs),
                    "keep_ids": True}
        sources = {n: folder for n in scenarios}
        try:
            origin = fingerprint(folder, configs)
        except OSError as err:  # e.g. a JSONL that is a FIFO, or unreadable
            raise UsageError(f"--import_upstream {folder}: {err.filename or ''}: "
                             f"{err.strerror or err}") from None
        selection = Selection(**{**selection.as_dict(), "origin": origin})
        found_stand_ins = imported_stand_ins(folder, scans, selection)
    else:
        sources = resolve_sources(opts, scenarios)
        reads = {f"the source of {n}": url for n, url in sources.items()}
        reads["--sources_root" if opts.sources_root else "the miniature sources"] = absolute(
            opts.sources_root or DEFAULT_MINIATURE_ROOT)
        check_output_apart(opts.output, reads)
        if not opts.no_train:
            train_sources = {n: sources[n] for n, cls in scenarios.items() if cls.has_train_split}
    stamp = {
        "code_version": __version__,
        "command": "run_pipeline.py " + " ".join(argv),
        "seed": opts.seed,
        "origin": selection.origin,
        "parameter_overrides": overrides,
        "manifests": {n: {"sha256": scenarios[n].manifest_sha256()} for n in sorted(scenarios)},
        "filter": {"mode": selection.mode, "threshold": selection.threshold,
                   "min_models": selection.min_models},
    }
    for what in ("predictions", "keep_list"):  # said only when given: the default stamp is kept
        if getattr(selection, what):
            stamp["filter"][what] = getattr(selection, what)
    config = BuildConfig(
        seed=opts.seed, output=absolute(opts.output), scenarios=tuple(sorted(scenarios)),
        sources=sources, config_to_scenario=config_to_scenario, selection=selection,
        train_sources=train_sources, overrides=overrides,
        export_upstream=opts.upstream_export, stamp=stamp,
        stand_ins=found_stand_ins if imported else stand_ins(
            scenarios, sources, overrides, opts.seed, verified=opts.verify_sources,
            filtered=selection.mode != NO_FILTER),
        **imported)
    config = with_partial_update(config)
    if selection.mode == PREDICTIONS:
        check_predictions_cover_pool(config)
    return config


RELEASE_HINT = ("fetch the release's whole test/ folder and unzip its archives there: README, "
                "Regenerating the benchmark")


def check_released_present(folder: str, chosen: list[str], present: list[str]) -> None:
    """--keep_list released: the folder holds every chosen config of the release."""
    counts = released_counts()
    missing = [c for c in chosen if c in counts and c not in present]
    if missing:
        raise UsageError(
            f"--keep_list released: {folder} lacks " + ", ".join(
                f"{c}_preprocessed.jsonl (the release keeps {counts[c]:,} samples)"
                for c in missing) + f"; {RELEASE_HINT}, or leave those configs out with "
            "--scenarios")


def scan_release(folder: str, configs: list[str], config_to_scenario: dict) -> list:
    """Every chosen config's records, read and judged once (pipeline.commands.import_check)."""
    try:
        return [scan_config(folder, c, config_to_scenario[c]) for c in configs]
    except (OSError, ValueError) as err:  # e.g. a JSONL that is a FIFO, or far too large
        raise UsageError(f"--import_upstream {folder}: "
                         f"{(err.filename or '') + ': ' if getattr(err, 'filename', None) else ''}"
                         f"{getattr(err, 'strerror', None) or err}") from None


def check_released_counts(folder: str, scans: list) -> None:
    """--keep_list released: each config keeps as many samples as the release does, counted
    from its records' ids as upstream's loader counts them; else one line naming each config
    and both numbers."""
    problems = []
    for scan in scans:
        problem = released_count_problem(scan.config, count_kept(scan.config, scan.ids),
                                         "its records keep")
        if problem:
            problems.append(problem + f" ({scan.config}_preprocessed.jsonl)")
    if problems:
        raise UsageError(f"--keep_list released: {folder} is not the release's test/ folder: "
                         + "; ".join(problems) + f"; {RELEASE_HINT}")


def kept_ids(selection: Selection, keep_list: str | None, scans: list) -> dict:
    """config -> the ids the filter keeps, for the configs a keep list filters (the released
    one: as upstream's loader keeps them, less the clips it skips); predictions or no filter
    keep every record (absent)."""
    if selection.mode != KEEP_LIST:
        return {}
    if keep_list == RELEASED:
        listed = released_kept_ids()
        return {s.config: frozenset(i for i, strong in s.ids
                                    if i in listed.get(s.config, ()) and strong is not False)
                for s in scans}
    kept = load_keep_list(keep_list)
    return {s.config: frozenset(kept.get(s.config, ())) for s in scans}


NOT_RELEASED = {
    NO_FILTER: "every record of the folder: without the released keep list (--keep_list "
               "released) this is the whole pool, not the released split",
    KEEP_LIST: "the records a keep list of your own keeps ({keep_list}), not the released keep "
               "list: not the released split",
    PREDICTIONS: "the records your predictions keep ({predictions}), not the released keep "
                 "list: not the released split",
}


def imported_stand_ins(folder: str, scans: list, selection: Selection) -> dict:
    """scenario -> what in an import stands in for the benchmark: what the folder's records are
    (pipeline.import_check.folder_stand_ins), and, unless the released keep list was applied
    (its counts checked before), that the split is not the released one. So the card says
    "imported from the upstream release" only of the released split of records that look like
    the release's."""
    found = folder_stand_ins(folder, scans)
    if selection.keep_list != RELEASED:
        what = NOT_RELEASED[selection.mode].format(**selection.as_dict())
        for scan in scans:
            found.setdefault(scan.name, []).append({"kind": "not_released_split", "what": what})
    return found


MINIATURE = ("built from the bundled miniature source (a few generated items in the real "
             "layout), not the real dataset")


UNVERIFIED = ("sources not verified against the manifests' pins (build with --verify_sources; "
              "--verify_sources --record once to write their lock files)")
UNFILTERED = ("no leakage filter: the test split is the whole unfiltered pool (filter it with "
              "--predictions FILE: README, Regenerating the benchmark)")


def stand_ins(scenarios: dict, sources: dict, overrides: dict, seed: int,
              verified: bool = False, filtered: bool = False) -> dict:
    """scenario -> what its part of the build holds in place of the benchmark's own data: a
    miniature source (its marker file, whoever points at it), and the placeholders the scenario
    reports (`Scenario.placeholders`, e.g. MVP-N's class names), asked here, before any work;
    a bad labels file is the build's one configuration error, raised now. A source that is not
    a miniature is also a stand-in when this build did not verify it (`verified`: the pins and
    lock files were checked) or applies no leakage filter (`filtered`); a miniature is not
    the benchmark already, so those are not added to it (the default build says no more)."""
    found = {}
    for name, cls in sorted(scenarios.items()):
        items = []
        if fileio.exists(fileio.join(sources[name], MARKER)):
            items.append({"kind": "miniature", "what": MINIATURE})
        else:
            items += [{"kind": kind, "what": what} for kind, what, done in (
                ("unverified", UNVERIFIED, verified), ("unfiltered", UNFILTERED, filtered))
                if not done]
        scenario = cls(seed, sources[name])
        scenario.params.update(overrides.get(name, {}))
        placeholders = scenario.placeholders()
        if not isinstance(placeholders, (list, tuple)) or \
                not all(isinstance(text, str) for text in placeholders):
            raise wrong_return(scenario, "placeholders", placeholders,
                               "a list of lines (str), [] when nothing stands in")
        items += [{"kind": "placeholders", "what": text} for text in placeholders]
        if items:
            found[name] = items
    return found


def with_partial_update(config: BuildConfig) -> BuildConfig:
    """Some scenarios into a folder holding a build of more: update them, keep the others
    (pipeline/partial_rebuild.py), or refuse before any work naming the way out."""
    capable = {n for n, cls in load_scenarios().items() if cls.has_train_split}
    try:
        update = plan_update(config, capable)
    except UpdateRefused as err:
        raise SystemExit(str(err)) from None
    if not update:
        return config
    LOG.info("updating %s in %s; keeping %s as built", ", ".join(config.scenarios),
             config.output, ", ".join(update["kept"]))
    train_sources, overrides = config.train_sources, config.overrides
    if update["train_sources"]:  # the shared train split is rebuilt whole
        train_sources = {**train_sources, **update["train_sources"]}
        overrides = {**update["train_overrides"], **overrides}
    return config.replace(update=update, train_sources=train_sources, overrides=overrides)


def check_predictions_cover_pool(config: BuildConfig) -> None:
    """Before any work: the predictions cover what the filter will judge (filters/coverage.py),
    and the build does not replace a finished build in its folder by one of another pool (a
    slipped --seed would fail the filter only after the work, the folder's good build lost)."""
    if not config.update:
        changes = pool_setting_changes(config)
        if changes:
            raise SystemExit(
                f"cannot filter: {config.output} holds a finished build whose pool this build "
                f"would not make again: {'; '.join(changes)}. Predictions played on that pool "
                "do not fit the pool of these settings, and the build would replace it: give "
                "the folder's settings, or build into another --output (the folder is kept)")
    problem = check_before_work(read_predictions(config.selection.predictions), config)
    if problem:
        raise SystemExit(f"cannot filter: {problem}")


def what_was_recorded(written: list[str], record: bool) -> str:
    """The truth about the lock files of a failed verification: none, or exactly which."""
    if not record:
        return "nothing was built"
    if not written:
        return "no lock file was written; nothing was built"
    return ("lock files were written only for " + ", ".join(w.split(":", 1)[0] for w in written)
            + ", whose folders passed; nothing was built")


def check_sources(config: BuildConfig, record: bool = False) -> None:
    """--verify_sources: the source folders agree with their manifests' pins (and with their lock
    files), before any work; with --record, their lock files are written once they do."""
    if config.import_upstream:
        raise SystemExit("--verify_sources checks raw sources against their manifests; an "
                         "imported upstream release has no such pins")
    if record:
        problems, written = record_sources(config.sources)
    else:
        problems, written = verify_sources(config.sources), []
    for line in written:
        LOG.info("lock file %s", line)
    if problems:
        raise SystemExit(f"source verification failed ({what_was_recorded(written, record)}): "
                         + "; ".join(problems))
    LOG.info("sources agree with their manifests' pins" +
             (" (lock files recorded)" if record else ""))
