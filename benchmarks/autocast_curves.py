"""The training loss in float32 and under bf16 autocast, side by side, measured in one run.

Trains the same run twice through `transformer.training_loop.train`, the same seed and the same
batches in the same order, once with amp "off" (float32) and once with amp "on" (bf16 autocast,
emulated where the CPU has no bf16 instructions), and prints and keeps each mode's logged
losses, its final validation loss and its throughput. Appendix 16 plots the two curves:
whether bf16 changes what the model learns, beside what it does to the speed. Also kept: what
amp "auto" chooses on this machine, and why.

    python benchmarks/autocast_curves.py --preset tiny --steps 120 --json results/benchmarks.json
    python benchmarks/autocast_curves.py --preset cpu --steps 400 --log-every 20

--set FIELD=VALUE changes a TrainConfig field, as in train_loop.py. --json appends the
measurement with its provenance to a JSON list (train_step.py's format).
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from train_loop import overrides  # the sibling benchmark's FIELD=VALUE reader
from train_step import record  # the sibling benchmark's JSON writer

from transformer.config import TrainConfig
from transformer.devices import choose_autocast, describe_device, resolve_device
from transformer.results import provenance
from transformer.training import PRESETS
from transformer.training_loop import train

MODES = {"off": "float32", "on": "bfloat16 autocast"}


def curve(cfg: TrainConfig) -> dict:
    """Train `cfg`; its logged steps and losses, final validation loss and mean throughput."""
    summary = train(cfg)
    lines = Path(cfg.out, "metrics.jsonl").read_text().splitlines()
    logged = [r for r in map(json.loads, lines) if "loss" in r]
    rates = [r["tokens_per_s"] for r in logged[1:]]  # the first window holds the warm-up
    return {
        "step": [r["step"] for r in logged],
        "loss": [r["loss"] for r in logged],
        "val_loss": summary["val_loss"],
        "target_tokens_per_s": round(sum(rates) / len(rates), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=120, help="steps of each mode")
    parser.add_argument("--log-every", type=int, default=10, help="steps per logged loss")
    parser.add_argument("--json", type=Path, help="append the measurement to this JSON list")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE of TrainConfig")
    args = parser.parse_args()
    device = resolve_device(args.device)
    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        for amp in MODES:
            cfg = TrainConfig(
                preset=args.preset,
                max_steps=args.steps,
                device=args.device,
                amp=amp,
                out=f"{tmp}/{amp}",
                log_every=args.log_every,
                eval_every=args.steps,
                save_every=args.steps,
                **overrides(args.set),
            )
            curves[amp] = curve(cfg)
            print(f"{MODES[amp]:>18}: {curves[amp]}")
    off, on = curves["off"], curves["on"]
    gap = max(abs(a - b) for a, b in zip(off["loss"], on["loss"], strict=True))
    dtype, why = choose_autocast(device, "auto")
    result = {
        "benchmark": "autocast_curves",
        "preset": args.preset,
        "changes": overrides(args.set),
        "curves": curves,
        "largest_loss_gap": round(gap, 4),
        "bf16_speed_ratio": round(on["target_tokens_per_s"] / off["target_tokens_per_s"], 3),
        "auto_chooses": "bf16" if dtype is not None else "float32",
        "auto_why": why,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "curves"}, indent=1))
    if args.json:
        entry = result | {"provenance": {"device": describe_device(device), **provenance(sys.argv)}}
        record(args.json, entry)


if __name__ == "__main__":
    main()
