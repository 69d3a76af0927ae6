"""The GPU session's choices, made from what it measured (`benchmarks/gpu_session.sh all`).

The session's probe times the recipe's shape through `train_loop.py` with each loop option, one
process alone, then two at once with the fastest, and keeps the entries in a JSON list of its
own. This script reads that list, and the val scores of `choose_decoding.py`, and prints what
the session does next: the rules are here, in Python that tests/test_gpu_session.py checks,
not in shell arithmetic.

    python benchmarks/gpu_plan.py option PROBE_JSON     # the fastest option alone: its name
    python benchmarks/gpu_plan.py flags OPTION          # train_loop.py's flags for it
    python benchmarks/gpu_plan.py settings OPTION       # the recipe's --set for it (recipe.py)
    python benchmarks/gpu_plan.py schedule PROBE_JSON OPTION --train-seconds 110 \
        --overhead-seconds 5 --seconds-left 400      # at-once or one-after-other
    python benchmarks/gpu_plan.py decoding TRIALS_JSONL RUN   # the run's best val decoding
    python benchmarks/gpu_plan.py failed JSON [JSON ...] --option graphs --reason TEXT \
        --device cuda

Each choice also writes its reason, from the measured numbers, to standard error (the log).
"""

import argparse
import json
import shlex
import sys
from pathlib import Path

from recipe import decoding_argv  # the sibling's flags of a decoding setting
from train_step import record  # the sibling benchmark's JSON writer

from transformer.decoding import Decoding
from transformer.devices import describe_device, resolve_device
from transformer.results import provenance
from transformer.search import read_trials

# the loop options the probe times: train_loop.py's flags, and TrainConfig's fields
OPTIONS = {
    "eager": {"compile": False, "cuda_graphs": False},
    "compiled": {"compile": True, "cuda_graphs": False},
    "graphs": {"compile": True, "cuda_graphs": True},
}


def option_of(entry: dict) -> str:
    """The option a train_loop entry ran."""
    fields = {"compile": entry["compile"], "cuda_graphs": entry["cuda_graphs"]}
    return next(name for name, option in OPTIONS.items() if option == fields)


def rates(entries: list[dict], option: str, at_once: int) -> list[float]:
    """Steps/s of each process that ran `option` with `at_once` processes; none if one of
    them failed (the others' rates were not measured beside it)."""
    ran = [
        e for e in entries if option_of(e) == option and e.get("processes_at_once", 1) == at_once
    ]
    return [] if any("failed" in e for e in ran) else [e["steps_per_s"] for e in ran]


def fastest(entries: list[dict]) -> tuple[str, str]:
    """The option whose lone process made the most steps/s, and why. With none that ran,
    eager: the loop as it runs by default."""
    alone = {name: rates(entries, name, 1) for name in OPTIONS}
    ran = {name: max(r) for name, r in alone.items() if r}
    if not ran:
        return "eager", "no option ran alone in the probe: eager, the loop's default"
    best = max(ran, key=ran.get)
    measured = ", ".join(f"{name} {rate:.1f}" for name, rate in ran.items())
    return best, f"{best}: the most steps/s alone ({measured})"


def schedule(
    entries: list[dict],
    option: str,
    train_seconds: float,
    overhead_seconds: float,
    seconds_left: float,
) -> tuple[str, str]:
    """How the two directions train: "at-once" (two processes on the one device) or
    "one-after-other" (each with the whole device), and why. Each trains train_seconds
    either way, so the faster per process gives each direction more steps; one after
    the other is chosen only if it is faster and both fit in seconds_left, each taking
    train_seconds and overhead_seconds more."""
    alone, together = rates(entries, option, 1), rates(entries, option, 2)
    one_after = 2 * (train_seconds + overhead_seconds)
    fits = one_after <= seconds_left
    if not alone:
        return "at-once", f"{option} alone has no measurement: as the first call trained"
    if not together and fits:
        return "one-after-other", f"two processes of {option} did not run in the probe"
    if not together:
        return "at-once", f"no pair ran, but {one_after:.0f} s in turn exceed {seconds_left:.0f}"
    each, solo = min(together), max(alone)
    steps = f"{solo * train_seconds:.0f} steps in turn, {each * train_seconds:.0f} at once"
    if solo > each and fits:
        return "one-after-other", f"{steps}; {one_after:.0f} of {seconds_left:.0f} s"
    if solo > each:
        return "at-once", f"{steps}, but {one_after:.0f} s in turn exceed {seconds_left:.0f}"
    return "at-once", steps


def best_decoding(trials: list[dict], run: str) -> tuple[Decoding, str]:
    """The decoding with the highest lowercased val BLEU among the trials of run folder
    `run` (choose_decoding.py's records), and why."""
    mine = [t for t in trials if t["trial"] == Path(run).name and "val" in t]
    if not mine:
        raise SystemExit(f"no val scores of {run} to choose a decoding from")
    best = max(mine, key=lambda t: t["val"]["sacrebleu_lc"])
    scores = ", ".join(
        f"{t['decoding']['average']}/{t['decoding']['beam_size']}/{t['decoding']['alpha']}:"
        f" {t['val']['sacrebleu_lc']}"
        for t in mine
    )
    decoding = Decoding(**{k: v for k, v in best["decoding"].items() if k != "max_sentences"})
    return decoding, f"val BLEU (average/beam/alpha: lc) {scores}"


def record_failure(paths: list[Path], option: str, at_once: int, reason: str, device: str) -> dict:
    """Add an entry to each JSON list: the probe of `option` on `device` failed or was
    skipped, and why. The device is named as the measured entries name it, if it is here."""
    try:
        device = describe_device(resolve_device(device))
    except ValueError:  # a device this machine lacks: its name as given
        pass
    entry = {"benchmark": "train_loop", "probe": True, **OPTIONS[option], "failed": reason}
    entry |= {"processes_at_once": at_once} if at_once > 1 else {}
    entry["provenance"] = {"device": device, **provenance(sys.argv)}
    for path in paths:
        record(path, entry)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    option = commands.add_parser("option", help="the fastest option alone")
    option.add_argument("probe", type=Path)
    flags = commands.add_parser("flags", help="train_loop.py's flags of an option")
    flags.add_argument("option", choices=OPTIONS)
    settings = commands.add_parser("settings", help="recipe.py's --set of an option")
    settings.add_argument("option", choices=OPTIONS)
    plan = commands.add_parser("schedule", help="at-once or one-after-other")
    plan.add_argument("probe", type=Path)
    plan.add_argument("option", choices=OPTIONS)
    plan.add_argument("--train-seconds", type=float, required=True)
    plan.add_argument("--overhead-seconds", type=float, required=True)
    plan.add_argument("--seconds-left", type=float, required=True)
    decoding = commands.add_parser("decoding", help="a run's best decoding on val")
    decoding.add_argument("trials", type=Path)
    decoding.add_argument("run")
    failed = commands.add_parser("failed", help="record a probe that failed or was skipped")
    failed.add_argument("json", type=Path, nargs="+")
    failed.add_argument("--option", choices=OPTIONS, required=True)
    failed.add_argument("--at-once", type=int, default=1)
    failed.add_argument("--reason", required=True)
    failed.add_argument("--device", required=True, help="the device the probe ran on")
    args = parser.parse_args()

    def probe_entries() -> list[dict]:
        return json.loads(args.probe.read_text()) if args.probe.exists() else []

    if args.command == "option":
        choice, why = fastest(probe_entries())
    elif args.command == "flags":
        names = {"compile": "--compile", "cuda_graphs": "--cuda-graphs"}
        choice, why = shlex.join(names[k] for k, on in OPTIONS[args.option].items() if on), ""
    elif args.command == "settings":
        sets = [f"{k}={str(on).lower()}" for k, on in OPTIONS[args.option].items()]
        choice, why = shlex.join(word for s in sets for word in ("--set", s)), ""
    elif args.command == "schedule":
        times = (args.train_seconds, args.overhead_seconds, args.seconds_left)
        choice, why = schedule(probe_entries(), args.option, *times)
    elif args.command == "decoding":
        best, why = best_decoding(read_trials(args.trials), args.run)
        choice = shlex.join(decoding_argv(best))
    else:
        record_failure(args.json, args.option, args.at_once, args.reason, args.device)
        choice, why = "", f"{args.option} recorded as failed: {args.reason}"
    if why:
        print(f"{args.command}: {why}", file=sys.stderr)
    print(choice)


if __name__ == "__main__":
    main()
