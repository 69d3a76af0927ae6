"""Throughput of the real training loop (`transformer.training_loop.train`), measured in one run.

The loop runs as users run it, on a preset's batches of Multi30k, with the host reading device
values only at its log points. The warm-up is left out of the rates: at least --warmup steps, and
compiled, until every batch shape has come once (its graph built; with CUDA graphs three times,
the graph recorded). Then --steps steps are timed, or with --seconds as many as take about that
long at the rate of 10 steps measured first (gpu_session.sh's probe). Printed:

- target tokens/s and steps/s of the loop, and its mean training loss over the timed steps (the
  same batches in the same order for every option, so bf16 or compile should not move it);
- FLOPs per second, counted by PyTorch's FlopCounterMode for every batch shape the loop ran
  (padding included), and the model FLOPs utilisation (MFU) against the device's dense bf16
  peak on a GPU we know (fp32 peak: not tabulated; MFU is then left out);
- the number of graphs torch.compile built (with --compile), and the batch shapes;
- the host reads of tensor values made by the package per step, outside log points;
- with --startup: seconds from process start to step 10 of `python -m transformer train`; always:
  seconds from the loop's own start (data, model, compile; no interpreter or import) to step 10;
- unless --no-bare: the loop's throughput divided by the bare `train_step` throughput on the
  same batches (the share of time the loop itself costs; 1.0 means none);
- with --profile N: where N more steps go, by torch.profiler (kernels a step, how busy they
  kept the device, the ops that take the most time on the host and on the device).

    python benchmarks/train_loop.py --preset tiny                # CPU
    python benchmarks/train_loop.py --preset small
    python benchmarks/train_loop.py --preset base --device cuda --compile --startup \
        --json results/benchmarks.json
    python benchmarks/train_loop.py --preset cpu --set amp=on  # bf16 autocast on any CPU

--set FIELD=VALUE changes any TrainConfig field of the run (a model size, the token budget, a
dropout, amp). The run's own choice is --set amp=auto (the default: bf16 on a CUDA device with
bf16 and on a CPU with bf16 instructions, float32 elsewhere); --set amp=on and --set amp=off
measure both modes on this machine, which shows whether auto chose the faster one.

--json appends the measurement with its provenance to a JSON list (train_step.py's format; give
it twice for two lists). --at-once N --process I notes that this was the I-th of N processes
that ran at the same time.
"""

import argparse
import copy
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode
from train_step import record  # the sibling benchmark's JSON writer

from transformer.config import TrainConfig, train_argv
from transformer.devices import (
    compiled_graphs,
    describe_device,
    host_reads,
    peak_flops,
    resolve_device,
)
from transformer.results import provenance
from transformer.run_state import Run, start_run
from transformer.tokenizer import PAD_ID
from transformer.training import PRESETS, label_smoothed_loss, train_step
from transformer.training_loop import LogSums, endless, run_steps, take_step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def planned_batches(run: Run, first: int, last: int) -> list:
    """Batches first..last of the run's order, across epochs, as the loop sees them."""
    batches, epoch = [], 0
    while len(batches) < last:
        batches += run.data.epoch_batches(epoch)
        epoch += 1
    return batches[first:last]


def flops_per_shape(run: Run) -> dict[tuple[int, int], int]:
    """FLOPs of one forward and backward pass for each batch shape, counted on a copy."""
    model, amp_dtype = copy.deepcopy(run.model), run.amp_dtype
    counts = {}
    for batch in run.data.epoch_batches(0):
        shape = tuple(batch.src.shape)
        if shape not in counts:
            with (
                FlopCounterMode(display=False) as counter,
                torch.autocast(run.device.type, amp_dtype, enabled=amp_dtype is not None),
            ):
                logits = model(batch.src, batch.tgt_in)
                label_smoothed_loss(logits, batch.tgt_out).backward()
            counts[shape] = counter.get_total_flops()
    return counts


def switch(text: str) -> bool:
    """A bool field's VALUE: true or false (also 1 or 0, on or off)."""
    value = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}
    if text.lower() not in value:
        raise ValueError(f"{text!r} is not true or false")
    return value[text.lower()]


def overrides(assignments: list[str]) -> dict:
    """TrainConfig fields from FIELD=VALUE texts, each VALUE read as its field's type."""
    types = {f.name: str(f.type) for f in dataclasses.fields(TrainConfig)}
    changes = {}
    for text in assignments:
        name, _, value = text.partition("=")
        if name not in types:
            raise SystemExit(f"--set {text}: TrainConfig has no field {name!r}")
        kinds = {"bool": switch, "float": float, "int": int}
        kind = next((k for word, k in kinds.items() if word in types[name]), str)
        try:
            changes[name] = kind(value)
        except ValueError as error:
            raise SystemExit(f"--set {text}: {error}") from None
    return changes


def warmup_steps(run: Run, at_least: int) -> int:
    """Untimed steps: at least `at_least`, and compiled, enough that every batch shape of
    the run's order has come once (its graph built), or with CUDA graphs three times (its
    graph also recorded, then replayed)."""
    times = 3 if run.cfg.cuda_graphs else 1 if run.cfg.compile else 0
    shapes = {tuple(batch.src.shape) for batch in run.data.epoch_batches(0)}
    seen, last = dict.fromkeys(shapes, 0), len(run.data) * times
    for step, batch in enumerate(planned_batches(run, 0, last), 1):
        seen[tuple(batch.src.shape)] += 1
        if min(seen.values()) >= times:
            return max(at_least, step)
    return max(at_least, last)


def run_loop(cfg: TrainConfig, warmup: int, seconds: float | None) -> dict:
    """Train through run_steps: untimed steps (warmup_steps), then cfg.max_steps more, or
    as many as take about `seconds` at the rate of 10 steps after the warm-up; the rates
    are over those. Also the seconds from start_run to the end of step 10, warm-up
    included (the loop's own start: no interpreter or import)."""
    started = time.perf_counter()
    run = start_run(cfg, device=resolve_device(cfg.device))
    run_steps(run, 10)  # a log point ends it: the device has caught up
    to_step_10 = time.perf_counter() - started
    warmup, flops = warmup_steps(run, max(warmup, 10)), flops_per_shape(run)
    run_steps(run, warmup)  # compiles and warms up
    steps = cfg.max_steps  # timed
    if seconds is not None:
        calibration = run_steps(run, warmup + 10)
        per_step = calibration["target_tokens"] / calibration["tokens_per_s"] / 10
        steps = max(1, round(seconds / per_step))
    first = run.step
    batches = planned_batches(run, first, first + steps)
    with host_reads() as reads:
        last = run_steps(run, first + steps)  # its rate leaves out the final evaluation
    tokens = sum(int((b.tgt_out != PAD_ID).sum()) for b in batches)
    log_points = ("read: tolist", "evaluate_loss: tolist")
    return {
        "run": run,
        "seconds": tokens / last["tokens_per_s"],
        "steps": len(batches),
        "target_tokens": tokens,
        "flops": sum(flops[tuple(b.src.shape)] for b in batches),
        "host_reads": {k: v for k, v in reads.items() if k not in log_points},
        "shapes": sorted({tuple(b.src.shape) for b in batches}),
        "loss": last["loss"],  # the mean training loss of the timed steps
        "first": first,
        "loop_seconds_to_step_10": to_step_10,
    }


def profile_steps(run: Run, steps: int) -> dict:
    """Where `steps` more steps of the loop go, by torch.profiler: the loop's own step
    (take_step), its sums read once at the end as at a log point. Per step: the wall time
    (the profiler's own cost included), on a CUDA device the kernels launched and the share
    of the wall they kept it busy, and the ops with the most self time on the host and on
    the device: [name, ms a step, calls a step]."""
    cuda = run.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sums, batches = LogSums(run.device), endless(run.data)
    with profile(activities=activities) as profiled:
        start = time.perf_counter()
        for _ in range(steps):
            take_step(run, next(batches), sums)
        sums.read(run.world_size)  # the host waits for the device here
        wall = time.perf_counter() - start
    events = profiled.key_averages()

    def top(field: str) -> list:
        ranked = sorted(events, key=lambda e: getattr(e, field), reverse=True)[:6]
        per_step = [(e.key[:60], getattr(e, field) / 1e3 / steps, e.count / steps) for e in ranked]
        return [[name, round(ms, 3), round(calls, 1)] for name, ms, calls in per_step if ms > 0]

    kernels = sum(e.count for e in events if e.device_type == DeviceType.CUDA)
    device_seconds = sum(e.self_device_time_total for e in events) / 1e6
    return {
        "steps": steps,
        "ms_per_step": round(wall / steps * 1e3, 3),
        "kernels_per_step": round(kernels / steps, 1) if cuda else None,
        "device_busy": round(device_seconds / wall, 3) if cuda else None,
        "top_host_ms": top("self_cpu_time_total"),
        "top_device_ms": top("self_device_time_total") if cuda else None,
    }


def bare_steps(run: Run, first: int, last: int) -> float:
    """Seconds of train_step alone on batches first..last of the run's order, with no loop
    around it."""
    batches = planned_batches(run, first, last)
    synchronize(run.device)
    start = time.perf_counter()
    for batch in batches:
        train_step(
            run.wrapped_model,
            batch,
            run.optimizer,
            run.scheduler,
            autocast_dtype=run.amp_dtype,
        )
    synchronize(run.device)
    return time.perf_counter() - start


def seconds_to_step_10(cfg: TrainConfig) -> float:
    """Wall seconds from starting `python -m transformer train` until it writes its record of
    step 10 (no evaluation or checkpoint falls on that step); the process is then stopped."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp, "run", "metrics.jsonl")
        cadences = dict(max_steps=1000, log_every=10, eval_every=1000, save_every=1000)
        run = dataclasses.replace(cfg, out=str(metrics.parent), **cadences)
        argv = [sys.executable, "-m", "transformer", "train", *train_argv(run)]
        env = os.environ | {"TQDM_DISABLE": "1"}
        start = time.perf_counter()
        log = Path(tmp, "stderr.txt")
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
        try:
            while not (metrics.exists() and metrics.read_text().endswith("\n")):
                if process.poll() is not None:
                    raise RuntimeError(f"train exited before step 10:\n{log.read_text()}")
                time.sleep(0.01)
            return time.perf_counter() - start
        finally:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="small")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=100, help="timed steps, after the warm-up")
    parser.add_argument("--seconds", type=float, help="instead of --steps: time about this long")
    parser.add_argument("--warmup", type=int, default=20, help="untimed first steps, at least")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--cuda-graphs", action="store_true", help="with --compile: CUDA graphs")
    parser.add_argument("--startup", action="store_true", help="also time process start to step 10")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare train_step timing")
    parser.add_argument("--profile", type=int, default=0, help="then profile this many steps")
    parser.add_argument("--json", type=Path, action="append", default=[], help="append the result")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE of TrainConfig")
    parser.add_argument("--at-once", type=int, default=1, help="processes run at once (noted)")
    parser.add_argument("--process", type=int, default=1, help="which of them this is (noted)")
    args = parser.parse_args()
    big = 10**9  # log points: only at the end of each run() call
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(
            preset=args.preset,
            max_steps=args.steps,
            device=args.device,
            compile=args.compile,
            cuda_graphs=args.cuda_graphs,
            out=f"{tmp}/run",
            log_every=big,
            eval_every=big,
            save_every=big,
            **overrides(args.set),
        )
        loop = run_loop(cfg, args.warmup, args.seconds)
        run, device = loop["run"], loop["run"].device
        first, last = loop["first"], loop["first"] + loop["steps"]
        profiled = None
        if args.profile:
            try:  # a diagnosis: its failure must not lose the measurement above
                profiled = profile_steps(run, args.profile)
            except Exception as error:  # whatever the profiler raises
                profiled = {"failed": f"{type(error).__name__}: {error}"}
        bare = None if args.no_bare else bare_steps(run, first, last)
    rate = loop["target_tokens"] / loop["seconds"]
    peak = peak_flops(device)
    result = {
        "benchmark": "train_loop",
        "preset": args.preset,
        "changes": overrides(args.set),
        "compile": args.compile,
        "cuda_graphs": args.cuda_graphs,
        "amp": run.amp_dtype is not None,  # bf16 autocast
        "amp_why": run.amp_why,
        "steps_timed": loop["steps"],
        "loss_of_timed_steps": round(loop["loss"], 4),  # same seed: comparable across options
        "target_tokens_per_s": round(rate, 1),
        "steps_per_s": round(loop["steps"] / loop["seconds"], 2),
        "tflops": round(loop["flops"] / loop["seconds"] / 1e12, 3),
        "mfu": round(loop["flops"] / loop["seconds"] / peak, 4) if peak else None,
        "batch_shapes": len(loop["shapes"]),
        "compiled_graphs": compiled_graphs() if args.compile else None,
        "host_reads_per_step": round(sum(loop["host_reads"].values()) / loop["steps"], 3),
        "loop_over_bare_step": None if bare is None else round(bare / loop["seconds"], 3),
        "seconds_to_step_10": round(seconds_to_step_10(cfg), 1) if args.startup else None,
        "loop_seconds_to_step_10": round(loop["loop_seconds_to_step_10"], 1),
        "profile": profiled,
    } | ({"processes_at_once": args.at_once, "process": args.process} if args.at_once > 1 else {})
    print(f"preset {args.preset} on {describe_device(device)}, autocast {run.amp_dtype}")
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    entry = result | {"provenance": {"device": describe_device(device), **provenance(sys.argv)}}
    for path in args.json:
        record(path, entry)


if __name__ == "__main__":
    main()
