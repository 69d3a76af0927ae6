import pytest
import torch
import torch.nn.functional as F

from transformer.masks import (
    additive_mask,
    causal_mask,
    cross_mask,
    decoder_mask,
    encoder_mask,
    padding_mask,
)

PAD = 0
# two sentences each: source lengths 3 and 1 of 4, target lengths 2 and 3 of 3
SRC = torch.tensor([[5, 6, 7, PAD], [8, PAD, PAD, PAD]])
TGT = torch.tensor([[2, 9, PAD], [2, 10, 11]])


def test_padding_mask_values():
    mask = padding_mask(SRC, PAD)
    assert mask.dtype == torch.bool and mask.shape == (2, 4)
    assert mask.tolist() == [[True, True, True, False], [True, False, False, False]]
    assert padding_mask(SRC, pad_id=5).tolist()[0] == [False, True, True, True]


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, True],
    ]
    big = causal_mask(7)
    rows, cols = torch.meshgrid(torch.arange(7), torch.arange(7), indexing="ij")
    assert torch.equal(big, cols <= rows)
    assert causal_mask(1).tolist() == [[True]]


def test_causal_mask_with_start_is_the_bottom_rows_of_the_full_triangle():
    full = causal_mask(7)
    for start in range(7):
        for size in range(1, 8 - start):
            rows = causal_mask(size, start=start)
            assert rows.shape == (size, start + size)
            assert torch.equal(rows, full[start : start + size, : start + size]), (start, size)


def test_causal_mask_matches_pytorch_additive_form():
    assert torch.equal(
        additive_mask(causal_mask(5)), torch.nn.Transformer.generate_square_subsequent_mask(5)
    )


def test_encoder_mask_values():
    mask = encoder_mask(SRC, PAD)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 4, 4)
    t, f = True, False
    assert mask[0, 0].tolist() == [[t, t, t, f], [t, t, t, f], [t, t, t, f], [f, f, f, f]]
    assert mask[1, 0].tolist() == [[t, f, f, f], [f, f, f, f], [f, f, f, f], [f, f, f, f]]


def test_decoder_mask_is_padding_and_causal():
    mask = decoder_mask(TGT, PAD)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 3, 3)
    t, f = True, False
    assert mask[0, 0].tolist() == [[t, f, f], [t, t, f], [f, f, f]]
    assert mask[1, 0].tolist() == [[t, f, f], [t, t, f], [t, t, t]]
    keep = padding_mask(TGT, PAD)
    both_sides = keep[:, None, :, None] & keep[:, None, None, :]
    assert torch.equal(mask, both_sides & causal_mask(3))


def test_cross_mask_shape_and_values():
    mask = cross_mask(TGT, SRC, PAD)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 3, 4)  # (B, 1, T, S)
    t, f = True, False
    assert mask[0, 0].tolist() == [[t, t, t, f], [t, t, t, f], [f, f, f, f]]
    assert mask[1, 0].tolist() == [[t, f, f, f], [t, f, f, f], [t, f, f, f]]


def test_masks_broadcast_against_scores_of_every_head():
    scores = torch.zeros(2, 8, 3, 4)  # (batch, heads, T, S)
    assert (scores.masked_fill(~cross_mask(TGT, SRC, PAD), 1.0)).shape == scores.shape


def test_additive_mask_values_and_dtype():
    mask = torch.tensor([[True, False], [False, False]])
    add = additive_mask(mask)
    assert add.dtype == torch.float32 and add.shape == (2, 2)
    assert add[0, 0].item() == 0.0
    assert add[~mask].eq(float("-inf")).all()
    assert additive_mask(mask, torch.float64).dtype == torch.float64


def test_additive_softmax_equals_masked_softmax_on_non_empty_rows():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4, 4, dtype=torch.float64)  # (batch, heads, S, S)
    mask = encoder_mask(SRC, PAD)  # (batch, 1, S, S); padding query rows are empty
    additive = torch.softmax(scores + additive_mask(mask, torch.float64), dim=-1)
    # eq. masked-softmax written out: m * exp(s) / sum(m * exp(s))
    numerator = mask * scores.exp()
    reference = numerator / numerator.sum(-1, keepdim=True)
    rows = mask.any(-1).expand(2, 3, 4)  # (batch, heads, S)
    assert rows.any() and not rows.all()
    assert torch.allclose(additive[rows], reference[rows], atol=1e-12)
    assert additive[~rows].isnan().all()  # why attention must treat empty rows specially


def test_future_cannot_leak_through_causal_mask():
    torch.manual_seed(0)
    batch, heads, T, d_k = 2, 2, 6, 4
    q, k, v = torch.randn(3, batch, heads, T, d_k, dtype=torch.float64)
    mask = causal_mask(T)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for t in range(T - 1):
        k2, v2 = k.clone(), v.clone()
        k2[..., t + 1 :, :] = torch.randn_like(k2[..., t + 1 :, :]) * 10
        v2[..., t + 1 :, :] = torch.randn_like(v2[..., t + 1 :, :]) * 10
        perturbed = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)
        assert torch.allclose(perturbed[..., : t + 1, :], out[..., : t + 1, :], atol=1e-12)
        assert not torch.allclose(perturbed[..., t + 1 :, :], out[..., t + 1 :, :])
    # and without the mask the past does see the change: the test can fail
    unmasked = F.scaled_dot_product_attention(q, k2, v2)
    assert not torch.allclose(
        unmasked[..., :1, :], F.scaled_dot_product_attention(q, k, v)[..., :1, :]
    )


def test_decoder_mask_blocks_future_tokens():
    """Changing target tokens after t leaves decoder_mask rows <= t unchanged."""
    tgt = torch.tensor([[2, 9, 10, 11, PAD]])
    changed = torch.tensor([[2, 9, 12, 13, PAD]])  # tokens after t = 1 differ
    torch.manual_seed(0)
    table = torch.randn(14, 4, dtype=torch.float64)
    x, x2 = table[tgt][:, None], table[changed][:, None]  # (batch, 1, T, 4)
    # the real queries only: PyTorch's attention gives NaN on the empty padding row
    mask, mask2 = decoder_mask(tgt, PAD)[:, :, :4], decoder_mask(changed, PAD)[:, :, :4]
    out = F.scaled_dot_product_attention(x[:, :, :4], x, x, attn_mask=mask)
    out2 = F.scaled_dot_product_attention(x2[:, :, :4], x2, x2, attn_mask=mask2)
    assert torch.allclose(out[:, :, :2], out2[:, :, :2], atol=1e-12)
    assert not torch.allclose(out[:, :, 2:4], out2[:, :, 2:4])


def test_masks_follow_the_device_and_int32_ids():
    ids = SRC.to(torch.int32)
    assert torch.equal(decoder_mask(ids, PAD), decoder_mask(SRC, PAD))
    assert causal_mask(3, device="cpu").device.type == "cpu"


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: padding_mask(torch.tensor([1, 2, 0]), PAD),
            ValueError,
            r"2-D \(batch, seq\).*\(3,\)",
        ),
        (lambda: encoder_mask(torch.zeros(1, 2, 3, dtype=torch.long), PAD), ValueError, "2-D"),
        (lambda: padding_mask(torch.randn(2, 3), PAD), TypeError, "integer tensor.*float32"),
        (lambda: padding_mask(torch.ones(2, 3, dtype=torch.bool), PAD), TypeError, "integer"),
        (lambda: padding_mask([[1, 2]], PAD), TypeError, "torch.Tensor, got list"),
        (lambda: cross_mask(TGT, SRC[:1], PAD), ValueError, "batch sizes 2 and 1"),
        (
            lambda: causal_mask(0),
            ValueError,
            "causal_mask.s size must be a positive integer, got 0",
        ),
        (lambda: causal_mask(-3), ValueError, "got -3"),
        (lambda: causal_mask(2.0), ValueError, "got 2.0"),
        (lambda: causal_mask(True), ValueError, "got True"),
        (
            lambda: causal_mask(2, start=False),
            ValueError,
            "start must be a non-negative integer, got False",
        ),
        (
            lambda: causal_mask(2, start=-1),
            ValueError,
            "causal_mask.s start must be a non-negative integer, got -1",
        ),
        (lambda: additive_mask(SRC), TypeError, "boolean mask.*int64"),
        (lambda: additive_mask(causal_mask(2), torch.long), TypeError, "floating dtype"),
    ],
)
def test_errors_name_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        call()
