"""Which attention kernels one training step runs, as PyTorch's profiler records them.

`F.scaled_dot_product_attention` picks a kernel per call from what its inputs allow. On a GPU,
FlashAttention takes no mask tensor, so the decoder's self-attention, which passes the causal
mask as `is_causal=True` (chapter 5), can use it, while the encoder's self-attention and the
cross-attention, which pass padding masks, use the memory-efficient kernel. This script runs one
forward and backward pass of a preset in training mode (dropout on, bf16 autocast where
supported) on a batch of Multi30k's commonest bucket shape, and prints every attention kernel
with the number of calls:

    python benchmarks/attention_kernels.py                  # CPU
    python benchmarks/attention_kernels.py --device cuda --preset base
"""

import argparse
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from transformer.config import TrainConfig
from transformer.devices import choose_autocast, describe_device, resolve_device
from transformer.model import Transformer
from transformer.run_state import model_config
from transformer.tokenizer import PAD_ID
from transformer.training import PRESETS, label_smoothed_loss


def attention_kernels(model: Transformer, src, tgt_in, tgt_out, amp_dtype) -> Counter:
    """Profiled kernel and operator names that hold 'attention', with their numbers of calls."""
    activities = [ProfilerActivity.CPU]
    if src.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with (
        profile(activities=activities) as prof,
        torch.autocast(src.device.type, amp_dtype, enabled=amp_dtype is not None),
    ):
        label_smoothed_loss(model(src, tgt_in), tgt_out).backward()
    return Counter({e.key: e.count for e in prof.key_averages() if "attention" in e.key.lower()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="small")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rows", type=int, default=256, help="sentence pairs in the batch")
    parser.add_argument("--length", type=int, default=16, help="padded length of the batch")
    args = parser.parse_args()
    device = resolve_device(args.device)
    torch.manual_seed(0)
    preset = TrainConfig(preset=args.preset, max_steps=1).resolved()  # the preset's values
    model = Transformer(model_config(preset, 8000)).to(device).train()
    ids = torch.randint(4, 8000, (3, args.rows, args.length), device=device)
    ids[:, :, args.length // 2 :] = PAD_ID  # every row padded, as in a bucket
    amp_dtype, _ = choose_autocast(device)
    counts = attention_kernels(model, *ids, amp_dtype)
    layers = preset.n_layers
    print(
        f"preset {args.preset} ({layers} + {layers} layers) on {describe_device(device)}, "
        f"autocast {amp_dtype}: one training step"
    )
    for name, calls in sorted(counts.items()):
        print(f"{calls:>6}  {name}")


if __name__ == "__main__":
    main()
