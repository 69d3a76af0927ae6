"""The flags of one run of a recipe, for a shell to split: a recipe is a grid file (appendix 17's
format, read and checked by `transformer.search.read_grid`) whose trials are the runs.

Printed: the `train` flags that make the trial's TrainConfig (`train_argv`, without --out, which
the caller gives); or with --decoding the flags of the grid's first decoding setting, which
`record` and `ship` take (the fallback); or with --choices the flags of
`benchmarks/choose_decoding.py` that score on val each value the grid's decoding settings take
(their product); or with --shape the flags of `benchmarks/train_loop.py` that time the trial's
model on its batches (its preset and each field the trial sets, except how long it runs, how
often it logs, where, and on what: the probe's options choose those).
`benchmarks/gpu_session.sh all` reads its recipe, benchmarks/grids/gpu.json, through this
script, so that the recipe is fixed in a file that the tests check, not typed on a command line.

    python benchmarks/recipe.py benchmarks/grids/gpu.json en-de
    python benchmarks/recipe.py benchmarks/grids/gpu.json en-de --decoding
    python benchmarks/recipe.py benchmarks/grids/gpu.json en-de --choices
    python benchmarks/recipe.py benchmarks/grids/gpu.json en-de --shape
    python benchmarks/recipe.py benchmarks/grids/gpu.json en-de --set preset=tiny --set max_steps=4

--set FIELD=VALUE changes a TrainConfig field of the trial (as in train_loop.py): gpu_session.sh
shrinks the recipe so with TOY=1, to check the script on a CPU.
"""

import argparse
import shlex
import tempfile
from dataclasses import asdict, fields, replace

from train_loop import overrides  # the sibling benchmark's FIELD=VALUE reader

from transformer.arguments import DECODING_FLAGS
from transformer.config import TrainConfig, train_argv
from transformer.decoding import Decoding
from transformer.search import read_grid


def decoding_argv(decoding: Decoding) -> list[str]:
    """The flags of `record` and `ship` that give `decoding`, every field of it (so that a
    change of a default leaves the recipe as it was)."""
    return [
        text
        for name, flag in DECODING_FLAGS.items()
        for text in (flag, str(getattr(decoding, name)))
    ]


# fields that say how long a run trains, how often it logs and saves, where and on what: not
# its shape
NOT_SHAPE = {"max_steps", "epochs", "max_seconds", "out", "resume", "device", "compile"}
NOT_SHAPE |= {"cuda_graphs", "log_every", "eval_every", "save_every", "keep"}


def shape_argv(cfg: TrainConfig) -> list[str]:
    """The train_loop.py flags of cfg's model and batches: --preset, and --set for every
    other field that differs from TrainConfig's default."""
    default = {f.name: f.default for f in fields(TrainConfig)}
    changed = {k: v for k, v in asdict(cfg).items() if v != default[k] and k not in NOT_SHAPE}
    preset = changed.pop("preset", default["preset"])
    return ["--preset", preset, *(f for k, v in changed.items() for f in ("--set", f"{k}={v}"))]


def choices_argv(decodings: list[Decoding]) -> list[str]:
    """choose_decoding.py's flags: each value the settings take, field by field."""
    argv = []
    for name, flag in DECODING_FLAGS.items():
        values = sorted({getattr(decoding, name) for decoding in decodings})
        argv += [flag, *map(str, values)]
    return argv


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("grid", help="a grid file whose trials are the recipe's runs")
    parser.add_argument("trial", help="the run's trial name (gpu.json: en-de or de-en)")
    parser.add_argument("--decoding", action="store_true", help="print the decoding flags")
    parser.add_argument("--choices", action="store_true", help="print choose_decoding's flags")
    parser.add_argument("--shape", action="store_true", help="print train_loop.py's flags")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs:  # read_grid names each trial's folder
        configs, _, decodings = read_grid(args.grid, runs)
    if args.trial not in configs:
        raise SystemExit(f"{args.grid} has no trial {args.trial!r}: {', '.join(configs)}")
    if args.decoding:
        print(shlex.join(decoding_argv(decodings[0])))
        return
    if args.choices:
        print(shlex.join(choices_argv(decodings)))
        return
    cfg = replace(configs[args.trial], **overrides(args.set), out="RUN")
    if args.shape:
        print(shlex.join(shape_argv(cfg)))
        return
    argv = train_argv(asdict(cfg))
    out = argv.index("--out")
    print(shlex.join(argv[:out] + argv[out + 2 :]))


if __name__ == "__main__":
    main()
