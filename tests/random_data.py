"""Test data that tells a right implementation from a plausible wrong one."""

import torch


def random_pairs(n: int, seed: int = 0, vocab_size: int = 100, max_len: int = 40) -> list:
    """n (source, target) pairs of random ids in [4, vocab_size) and random lengths in
    [1, max_len]: sources differ from targets, and no id is special (PAD, UNK, BOS, EOS)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (n, 2), generator=gen).tolist()
    return [
        (
            torch.randint(4, vocab_size, (a,), generator=gen).tolist(),
            torch.randint(4, vocab_size, (b,), generator=gen).tolist(),
        )
        for a, b in lengths
    ]
