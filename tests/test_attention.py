import pytest
import torch
import torch.nn.functional as F

from transformer.attention import scaled_dot_product_attention

SHAPES = [  # q, k, v
    ((5, 8), (5, 8), (5, 8)),  # 2-D (T, d)
    ((3, 5, 8), (3, 7, 8), (3, 7, 8)),  # (B, T, d), T != S
    ((2, 4, 5, 16), (2, 4, 5, 16), (2, 4, 5, 16)),  # (B, H, T, d)
    ((2, 4, 5, 16), (2, 4, 9, 16), (2, 4, 9, 6)),  # T != S and d_v != d_k
    ((2, 4, 5, 16), (1, 4, 6, 16), (1, 1, 6, 16)),  # leading dims broadcast
]


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def random_mask(*shape: int) -> torch.Tensor:
    mask = torch.rand(shape) < 0.5
    mask[..., torch.randint(shape[-1], ())] = True  # every row may attend somewhere
    return mask


@pytest.mark.parametrize("q_shape, k_shape, v_shape", SHAPES)
@pytest.mark.parametrize("with_mask", [False, True])
def test_matches_torch_in_float64(q_shape, k_shape, v_shape, with_mask):
    torch.manual_seed(0)
    q, k, v = (torch.randn(s, dtype=torch.float64) for s in (q_shape, k_shape, v_shape))
    mask = random_mask(*q_shape[:-2], q_shape[-2], k_shape[-2]) if with_mask else None
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == reference.shape
    assert rel_error(out, reference) < 1e-10
    assert torch.allclose(weights @ v, out, atol=1e-12)  # the weights are the ones used
    if mask is not None:
        assert (weights[~mask.expand_as(weights)] == 0).all()


def test_gradients_match_torch_in_float64():
    torch.manual_seed(0)
    mask = random_mask(2, 1, 5, 7)  # broadcast over heads
    inputs = [
        torch.randn(s, dtype=torch.float64, requires_grad=True)
        for s in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4))
    ]
    grad_out = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    ours = torch.autograd.grad(
        scaled_dot_product_attention(*inputs, mask=mask)[0], inputs, grad_out
    )
    reference = torch.autograd.grad(
        F.scaled_dot_product_attention(*inputs, attn_mask=mask), inputs, grad_out
    )
    for a, b in zip(ours, reference, strict=True):
        assert rel_error(a, b) < 1e-10


def test_mask_broadcasts_from_key_vector_and_from_a_row_dimension():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    keys_allowed = torch.tensor([True, True, False, True, False, True])  # (S,)
    _, weights = scaled_dot_product_attention(q, k, v, mask=keys_allowed)
    assert (weights[..., ~keys_allowed] == 0).all()
    full = keys_allowed.expand(4, 6)  # (T, S)
    assert torch.equal(weights, scaled_dot_product_attention(q, k, v, mask=full)[1])


def test_weights_rows_sum_to_one_or_zero_when_fully_masked():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    mask = random_mask(2, 4, 6)
    mask[0, 1] = False
    mask[1, 3] = False
    _, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    sums = weights.sum(dim=-1)
    expected = torch.ones(2, 4)
    expected[0, 1] = expected[1, 3] = 0
    assert torch.allclose(sums, expected, atol=1e-6)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_fully_masked_rows_give_zeros_and_finite_gradients():
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(s, dtype=torch.float64, requires_grad=True) for s in ((3, 4), (5, 4), (5, 2))
    )
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.equal(out[1], torch.zeros(2, dtype=torch.float64))
    assert torch.equal(weights[1], torch.zeros(5, dtype=torch.float64))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    with torch.autograd.detect_anomaly():  # raises if any backward step produces NaN
        (out.sum() + weights.square().sum()).backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert torch.equal(q.grad[1], torch.zeros(4, dtype=torch.float64))  # nothing flows back
    # the other rows are untouched by the empty one
    ref = scaled_dot_product_attention(q[[0, 2]], k, v, mask=mask[[0, 2]])[0]
    assert torch.allclose(out[[0, 2]], ref)


def test_everything_masked_gives_zeros():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    out, weights = scaled_dot_product_attention(q, k, v, mask=torch.zeros(1, dtype=torch.bool))
    assert not out.any() and not weights.any()


def test_future_cannot_leak_with_a_causal_mask():
    torch.manual_seed(0)
    T = 7
    q, k, v = torch.randn(2, T, 8), torch.randn(2, T, 8), torch.randn(2, T, 5)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))  # True = may attend
    out, weights = scaled_dot_product_attention(q, k, v, mask=causal)
    assert (weights.triu(diagonal=1) == 0).all()
    for t in range(T - 1):
        k2, v2 = k.clone(), v.clone()
        k2[:, t + 1 :] = 100 * torch.randn(2, T - t - 1, 8)  # rewrite the future
        v2[:, t + 1 :] = 100 * torch.randn(2, T - t - 1, 5)
        out2, _ = scaled_dot_product_attention(q, k2, v2, mask=causal)
        assert torch.equal(out2[:, : t + 1], out[:, : t + 1])
        assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])  # the test can see a leak


def test_scaling_is_one_over_sqrt_d_k():
    q = torch.tensor([[1.0, 0, 0, 0]])  # d_k = 4
    k = torch.tensor([[2.0, 0, 0, 0], [0.0, 0, 0, 0]])  # scores 2 and 0, scaled 1 and 0
    _, weights = scaled_dot_product_attention(q, k, torch.eye(2))
    expected = torch.softmax(torch.tensor([1.0, 0.0]), dim=0)
    assert torch.allclose(weights[0], expected)


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, mask, error, message",
    [
        ((5, 8), (6, 7), (6, 4), None, ValueError, r"same last dim d_k.*q \(5, 8\).*k \(6, 7\)"),
        (
            (5, 8),
            (6, 8),
            (7, 4),
            None,
            ValueError,
            r"number of positions S.*k \(6, 8\).*v \(7, 4\)",
        ),
        ((5, 8), (6, 8), (6, 4), torch.ones(5, 6), TypeError, "use a boolean mask, True = may"),
        (
            (5, 8),
            (6, 8),
            (6, 4),
            torch.ones(5, 6, dtype=torch.int64),
            TypeError,
            "dtype torch.int64; use a boolean mask",
        ),
        (
            (5, 8),
            (6, 8),
            (6, 4),
            torch.ones(6, 5, dtype=torch.bool),
            ValueError,
            r"mask of shape \(6, 5\) does not broadcast.*\(5, 6\)",
        ),
        (
            (5, 8),
            (6, 8),
            (6, 4),
            torch.ones(3, 5, 6, dtype=torch.bool),  # would grow the batch, not fit it
            ValueError,
            "does not broadcast",
        ),
        ((2, 5, 8), (3, 6, 8), (3, 6, 4), None, ValueError, r"leading \(batch, head\) dims"),
        ((8,), (6, 8), (6, 4), None, ValueError, r"q must have shape \(\.\.\., seq, features\)"),
    ],
)
def test_bad_inputs_raise_helpful_errors(q_shape, k_shape, v_shape, mask, error, message):
    q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
    with pytest.raises(error, match=message):
        scaled_dot_product_attention(q, k, v, mask=mask)


def test_bad_dropout_p():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"dropout_p must lie in \[0, 1\], got 1.5"):
        scaled_dot_product_attention(x, x, x, dropout_p=1.5)


def test_dropout_zeroes_weights_reproducibly():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 8), torch.randn(2, 9, 8), torch.randn(2, 9, 4)
    _, clean = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(1)
    out1, w1 = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(1)
    out2, w2 = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(out1, out2) and torch.equal(w1, w2)  # reproducible under a seed
    dropped = w1 == 0
    assert 0.3 < dropped.float().mean().item() < 0.7  # about half are zeroed
    assert torch.allclose(w1[~dropped], 2 * clean[~dropped])  # survivors scaled by 1 / (1 - p)
    assert torch.allclose(out1, w1 @ v)  # the returned weights are the ones applied
    torch.manual_seed(2)
    assert not torch.equal(scaled_dot_product_attention(q, k, v, dropout_p=0.5)[1], w1)
