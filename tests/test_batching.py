import random

import pytest
import torch

from transformer.batching import collate, example_length, shift_right, tokenize_pairs
from transformer.sampling import TokenBatchSampler
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, multi30k_tokenizer


def lengths(n: int = 3000, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(3, 60) for _ in range(n)]


def test_shift_right_and_collate():
    assert shift_right([7, 8, 9]) == ([BOS_ID, 7, 8, 9], [7, 8, 9, EOS_ID])
    b = collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])])
    assert b.src.tolist() == [[5, 6, 7], [5, PAD_ID, PAD_ID]]
    assert b.tgt_in.tolist() == [[BOS_ID, 8, 9, PAD_ID, PAD_ID], [BOS_ID, 8, 9, 10, 11]]
    assert b.tgt_out.tolist() == [[8, 9, EOS_ID, PAD_ID, PAD_ID], [8, 9, 10, 11, EOS_ID]]
    assert b.src.dtype == torch.long
    # the decoder input is the target shifted right by one position
    assert torch.equal(b.tgt_in[:, 1:], b.tgt_out[:, :-1] * (b.tgt_out[:, :-1] != EOS_ID))
    assert example_length(([1, 2, 3], [4])) == 3 and example_length(([1], [4, 5])) == 3
    with pytest.raises(ValueError, match="at least one pair"):
        collate([])


def test_tokenize_pairs_drops_empty_and_too_long_with_a_count():
    tok = multi30k_tokenizer()
    pairs = [("A dog.", "Ein Hund."), (" ", "Leer."), ("A man", "\t"), ("a " * 40, "ein " * 40)]
    with pytest.warns(
        UserWarning, match=r"dropped 2 pairs with an empty.* 1 pairs longer .*kept 1 of 4"
    ):
        kept = tokenize_pairs(pairs, tok, max_len=20)
    assert kept == [(tok.encode("A dog."), tok.encode("Ein Hund."))]
    with pytest.raises(ValueError, match="no sentence pair is left"), pytest.warns(UserWarning):
        tokenize_pairs([(" ", " ")], tok, max_len=20)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_budget_respected_and_every_example_once_per_epoch(world_size):
    ls = lengths()
    samplers = [
        TokenBatchSampler(ls, 500, seed=1, rank=r, world_size=world_size) for r in range(world_size)
    ]
    for epoch in (0, 1):
        shares = [s.plan(epoch) for s in samplers]
        assert len({len(share) for share in shares}) == 1  # equally long shares
        seen = [i for share in shares for batch in share for i in batch]
        assert sorted(seen) == list(range(len(ls)))  # disjoint, and nothing dropped
        for share in shares:
            for batch in share:
                assert len(batch) * max(ls[i] for i in batch) <= 500


def test_grouping_saves_padding_and_order_is_deterministic():
    ls = lengths()

    def padding(sampler):
        batches = sampler.plan(0)
        return sum(len(b) * max(ls[i] for i in b) - sum(ls[i] for i in b) for b in batches)

    assert padding(TokenBatchSampler(ls, 1000)) < 0.25 * padding(
        TokenBatchSampler(ls, 1000, pool_size=1)
    )
    a, b = TokenBatchSampler(ls, 1000, seed=3), TokenBatchSampler(ls, 1000, seed=3)
    assert a.plan(0) == b.plan(0)
    assert a.plan(0) != a.plan(1)
    assert a.plan(0) != TokenBatchSampler(ls, 1000, seed=4).plan(0)
    ordered = TokenBatchSampler(ls, 1000, shuffle=False).plan(0)
    flat = [i for batch in ordered for i in batch]
    assert [ls[i] for i in flat] == sorted(ls)


def test_state_resumes_mid_epoch_and_rolls_over():
    ls = lengths(400)
    sampler = TokenBatchSampler(ls, 300, seed=0)
    n = len(sampler)
    stream = iter(sampler)
    for _ in range(5):
        next(stream)
    copy = TokenBatchSampler(ls, 300, seed=0)
    copy.load_state_dict(sampler.state_dict())
    assert copy.state_dict() == {"epoch": 0, "position": 5}
    assert list(copy) == list(stream)  # the rest of epoch 0
    assert copy.state_dict() == sampler.state_dict() == {"epoch": 1, "position": 0}
    assert len(list(copy)) == len(copy.plan(1)) and n == len(copy.plan(0))


def test_sampler_errors():
    with pytest.raises(ValueError, match="below the longest example"):
        TokenBatchSampler([5, 80], 50)
    with pytest.raises(ValueError, match="rank must be in"):
        TokenBatchSampler([5, 8], 50, rank=2, world_size=2)
    with pytest.raises(ValueError, match="non-empty"):
        TokenBatchSampler([], 50)
    with pytest.raises(ValueError, match="cannot feed"):
        TokenBatchSampler([5], 50, world_size=2)
