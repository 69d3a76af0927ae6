import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer.normalization import LayerNorm, Residual


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("shape", [(5, 16), (2, 7, 32), (3, 1, 4, 8), (1, 1)])
def test_layer_norm_matches_torch_with_random_gamma_beta(shape):
    torch.manual_seed(0)
    d = shape[-1]
    ours = LayerNorm(d, eps=1e-6).double()
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    ref = nn.LayerNorm(d, eps=1e-6, dtype=torch.float64)
    ref.load_state_dict(ours.state_dict())
    x = 3 * torch.randn(shape, dtype=torch.float64) + 2
    with torch.no_grad():
        expected = ref(x)
        assert rel_err(ours(x), expected) < 1e-10
        assert rel_err(ours(x), F.layer_norm(x, (d,), ours.weight, ours.bias, eps=1e-6)) < 1e-10


def test_default_eps_is_pytorchs():
    """Built with no eps, LayerNorm (and the one inside Residual) is nn.LayerNorm with no eps, on
    inputs whose variance is small enough for eps to matter."""
    x = 1e-3 * torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) + 1.0
    expected = nn.LayerNorm(16)(x)
    for norm in (LayerNorm(16), Residual(16).norm):
        assert norm.eps == nn.LayerNorm(16).eps
        torch.testing.assert_close(norm(x), expected, rtol=1e-4, atol=1e-4)


def test_layer_norm_standardizes_with_biased_variance():
    x = torch.tensor([[2.0, 4, 4, 4, 5, 5, 7, 9]], dtype=torch.float64)
    out = LayerNorm(8, eps=0.0).double()(x)
    expected = torch.tensor([[-1.5, -0.5, -0.5, -0.5, 0, 0, 1, 2]], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_layer_norm_of_a_module_cast_to_bf16():
    torch.manual_seed(0)
    x = torch.randn(3, 16)
    ours, ref = LayerNorm(16), nn.LayerNorm(16)
    with torch.no_grad():
        ours.weight.normal_()
        ref.load_state_dict(ours.state_dict())
    out = ours.to(torch.bfloat16)(x.to(torch.bfloat16))  # weights and input both bf16
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref(x), rtol=0, atol=0.05)


def test_layer_norm_bf16_keeps_precision():
    torch.manual_seed(0)
    x = (100.0 + torch.randn(4, 10, 64)).to(torch.bfloat16)  # the mean is not a bf16-exact number
    ours = LayerNorm(64)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
        out = ours(x)
        ref = nn.LayerNorm(64)
        ref.load_state_dict(ours.state_dict())
        ref_out = ref(x)
    exact = F.layer_norm(x.double(), (64,), ours.weight.double(), ours.bias.double())
    assert out.dtype == torch.bfloat16
    scale = exact.abs().max().item()
    assert (out.double() - exact).abs().max().item() < 2**-7 * scale  # bf16 output rounding
    assert (out.double() - ref_out.double()).abs().max().item() < 2**-7 * scale
    # statistics kept in bf16 would be far off: the check above can fail
    mu = x.mean(-1, keepdim=True)
    naive = (x - mu) / ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
    plain = F.layer_norm(x.double(), (64,))
    assert (naive.double() - plain).abs().max().item() > 0.1


def post_ln(x, linear, norm, p, training):
    return norm(x + F.dropout(linear(x), p, training))


def pre_ln(x, linear, norm, p, training):
    return x + F.dropout(linear(norm(x)), p, training)


@pytest.mark.parametrize("norm_first, formula", [(False, post_ln), (True, pre_ln)])
def test_residual_equals_its_formula(norm_first, formula):
    torch.manual_seed(0)
    linear = nn.Linear(16, 16, dtype=torch.float64)
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    residual = Residual(16, dropout=0.0, norm_first=norm_first).double()
    with torch.no_grad():
        residual.norm.weight.normal_()
        residual.norm.bias.normal_()
        torch.testing.assert_close(
            residual(x, linear), formula(x, linear, residual.norm, 0.0, False), rtol=0, atol=1e-12
        )
        residual = Residual(16, dropout=0.3, norm_first=norm_first).double()
        residual.eval()  # dropout off
        torch.testing.assert_close(
            residual(x, linear), formula(x, linear, residual.norm, 0.3, False), rtol=0, atol=1e-12
        )
        residual.train()  # the same dropout mask when the generator is reseeded
        torch.manual_seed(1)
        out = residual(x, linear)
        torch.manual_seed(1)
        expected = formula(x, linear, residual.norm, 0.3, True)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
        assert not torch.allclose(out, formula(x, linear, residual.norm, 0.3, False))


def test_post_and_pre_ln_differ_and_post_ln_output_is_normalized():
    torch.manual_seed(0)
    linear = nn.Linear(16, 16)
    x = 5 * torch.randn(2, 4, 16)
    post = Residual(16, dropout=0.0)(x, linear)
    pre = Residual(16, dropout=0.0, norm_first=True)(x, linear)
    assert not torch.allclose(post, pre)
    torch.testing.assert_close(post.mean(-1), torch.zeros(2, 4), rtol=0, atol=1e-5)
    assert pre.norm(dim=-1).mean() > 2 * post.norm(dim=-1).mean()  # the stream is not normalized


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradient_flows_to_input_sublayer_and_norm(norm_first):
    torch.manual_seed(0)
    linear = nn.Linear(8, 8)
    residual = Residual(8, dropout=0.1, norm_first=norm_first)
    x = torch.randn(2, 3, 8, requires_grad=True)
    (residual(x, linear) * torch.randn(2, 3, 8)).sum().backward()
    for grad in (x.grad, linear.weight.grad, residual.norm.weight.grad, residual.norm.bias.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
