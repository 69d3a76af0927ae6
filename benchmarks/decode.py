"""Greedy decoding with the KV cache against recomputing the prefix, measured in one run.

The model is the paper's base configuration (6 + 6 layers, d_model 512, 8 heads, d_ff 2048) with
random weights and the book's shared 8000-piece vocabulary. One random source sentence (20
tokens by default; --batch decodes several) is decoded greedily for exactly the requested number
of tokens: eos_id=None switches the stop at EOS off, so both ways do the same number of steps.
After a warm-up, the two ways alternate repeat by repeat (and length by length with --lengths),
and the median time of each is reported. The last line prints the speedup at 64 tokens.

It runs on one CPU thread unless told otherwise: decoding one sentence is a long chain of small
operations, and on a machine that other jobs share, idle threads spinning for work make their
timings erratic. The ratio, not the absolute time, is the result.

    python benchmarks/decode.py                    # 64 tokens on the CPU; last line: the speedup
    python benchmarks/decode.py --lengths          # the speedup against the output length
    python benchmarks/decode.py --batch 8          # eight sentences at once
    python benchmarks/decode.py --threads 4        # four CPU threads
    python benchmarks/decode.py --device cuda      # on a GPU

--json appends the measurement with its provenance to a JSON list (train_step.py's format);
chapter 12 shows the entries of results/benchmarks.json.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from train_step import record  # the sibling benchmark's JSON writer

from transformer.decoding import greedy_decode
from transformer.devices import describe_device
from transformer.model import Transformer, TransformerConfig
from transformer.results import provenance


def timed(model: Transformer, src: torch.Tensor, length: int, use_cache: bool) -> float:
    """Seconds to decode `length` tokens."""
    if src.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = greedy_decode(model, src, max_len=length, eos_id=None, use_cache=use_cache)
    if src.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    assert out.shape == (src.size(0), length), out.shape
    return seconds


def measure(
    model: Transformer, src: torch.Tensor, lengths: list[int], repeats: int
) -> dict[int, tuple[float, float]]:
    """Median seconds (with the cache, without) for each output length. After a warm-up, every
    repeat times every length both ways, alternating which goes first, so that a change in the
    machine's load falls on all of them alike."""
    timed(model, src, min(lengths), True), timed(model, src, min(lengths), False)
    times: dict[tuple[int, bool], list[float]] = {}
    for r in range(repeats):
        for length in lengths:
            for use_cache in (True, False) if r % 2 == 0 else (False, True):
                times.setdefault((length, use_cache), []).append(
                    timed(model, src, length, use_cache)
                )
    return {
        n: (statistics.median(times[n, True]), statistics.median(times[n, False])) for n in lengths
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=64, help="output length to decode")
    parser.add_argument("--lengths", action="store_true", help="also 8, 16, 32, 64, 128 tokens")
    parser.add_argument("--src-len", type=int, default=20, help="source length (tokens)")
    parser.add_argument("--batch", type=int, default=1, help="sentences decoded together")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each way")
    parser.add_argument("--vocab", type=int, default=8000, help="shared vocabulary size")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (0: torch's default)")
    parser.add_argument("--json", type=Path, help="append the measurement to this JSON list")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(args.vocab, args.vocab)).to(device).eval()  # base
    src = torch.randint(4, args.vocab, (args.batch, args.src_len), device=device)  # (batch, S)
    print(
        f"greedy decoding, base config ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
        f"parameters), batch {args.batch}, source {args.src_len} tokens, {device.type}, "
        f"threads={torch.get_num_threads()}, torch {torch.__version__}"
    )
    lengths = sorted({8, 16, 32, 128, args.tokens}) if args.lengths else [args.tokens]
    medians = measure(model, src, lengths, args.repeats)
    for length, (cached, recomputed) in medians.items():
        print(
            f"{length:>4} tokens: KV cache {cached * 1000:8.1f} ms, recompute "
            f"{recomputed * 1000:8.1f} ms, speedup {recomputed / cached:5.2f}x "
            f"(median of {args.repeats})"
        )
    cached, recomputed = medians[args.tokens]
    print(f"speedup (cache / no cache): {recomputed / cached:.1f}x")
    if args.json:
        entry = {
            "benchmark": "decode",
            "batch": args.batch,
            "source_tokens": args.src_len,
            "threads": torch.get_num_threads(),
            "repeats": args.repeats,
            "ms_cache_recompute": {
                n: [round(c * 1e3, 1), round(r * 1e3, 1)] for n, (c, r) in medians.items()
            },
            "speedup": {n: round(r / c, 2) for n, (c, r) in medians.items()},
            "provenance": {"device": describe_device(device), **provenance(sys.argv)},
        }
        record(args.json, entry)


if __name__ == "__main__":
    main()
