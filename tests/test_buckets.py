import pytest
import torch
from random_data import random_pairs

from transformer.batching import collate, example_length, load_pairs
from transformer.buckets import Buckets, bucket_length
from transformer.tokenizer import BOS_ID, PAD_ID, multi30k_tokenizer


def real_rows(batch) -> list[tuple]:
    """The pairs a batch holds, as (src, tgt) tuples without padding, all-padding rows left out."""
    rows = []
    for src, tgt_out in zip(batch.src.tolist(), batch.tgt_out.tolist(), strict=True):
        if any(t != PAD_ID for t in tgt_out):
            real = [t for t in tgt_out if t != PAD_ID][:-1]  # drop EOS
            rows.append((tuple(t for t in src if t != PAD_ID), tuple(real)))
    return rows


def test_bucket_length_rounds_up_to_the_multiple():
    assert [bucket_length(n) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]
    assert bucket_length(5, multiple=4) == 8


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_fixed_shapes_budget_and_every_pair_once_per_epoch(world_size):
    pairs = random_pairs(500)
    ranks = [
        Buckets(pairs, 400, "cpu", 100, seed=1, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    shapes = set(ranks[0].shapes)
    assert shapes == {(400 // L, L) for L in (8, 16, 24, 32, 40, 48)}  # one shape per bucket
    for epoch in (0, 1):
        batches = [list(r.epoch_batches(epoch)) for r in ranks]
        assert len({len(b) for b in batches}) == 1 and len(batches[0]) == len(ranks[0])
        seen = [row for share in batches for b in share for row in real_rows(b)]
        for share in batches:
            for b in share:
                assert (
                    tuple(b.src.shape) in shapes
                    and b.src.shape == b.tgt_in.shape == b.tgt_out.shape
                )
                assert b.src.numel() <= 400
                assert (b.tgt_in[:, 0] == BOS_ID).sum() == len(
                    real_rows(b)
                )  # padding rows: all PAD
        expected = sorted((tuple(s), tuple(t)) for s, t in pairs)
        if world_size == 1:
            assert sorted(seen) == expected  # every pair exactly once
        else:  # the few batches that do not share evenly sit the epoch out
            assert len(set(seen)) == len(seen) and set(seen) <= set(expected)
            assert len(seen) >= len(pairs) - world_size * 400 // 8


def test_batches_hold_the_collated_pairs_padded_to_their_bucket():
    pairs = random_pairs(60, seed=2)
    data = Buckets(pairs, 200, "cpu", 100, shuffle=False)
    for b in data.epoch_batches(0):
        L = b.src.size(1)
        for src, tgt in real_rows(b):
            assert bucket_length(example_length((src, tgt))) == L
        ref = collate([(list(s), list(t)) for s, t in real_rows(b)])
        real = b.tgt_in[:, 0] == BOS_ID  # (rows,)
        for ours, theirs in zip(b, ref, strict=True):
            assert torch.equal(ours[real][:, : theirs.size(1)], theirs)
            assert (ours[real][:, theirs.size(1) :] == PAD_ID).all()


def test_order_is_a_function_of_seed_and_epoch_and_resumes_mid_epoch():
    pairs = random_pairs(300)
    a, b = Buckets(pairs, 300, "cpu", 100, seed=3), Buckets(pairs, 300, "cpu", 100, seed=3)
    first = [real_rows(x) for x in a.epoch_batches(0)]
    assert first == [real_rows(x) for x in b.epoch_batches(0)]
    assert first != [real_rows(x) for x in a.epoch_batches(1)]
    assert first != [real_rows(x) for x in Buckets(pairs, 300, "cpu", 100, seed=4).epoch_batches(0)]
    stream = iter(a)
    for _ in range(5):
        next(stream)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == {"epoch": 0, "position": 5}
    assert [real_rows(x) for x in b] == [real_rows(x) for x in stream]  # the rest of epoch 0
    assert a.state_dict() == b.state_dict() == {"epoch": 1, "position": 0}


def test_each_epoch_groups_the_pairs_anew():
    """Not only the order of the batches changes from epoch to epoch, but which pairs share a
    batch: the shuffle within each bucket depends on the epoch too."""
    pairs = random_pairs(300)
    buckets = Buckets(pairs, 300, "cpu", 100, seed=3)

    def groups(epoch: int) -> set[frozenset]:
        return {frozenset(real_rows(b)) for b in buckets.epoch_batches(epoch)}

    assert groups(0) == groups(0)
    assert groups(0) != groups(1)


def test_multi30k_needs_few_shapes():
    pairs = load_pairs("train", "en", "de", 256, multi30k_tokenizer())
    data = Buckets(pairs, 4096, "cpu", multi30k_tokenizer().vocab_size)
    assert len(data.shapes) <= 12  # torch.compile builds one graph per shape
    real = sum(len(s) + len(t) + 1 for s, t in pairs)
    padded = sum(b.src.numel() + b.tgt_in.numel() for b in data.epoch_batches(0))
    assert real / padded > 0.6  # padding stays a minority of every epoch's positions


def test_bucket_errors():
    with pytest.raises(ValueError, match="below the longest padded example \\(16 positions\\)"):
        Buckets([([4] * 9, [5])], 10, "cpu", 100)
    with pytest.raises(ValueError, match="rank must be in"):
        Buckets(random_pairs(10), 400, "cpu", 100, rank=2, world_size=2)
    with pytest.raises(ValueError, match="at least one pair"):
        Buckets([], 400, "cpu", 100)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 50\)"):
        Buckets(random_pairs(10), 400, "cpu", 50)
    with pytest.raises(ValueError, match="too few batches for 4 ranks"):
        Buckets(random_pairs(3), 400, "cpu", 100, world_size=4)
