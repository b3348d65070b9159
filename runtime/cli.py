"""`python -m proactivebench_builder.runtime evaluate ...`: play a built benchmark against a model.

Per-sample results go to a JSONL file as they finish (`runtime.results_file`: one line per
sample, written whole: the trajectory and its outcome, what decided it, and a fingerprint of the
sample played, `loading.sample_fingerprint`); a rerun with the same file skips the samples
already there, so an interrupted run resumes. A line is reused only by the run that decides it
(`run_signature`: the settings, the model by adapter, name and endpoint, the OEG judge likewise)
for a sample of the current --data: lines for samples no longer in the data (e.g. filtered out
by a rebuild) are left out of the table, and lines for a current sample played on other content
(a rebuild with another seed or sources), or written before lines recorded their sample or their
model's identity, are refused in one line before any work. A last line cut short by a kill is
dropped with a warning and played again; any other damaged line is named by its number.
At the end a table of acc / psr (MCQA, reference) or cc / ps / agg (OEG, with --judge) per
scenario and on average is printed. A run that would play nothing (no playable config), or data
holding rows that cannot be played (each named), is refused.
With --first-round-only the file holds first-turn predictions in the leakage filter's schema
(`runtime.predictions_schema`), the model named by its identity.

Ctrl-C (and SIGTERM, SIGHUP where core.cli turns them into the same interruption) cancels the
requests in flight at once (`Model.cancel`), so the run ends within a second with whole lines.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from proactivebench_builder import transforms
from proactivebench_builder.core import phases
from proactivebench_builder.core.cli import (
    DEBUG_HELP, CommandParser, at_interrupt, closest, non_negative_int, positive_float,
    positive_int, run_command)
from proactivebench_builder.core.errors import CommandError, ScenarioCodeError
from proactivebench_builder.core.play import MalformedRecord
from proactivebench_builder.core.released import released_counts
from proactivebench_builder.transforms.base import code_failure
from proactivebench_builder.runtime import (
    environments as envs, loading, metrics, open_ended, results_file)
from proactivebench_builder.runtime.episodes import run_episode
from proactivebench_builder.runtime.model_specs import (
    ModelSpecError, check_model_spec, is_policy, load_model, model_identity)
from proactivebench_builder.runtime.models import ModelError
from proactivebench_builder.runtime.predictions_schema import prediction_row

PROG = "python -m proactivebench_builder.runtime"
JUDGE_KINDS = ("openai:", "hf:")  # the adapters that generate text; policies only play
MAX_CONCURRENCY = 256  # a thread per sample in flight: more only costs memory
READ_AHEAD = 1  # samples whose frames are read per thread ahead: its next is ready when it is free


def parse_args(argv=None) -> argparse.Namespace:
    """The command line, checked before any work (flags, values, model spec, scenario names);
    a mistake exits 2 with one line on stderr."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = CommandParser(prog=PROG)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=CommandParser)
    ev = commands.add_parser("evaluate", help="play the benchmark against a model")
    ev.add_argument("--data", required=True,
                    help="built folder (Parquet), upstream layout folder, or Hub dataset id")
    ev.add_argument("--model", required=True,
                    help="oracle | always-abstain | always-suggest | random[:SEED] | "
                         "first-option | openai:MODEL[@BASE_URL] | hf:MODEL_ID")
    ev.add_argument("--scenarios", default="all",
                    help="comma-separated configs or scenario names (default: all present)")
    ev.add_argument("--mode", choices=envs.MODES, default="mcqa")
    ev.add_argument("--hint", action="store_true")
    ev.add_argument("--random_suggestions", action="store_true")
    ev.add_argument("--history", action="store_true", help="conversation-history ablation")
    ev.add_argument("--first_round_only", action="store_true",
                    help="one turn per sample; write predictions in the leakage-filter schema "
                         "(plays the unfiltered pool, the samples the filter judges)")
    ev.add_argument("--split", choices=tuple(loading.PARQUET_SPLITS), default=None,
                    help="the filtered test split or the unfiltered pool (default: test, or "
                         "unfiltered with --first_round_only)")
    ev.add_argument("--all_records", action="store_true",
                    help="an upstream-layout folder holding the release's records (its test/ "
                         "folder): play every record, not only the released split that "
                         "upstream's loader keeps (its FILTER: 7,557 samples), which is the "
                         "default there")
    ev.add_argument("--judge", help="model spec of the OEG judge (e.g. openai:Qwen/Qwen3-8B@URL)")
    ev.add_argument("--oeg_samples", type=non_negative_int, default=open_ended.OEG_SAMPLES,
                    help="OEG: samples per scenario (upstream: 100, seed-0 shuffle); 0 = all")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--concurrency", type=positive_int, default=1,
                    help=f"samples played in parallel (at most {MAX_CONCURRENCY}; one thread "
                         "each)")
    ev.add_argument("--timeout", type=positive_float, default=60.0,
                    help="HTTP adapters: seconds one request may take in all (connecting, "
                         "sending, the whole reply)")
    ev.add_argument("--max_retries", type=non_negative_int, default=3, help="HTTP adapters")
    ev.add_argument("--results", required=True, help="JSONL results file (appended, resumable)")
    ev.add_argument("--no_progress", action="store_true",
                    help="no progress bar on stderr (there is none when stderr is not a "
                         "terminal)")
    ev.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        # argparse would read the flag's value as the command ("invalid choice: 'oracle'").
        rest = [a for a in argv if a != "evaluate"]  # (a command given after a flag: moved)
        shown = " ".join(rest[:2]) + (" ..." if len(rest) > 2 else "")
        parser.error(f"the command is missing; did you mean: {PROG} evaluate {shown}?")
    args = parser.parse_args(argv)
    if args.concurrency > MAX_CONCURRENCY:
        ev.error(f"argument --concurrency: at most {MAX_CONCURRENCY} (one thread per sample "
                 f"in flight), got {args.concurrency}")
    if os.path.isdir(args.results):
        ev.error(f"--results {args.results} is a folder; give the path of a JSONL file")
    for flag, spec in (("--model", args.model), ("--judge", args.judge)):
        try:
            if spec is not None:
                check_model_spec(spec)
        except ModelSpecError as err:
            ev.error(f"{flag}: {err}")
    if args.judge is not None and not args.judge.startswith(JUDGE_KINDS):
        ev.error(f"--judge: {args.judge!r} cannot judge: a judge writes text, so it is "
                 "openai:MODEL[@BASE_URL] or hf:MODEL_ID (the built-in policies only play)")
    if args.mode == "oeg" and args.judge is None:
        ev.error("--mode oeg needs --judge SPEC: open-ended answers are scored by a judge model "
                 "(openai:MODEL[@BASE_URL] or hf:MODEL_ID)")
    if args.scenarios != "all":
        aliases = transforms.config_aliases()  # the names resolve_config accepts
        for name in (s.strip() for s in args.scenarios.split(",") if s.strip()):
            if name.lower() not in aliases:
                guess = closest(name.lower(), aliases)
                hint = f"; did you mean {guess!r}?" if guess else ""
                ev.error(f"--scenarios: unknown scenario {name!r}{hint} (known: the configs "
                         f"{', '.join(transforms.known_configs())}, or their scenario names)")
    return args


def selected_configs(args) -> list[str]:
    if args.scenarios == "all":
        return loading.available_configs(args.data)
    wanted = [transforms.resolve_config(s) for s in args.scenarios.split(",") if s.strip()]
    if loading.data_kind(args.data) == loading.HUB:  # what the Hub holds shows when it loads
        return list(dict.fromkeys(wanted))
    present = loading.available_configs(args.data)
    return [c for c in dict.fromkeys(wanted) if c in present]


def played_split(args) -> str:
    """First-round predictions feed the leakage filter, which judges the whole pool (the test
    split of a filtered build is only what one filter kept), so they play `unfiltered`."""
    if args.split:
        return args.split
    return "unfiltered" if args.first_round_only else "test"


def run_signature(args) -> dict:
    """What identifies a result line as belonging to this run (for resuming and the table):
    every setting that decides a result, the model and (OEG) the judge by their adapter,
    model and endpoint (`model_specs.model_identity`); the sample is identified by its key and
    fingerprint. Prediction lines (--first_round_only) keep the filter's schema: there the
    model's identity is their `model`."""
    return {"model": load_name(args.model), "model_spec": model_identity(args.model),
            "mode": args.mode, "hint": args.hint,
            "random_suggestions": args.random_suggestions, "history": args.history,
            "first_round_only": args.first_round_only, "seed": args.seed,
            "judge": model_identity(args.judge) if args.mode == "oeg" and args.judge else None}


def load_name(spec: str) -> str:
    """The name a model spec's adapter reports (`Model.name`), without loading it."""
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        return rest.partition("@")[0]
    if kind == "hf":
        return rest
    return model_identity(spec)


def _model_options(args, spec: str) -> dict:
    # requests in flight follow --concurrency (one per sample played at once), not the
    # adapter's default of 8
    return {"timeout": args.timeout, "max_retries": args.max_retries,
            "max_concurrency": args.concurrency} if spec.startswith("openai:") else {}


def play_sample(row: dict, config: str, args, model, judge) -> dict:
    env = envs.make_environment(row, mode=args.mode, hint=args.hint,
                                random_suggestions=args.random_suggestions,
                                history=args.history, seed=args.seed, config=config)
    if args.first_round_only:
        stats = run_episode(env, model, first_round_only=True)
        turn = env.turns[0]
        return prediction_row(model_identity(args.model), config, row.get("key"), row.get("id"),
                              turn.answer_text, turn.chosen, bool(env.correct))
    if args.mode == "oeg":
        stats = run_episode(env, model)
        stats.update(open_ended_result(env, judge, config))
        return stats
    return run_episode(env, model)


def open_ended_result(env, judge, config: str) -> dict:
    valid = env.open_ended_answers()
    answer = env.turns[0].answer_text
    result = {"valid_answers": valid, "judge_output": None}
    if judge is None:
        return result
    prompt = env.reset().question
    raw = judge.generate(open_ended.judge_messages(prompt, valid, answer))
    result["judge_output"] = raw
    result.update(open_ended.parse_judge_prediction(valid, open_ended.strip_thinking(raw),
                                                    config))
    return result


class UnplayableSample(CommandError):
    """A sample its environment refuses while it is played (a frame that does not decode, a
    view too large, a frame changed since it was checked): one line naming it; what was played
    so far is kept."""
    exit_code = 2
    prefix = None


def unplayable(args, config: str, sample, err: BaseException) -> UnplayableSample:
    return UnplayableSample(f"--data {args.data}: sample {sample.row.get('key')!r} ({config}) "
                            f"cannot be played: {err} (the results played so far are in "
                            f"{args.results})")


def raise_as_scenario_failure(err: Exception, config: str) -> None:
    """Raise `err` as the one line of a ScenarioCodeError when the scenario's own code raised
    it, else as it is (a bug of ours keeps its traceback)."""
    line = scenario_code_failure(err, config)
    if line is None:
        raise err
    raise ScenarioCodeError(line) from err


def scenario_code_failure(err: BaseException, config: str) -> str | None:
    """The one line naming the scenario whose own code (its play declaration's hooks) raised
    `err` while a sample of `config` was played; None when the error is not its code's."""
    cls = transforms.scenario_for_config(config)
    return None if cls is None else code_failure(err, cls)


def samples_of(args, config: str, split: str, on_bad, keep) -> list[loading.Sample]:
    """The samples of `config` to play (checked, held without their frames); a scenario's own
    code that raises while they are read (its frames' paths in an upstream-layout folder) is
    one line, its author's to fix."""
    try:
        return list(loading.iter_samples(args.data, config, split, on_bad, keep))
    except (CommandError, OSError, SystemExit):
        raise
    except Exception as err:  # noqa: BLE001 - a scenario's own code, or a bug
        raise_as_scenario_failure(err, config)


def show_progress(args) -> bool:
    """A bar only for a person watching: not with --no_progress, nor into a pipe or a log
    (its carriage-return frames would fill it)."""
    return not args.no_progress and sys.stderr.isatty()


def evaluate(args) -> dict:
    signature = run_signature(args)
    results_file.check_usable(args.results)  # a FIFO, /dev/null...: refused before its lock
    # Into a log, one line per phase (reading a large split takes a while before any sample
    # is played); on a terminal, the samples' bar says it.
    mode = None if args.no_progress or sys.stderr.isatty() else phases.LINES
    with results_file.one_writer(args.results, signature), \
            phases.showing(mode, f"{PROG} evaluate"):  # a job started twice: refused
        return evaluate_alone(args, signature)


def evaluate_alone(args, signature: dict) -> dict:
    # an unusable --results is refused before any work; other runs' lines are checked, not held
    found = results_file.read(args.results, keep=lambda line: of_this_run(line, signature))
    samples = current_samples(args)  # {(config, key): (fingerprint, sample)}
    done = reusable_results(found, signature, samples, args.first_round_only)
    todo = [(config, sample) for (config, key), (_, sample) in samples.items()
            if (config, key) not in done]
    model = load_model(args.model, **_model_options(args, args.model))
    judge = load_model(args.judge, **_model_options(args, args.judge)) \
        if args.judge and args.mode == "oeg" else None
    models = [m for m in (model, judge) if m is not None]

    def stop_requests():  # Ctrl-C, SIGTERM: requests in flight end now, not after retries
        for m in models:
            m.cancel()

    if todo:
        with phases.phase(f"playing {len(todo):,} samples with {signature['model_spec']}"
                          + (f" ({len(done):,} done in an earlier run)" if done else "")):
            pass
    with results_file.Writer(found) as out, at_interrupt(stop_requests), \
            tqdm(total=len(todo), desc=f"{signature['model_spec']} {args.mode}",
                 unit="sample", disable=not show_progress(args)) as bar, \
            ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool:
        def finish(config: str, sample: loading.Sample, future) -> None:
            """Write the result of a sample played, in the order of `todo`."""
            try:
                result = dict(future.result())
            except MalformedRecord as err:
                raise unplayable(args, config, sample, err) from err
            except (CommandError, OSError):
                raise
            except Exception as err:  # noqa: BLE001 - a scenario's own code, or a bug
                raise_as_scenario_failure(err, config)
            result.setdefault("config", None)
            # Prediction lines keep exactly the filter's schema (no run fields).
            out.write(result if args.first_round_only else {
                **signature, **result,
                SAMPLE_FINGERPRINT: samples[(config, sample.row.get("key"))][0]})
            bar.update(1)

        # Frames are read here, in todo's (shard) order, for the samples in play: those the
        # threads play and READ_AHEAD per thread queued behind them. Nothing more is held.
        in_play = collections.deque()
        try:
            for config, sample in todo:
                try:
                    row = sample.playable()
                except loading.BadRecord as err:  # changed since it was checked
                    while in_play:
                        finish(*in_play.popleft())
                    raise unplayable(args, config, sample, err) from err
                in_play.append((config, sample,
                                pool.submit(play_sample, row, config, args, model, judge)))
                if len(in_play) >= args.concurrency * (1 + READ_AHEAD):
                    finish(*in_play.popleft())
            while in_play:
                finish(*in_play.popleft())
        except BaseException:  # Ctrl-C or a failing model: drop the queued samples, so only
            stop_requests()     # those in flight are waited for, and end those at once
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    results = reusable_results(
        results_file.read(args.results, keep=lambda line: of_this_run(line, signature)),
        signature, samples, args.first_round_only)
    return summarise(list(results.values()), args)


# Each result line names the sample it was played on; a resume reuses a line only for the same
# sample of the current --data (a rebuild with another seed, sources or filter changes rows).
SAMPLE_FINGERPRINT = "sample_fingerprint"
MAX_NAMED = 20  # bad rows named one line each; the rest counted


def current_samples(args) -> dict:
    """{(config, key): (fingerprint, loading.Sample)} of what this run plays (each row held
    without its frames, read again when it is played); refuses, before any work, a run that
    would play nothing (and says why), and data holding rows that cannot be played (each named
    in one line on stderr: nothing of such data is played)."""
    if args.split == "unfiltered" and loading.data_kind(args.data) == loading.UPSTREAM:
        raise SystemExit(f"--split unfiltered: --data {args.data} is an upstream-layout folder, "
                         "which holds one split (what was exported); the unfiltered pool is "
                         "in the build folder (or on the Hub)")
    if args.all_records and loading.data_kind(args.data) != loading.UPSTREAM:
        # refused rather than ignored: the run would spend a model's time on the test split
        # while its user asked for every record
        raise SystemExit(f"--all_records: --data {args.data} is not an upstream-layout folder; "
                         "--all_records is for one (the release's test/ folder), and a build "
                         "folder's (or the Hub's) whole pool is --split unfiltered")
    configs = selected_configs(args)
    if not configs:
        raise SystemExit(f"nothing to evaluate: {why_no_configs(args)}")
    split, samples, bad = played_split(args), {}, []

    def on_bad(where: str, reason: str) -> None:
        if len(bad) < MAX_NAMED:
            print(f"evaluate: {where}: {reason}", file=sys.stderr)
        bad.append(where)

    keep, note = released_keep(args, configs, split)
    for config in configs:
        with phases.phase(f"reading the {split} split of {config} from {args.data}"):
            found = samples_of(args, config, split, on_bad,
                               keep.get(config) if keep else None)
        if args.mode == "oeg" and args.oeg_samples:
            found = open_ended.oeg_subset(sorted(found, key=lambda s: s.row["id"]), args.seed,
                                          args.oeg_samples)
        for sample in found:
            samples[(config, sample.row.get("key"))] = (
                row_fingerprint(sample.row, args.first_round_only), sample)
    if bad:
        more = f", {len(bad) - MAX_NAMED} more not shown" if len(bad) > MAX_NAMED else ""
        raise SystemExit(f"--data {args.data}: {len(bad)} records cannot be played (named "
                         f"above{more}); nothing was played")
    if not samples:
        raise SystemExit(f"nothing to evaluate: the {split} split of {args.data} holds no "
                         f"samples for {', '.join(configs)}")
    if note:  # said once the samples are known to be played (a refusal says only why)
        print(note, file=sys.stderr)
    return samples


def released_keep(args, configs: list[str], split: str) -> tuple[dict | None, str | None]:
    """(the released keep list to apply: config -> ids, or None; the line saying what is
    played, or None). Only for an upstream-layout folder that is not our export and holds
    configs of the release: the released split, as upstream's loader keeps it, when the folder
    holds the release's records and the test split is played (--first_round_only judges the
    whole pool); else every record, said to be no released split."""
    if (loading.data_kind(args.data) != loading.UPSTREAM or loading.is_build_export(args.data)
            or not set(configs) & set(released_counts())):  # only scenarios of one's own
        return None, None
    keep = loading.released_split(args.data, configs)
    if keep and split == "test" and not args.all_records:
        return keep, (f"evaluate: {args.data} holds the release's records: playing the released "
                      f"split ({sum(len(ids) for ids in keep.values()):,} ids listed for "
                      f"{', '.join(sorted(keep))}), as upstream's loader does (--all_records "
                      "plays every record)")
    why = ("as asked (--all_records)" if keep and args.all_records else
           "--first_round_only plays the pool" if keep else
           "its records do not hold the released split's counts")
    return None, (f"evaluate: playing every record of {args.data} ({why}): not the released "
                  "split, so scores are not comparable with the paper's (import it with "
                  "--keep_list released, or give the release's whole test/ folder)")


def why_no_configs(args) -> str:
    found = loading.configs_in(args.data)
    if not found:
        return f"--data {args.data} holds no config"
    if args.scenarios == "all":  # every config found was skipped, each named on stderr above
        return (f"no config of {args.data} ({', '.join(found)}) has a registered scenario; "
                "make the scenario modules visible with PROACTIVEBENCH_SCENARIO_PATH=FOLDER or "
                "an entry point (README: Adding a scenario)")
    return (f"--scenarios {args.scenarios} selects none of the playable configs of "
            f"{args.data} (found: {', '.join(found)})")


def row_fingerprint(row: dict, first_round_only: bool):
    """What a result line records of its sample. Prediction lines keep the filter's schema, so
    there it is the sample's id (which changes when the pool's keys change)."""
    return row.get("id") if first_round_only else loading.sample_fingerprint(row)


def line_fingerprint(line: dict, first_round_only: bool):
    return line.get("id") if first_round_only else line.get(SAMPLE_FINGERPRINT)


# What a reused line must hold, by what it is (the table reads these): name -> (test, expected)
_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
_TEXT = (lambda v: isinstance(v, str), "text")
_FLAG = (lambda v: isinstance(v, bool), "true or false")
_VERDICT = (lambda v: type(v) is int and v in (0, 1), "0 or 1")
IDENTITY_FIELDS = {"config": _TEXT, "key": _TEXT, SAMPLE_FINGERPRINT: _TEXT}
PREDICTION_IDENTITY = {"config": _TEXT, "key": _TEXT, "id": _INT}
TABLE_FIELDS = {
    "mcqa": {"correct_prediction": _FLAG, "num_turns": _INT},
    "oeg": {"category_prediction": _VERDICT, "proactive_suggestion": _VERDICT,
            "aggregate": _VERDICT},
    "first_round": {"correct": _FLAG},
}


def _field_problem(line: dict, fields: dict) -> str | None:
    for name, (test, expected) in fields.items():
        if name not in line:
            return f"lacks {name!r}"
        if not test(line[name]):
            return f"{name!r} is {str(line[name])[:40]!r}, not {expected}"
    return None


def reusable_results(found: results_file.ResultsFile, signature: dict, samples: dict,
                     first_round_only: bool) -> dict:
    """{(config, key): line} of this run's earlier lines for samples of the current data (lines
    for other samples are left out of the table). A line of this run that does not hold what
    identifies its sample, or what the table reads, is named by its number (the file is
    damaged). A line for a current key played on different content (another build), or written
    before lines recorded their sample or their model's adapter and endpoint, is refused in one
    line: its result cannot be reused nor silently replaced."""
    reusable, stale, legacy = {}, [], []
    if first_round_only:
        identity, table = PREDICTION_IDENTITY, TABLE_FIELDS["first_round"]
    else:
        identity = IDENTITY_FIELDS if "model_spec" in signature else {}
        table = TABLE_FIELDS["oeg" if signature["mode"] == "oeg" else "mcqa"]
    for number, line in found.lines:
        if not _matches(line, signature):
            if _written_before_identities(line, signature):
                legacy.append(number)
            continue
        ident = (line.get("config"), line.get("key"))
        problem = _field_problem(line, {"config": _TEXT, "key": _TEXT})
        if problem:
            raise found.damaged(number, problem)
        if line_fingerprint(line, first_round_only) is None:  # written before fingerprints
            if ident in samples:
                stale.append(line)
            continue
        problem = _field_problem(line, identity)
        if problem:
            raise found.damaged(number, problem)
        if ident not in samples:
            continue
        if line_fingerprint(line, first_round_only) == samples[ident][0]:
            problem = _field_problem(line, table)
            if problem:
                raise found.damaged(number, problem)
            reusable[ident] = line
        else:
            stale.append(line)
    who = signature["model_spec"]
    if legacy:
        raise SystemExit(f"--results {found.path} holds {len(legacy)} results of "
                         f"{signature['model']} written before result lines recorded the "
                         "model's adapter and endpoint and the judge (e.g. line "
                         f"{legacy[0]}): they may be another model's; use a new --results "
                         "file or delete it")
    if stale:
        old = sum(line_fingerprint(s, first_round_only) is None for s in stale)
        why = (f" ({old} written before result lines recorded their sample)" if old else "")
        raise SystemExit(f"--results {found.path} holds {len(stale)} results of {who} "
                         f"from other data{why} (e.g. key {stale[0].get('key')!r}); use a new "
                         "--results file or delete it")
    return reusable


def of_this_run(result: dict, signature: dict) -> bool:
    """Whether a results line is one `reusable_results` reads: this run's, or one written like
    it before lines recorded the model's identity (refused there, by number)."""
    return _matches(result, signature) or _written_before_identities(result, signature)


def _matches(result: dict, signature: dict) -> bool:
    if signature["first_round_only"]:
        return "schema_version" in result and result.get("model") == signature["model_spec"]
    if "schema_version" in result:
        return False
    return all(result.get(k) == v for k, v in signature.items())


def _written_before_identities(result: dict, signature: dict) -> bool:
    """A line of a run like this one written before lines recorded the model's adapter and
    endpoint (and the judge): which model wrote it cannot be told."""
    if signature["first_round_only"]:  # a built-in policy's identity is its name
        return ("schema_version" in result and signature["model"] != signature["model_spec"]
                and result.get("model") == signature["model"]
                and not is_policy(signature["model"]))
    old = {k: v for k, v in signature.items() if k not in ("model_spec", "judge")}
    return ("model_spec" not in result and "schema_version" not in result
            and all(result.get(k) == v for k, v in old.items()))


def summarise(results: list[dict], args) -> dict:
    if args.first_round_only:
        rows = [{"config": r["config"], "correct_prediction": r["correct"], "num_turns": 1}
                for r in results]
        return metrics.by_scenario(rows)
    if args.mode == "oeg":
        judged = [r for r in results if "aggregate" in r]
        return metrics.by_scenario(judged, metrics.open_ended_metrics)
    return metrics.by_scenario(results)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_command(PROG, evaluate_command, argv)


def evaluate_command(argv: list[str]) -> int:
    args = parse_args(argv)
    loading.check_data(args.data)  # a failed, unfinished or changed build: refused at once
    results_file.check_apart(args.results, args.data)
    try:
        table = evaluate(args)
    except ModelError as err:  # an endpoint that keeps failing: not a bug, and resumable
        print(f"{PROG} evaluate: the model failed: {err} (results so far are in "
              f"{args.results}; rerun the same command to resume)", file=sys.stderr)
        return 1
    print(metrics.format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
