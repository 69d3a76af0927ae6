"""Cached greedy decoding of this tree against another commit's, measured in one run.

decode.py times one tree. To say whether a change made decoding slower, both trees must run on
the same machine under the same load: this script checks the other commit out into a temporary
git worktree, then runs each tree's own benchmarks/decode.py with its own package, alternating
tree by tree for --rounds rounds, and reports the median milliseconds of each and their ratio.

    python benchmarks/decode_commits.py 98c23c6            # 64 tokens, 5 rounds of each
    python benchmarks/decode_commits.py 98c23c6 --tokens 128 --rounds 7

Run it on an idle machine: two trees alternating cancel a slow drift of the load, not a
neighbour's burst.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # this tree's root
TIMES = re.compile(r"KV cache\s+([\d.]+) ms, recompute\s+([\d.]+) ms")


def decode_ms(tree: Path, tokens: int, repeats: int) -> tuple[float, float]:
    """(cached, recomputed) median milliseconds of one decode.py run in `tree`."""
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/decode.py",
            "--tokens",
            str(tokens),
            "--repeats",
            str(repeats),
        ],
        cwd=tree,
        env=os.environ | {"PYTHONPATH": str(tree / "src")},
        capture_output=True,
        text=True,
        check=True,
    )
    cached, recomputed = TIMES.search(done.stdout).groups()
    return float(cached), float(recomputed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base", help="the commit to compare with (any git revision)")
    parser.add_argument("--tokens", type=int, default=64, help="output length to decode")
    parser.add_argument("--rounds", type=int, default=5, help="decode.py runs of each tree")
    parser.add_argument("--repeats", type=int, default=3, help="decode.py's own repeats")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base],
            cwd=HERE,
            check=True,
            capture_output=True,
        )
        try:
            trees = {args.base: base, "this tree": HERE}
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for r in range(args.rounds):
                order = list(trees) if r % 2 == 0 else list(reversed(trees))
                for name in order:
                    times[name].append(decode_ms(trees[name], args.tokens, args.repeats))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=HERE, check=True
            )
    medians = {}
    for name, runs in times.items():
        cached = statistics.median(c for c, _ in runs)
        recomputed = statistics.median(r for _, r in runs)
        medians[name] = cached
        print(
            f"{name:>12}: KV cache {cached:7.1f} ms, recompute {recomputed:7.1f} ms "
            f"(median of {args.rounds} runs, {args.tokens} tokens)"
        )
    ratio = medians[args.base] / medians["this tree"]
    print(f"cached decoding, {args.base} time / this tree's time: {ratio:.2f}x")


if __name__ == "__main__":
    main()
