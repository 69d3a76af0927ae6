"""Training throughput of our Transformer against torch.nn.Transformer, measured in one run.

Both models get the same configuration (a preset of `transformer.training`), the same shared and
tied embeddings, the same real Multi30k batches (grouped by length, cut to a token budget), and
the same `train_step`: label-smoothed loss, Adam with the Noam schedule, gradient clipping. They
differ only in the encoder and decoder stacks. After a warm-up the two models alternate pass by
pass, and the median pass time is reported. The last line prints the ratio ours / nn.Transformer
in target tokens per second.

    python benchmarks/train_step.py                        # the paper's base config, CPU
    python benchmarks/train_step.py --preset small         # the config appendix 17 trains
    python benchmarks/train_step.py --device cuda --amp --compile --json results/benchmarks.json

With --compile, torch.compile'd copies of both models are timed too. The FLOPs of one pass are
counted once by PyTorch's FlopCounterMode (forward and backward, matrix products and attention),
which gives the achieved TFLOP/s and, on a GPU with a known bf16 peak, its share of that peak.
On CUDA the peak memory of each model's passes is reported. --json appends the measurement, with
its provenance (device, torch, commit, command), to a JSON list, replacing an earlier entry of
the same preset, device, precision and compile setting.
"""

import argparse
import fcntl
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from transformer.batching import load_pairs
from transformer.buckets import Buckets
from transformer.config import TrainConfig
from transformer.devices import choose_autocast, describe_device, peak_flops
from transformer.embeddings import TransformerEmbedding
from transformer.masks import causal_mask, padding_mask
from transformer.model import Transformer, TransformerConfig
from transformer.results import provenance
from transformer.run_state import model_config
from transformer.tokenizer import PAD_ID, multi30k_tokenizer
from transformer.training import PRESETS, make_optimizer, train_step


class TorchReference(nn.Module):
    """The same embeddings and tied projection around torch.nn.Transformer's stacks."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.pad_id = c.pad_id
        self.embed = TransformerEmbedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout)
        self.transformer = nn.Transformer(
            c.d_model,
            c.n_heads,
            c.n_layers,
            c.n_layers,
            c.d_ff,
            c.dropout,
            batch_first=True,
            norm_first=c.norm_first,
        )
        if not c.norm_first:  # nn.Transformer always adds final norms; the post-LN paper has none
            self.transformer.encoder.norm = nn.Identity()
            self.transformer.decoder.norm = nn.Identity()
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.generator.weight = self.embed.token.embedding.weight

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:  # -> (batch, T, vocab)
        # torch's masks say True = may NOT attend: the complements of ours
        src_pad, tgt_pad = ~padding_mask(src, self.pad_id), ~padding_mask(tgt_in, self.pad_id)
        h = self.transformer(
            self.embed(src),
            self.embed(tgt_in),
            tgt_mask=~causal_mask(tgt_in.size(1), src.device),
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(h)


def real_batches(n: int, token_budget: int, max_len: int, tokenizer, device) -> list:
    """The first n training batches of epoch 0, as `train` would draw them (en -> de)."""
    pairs = load_pairs("train", "en", "de", max_len, tokenizer)
    data = Buckets(pairs, token_budget, device, tokenizer.vocab_size, seed=0)
    return list(data.epoch_batches(0))[:n]


def one_pass(run, batches, amp_dtype) -> None:
    """One training step of run = (model, optimizer, scheduler) on each batch."""
    model, optimizer, scheduler = run
    for batch in batches:
        train_step(model, batch, optimizer, scheduler, autocast_dtype=amp_dtype)


def timed_pass(run, batches, amp_dtype, device) -> tuple[float, int]:
    """Seconds for one training pass over the batches, and the peak CUDA memory in bytes."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    one_pass(run, batches, amp_dtype)
    if device.type == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter() - t0, torch.cuda.max_memory_allocated(device)
    return time.perf_counter() - t0, 0


def pass_flops(run, batches, amp_dtype) -> int:
    """FLOPs of one training pass (forward and backward), counted by PyTorch, not estimated."""
    with FlopCounterMode(display=False) as counter:
        one_pass(run, batches, amp_dtype)
    return counter.get_total_flops()


SAME_SETTING = (
    "benchmark",
    "preset",
    "changes",
    "amp",
    "compile",
    "cuda_graphs",
    "batch",
    "processes_at_once",
    "process",
)


def record(path: Path, entry: dict) -> None:
    """Append `entry` to the JSON list in `path`, replacing one of the same setting. The file
    is locked meanwhile, so that processes that finish together (gpu_session.sh's probe)
    each add theirs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as held:  # created empty if missing
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        text = path.read_text()
        entries = json.loads(text) if text.strip() else []
        entries = [
            e
            for e in entries
            if (e["provenance"]["device"], *(e.get(k) for k in SAME_SETTING))
            != (entry["provenance"]["device"], *(entry.get(k) for k in SAME_SETTING))
        ]
        path.write_text(json.dumps([*entries, entry], indent=1) + "\n")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="base")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true", help="bf16 autocast (where supported)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile'd copies")
    parser.add_argument("--token-budget", type=int, default=2048, help="padded tokens per batch")
    parser.add_argument("--batches", type=int, default=4, help="distinct batches per pass")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes per model")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per model")
    parser.add_argument("--json", type=Path, help="append the measurement to this JSON list")
    return parser.parse_args()


def build_runs(config: TransformerConfig, warmup: int, device, compile: bool) -> dict[str, tuple]:
    """(model as the step calls it, optimizer, scheduler) for ours and nn.Transformer, each from
    the same seed, eager and, with compile, compiled."""
    runs = {}
    for name, build in (("ours", Transformer), ("nn.Transformer", TorchReference)):
        for compiled in (False, True) if compile else (False,):
            torch.manual_seed(0)
            model = build(config).to(device)
            model.check_ids = False  # Buckets checked the ids once, as in train
            step_model = torch.compile(model) if compiled else model
            runs[name + (" compiled" if compiled else "")] = (
                step_model,
                *make_optimizer(model, config.d_model, warmup),
            )
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{name:>15}: {n_params / 1e6:.2f}M parameters")
    return runs


def time_runs(runs: dict, batches, amp_dtype, device, warmup: int, repeats: int):
    """Seconds of every timed pass, and the peak memory, per run; the runs alternate, so that
    drifts in the machine's load hit all alike."""
    for _ in range(warmup):  # compiles, and lets allocators and caches settle
        for run in runs.values():
            timed_pass(run, batches, amp_dtype, device)
    times = {name: [] for name in runs}
    memory = dict.fromkeys(runs, 0)
    for _ in range(repeats):
        for name, run in runs.items():
            seconds, peak = timed_pass(run, batches, amp_dtype, device)
            times[name].append(seconds)
            memory[name] = max(memory[name], peak)
    return times, memory


def report(times: dict, memory: dict, n_tokens: int, flops: float, device) -> dict[str, dict]:
    """Print and return each run's throughput, TFLOP/s, share of the peak and memory."""
    peak = peak_flops(device)
    variants = {}
    for name, ts in times.items():
        median = statistics.median(ts)
        v = variants[name] = {
            "tokens_per_s": round(n_tokens / median, 1),
            "median_s": round(median, 4),
            "spread_s": [round(min(ts), 4), round(max(ts), 4)],
            "tflops": round(flops / median / 1e12, 3),
            "share_of_bf16_peak": round(flops / median / peak, 4) if peak else None,
            "peak_memory_gib": round(memory[name] / 2**30, 3) if device.type == "cuda" else None,
        }
        extras = f", {v['share_of_bf16_peak']:.1%} of the bf16 peak" if peak else ""
        extras += f", peak memory {v['peak_memory_gib']:.2f} GiB" if device.type == "cuda" else ""
        print(
            f"{name:>24}: {v['tokens_per_s']:>9.0f} target tokens/s, {v['tflops']:.2f} TFLOP/s"
            f"{extras} (median {median:.3f} s, spread {min(ts):.3f}-{max(ts):.3f} s)"
        )
    return variants


def ratios_of(variants: dict[str, dict]) -> dict[str, float]:
    """Throughput ratios between the runs that were timed; the headline ratio last."""
    rate = {name: v["tokens_per_s"] for name, v in variants.items()}
    pairs = (
        ("ours", "nn.Transformer compiled"),
        ("ours compiled", "nn.Transformer compiled"),
        ("ours", "ours compiled"),
        ("ours", "nn.Transformer"),
    )
    return {f"{a} / {b}": round(rate[a] / rate[b], 3) for a, b in pairs if a in rate and b in rate}


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    tokenizer = multi30k_tokenizer()
    preset = TrainConfig(preset=args.preset, max_steps=1).resolved()  # the preset's values
    config = model_config(preset, tokenizer.vocab_size)
    batches = real_batches(args.batches, args.token_budget, config.max_len, tokenizer, device)
    n_tokens = sum(int((b.tgt_out != PAD_ID).sum()) for b in batches)
    amp_dtype, _ = choose_autocast(device, "on" if args.amp else "off")
    runs = build_runs(config, preset.warmup, device, args.compile)
    flops = pass_flops(runs["ours"], batches, amp_dtype)  # also a first warm-up pass of ours
    times, memory = time_runs(runs, batches, amp_dtype, device, args.warmup, args.repeats)
    print(
        f"preset {args.preset}, device {device}, autocast {amp_dtype}, threads "
        f"{torch.get_num_threads()}, {len(batches)} batches, {n_tokens} target tokens and "
        f"{flops / 1e12:.3f} TFLOP per pass, {args.repeats} repeats"
    )
    variants = report(times, memory, n_tokens, flops, device)
    ratios = ratios_of(variants)
    if args.json:
        entry = {
            "benchmark": "train_step",
            "preset": args.preset,
            "amp": amp_dtype is not None,
            "compile": args.compile,
            "token_budget": args.token_budget,
            "target_tokens_per_pass": n_tokens,
            "flops_per_pass": flops,
            "variants": variants,
            "ratios": ratios,
            "provenance": {
                "device": describe_device(device),
                **provenance([sys.executable, *sys.argv]),
            },
        }
        record(args.json, entry)
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
