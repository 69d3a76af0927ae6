import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer.feed_forward import FeedForward

D_MODEL, D_FF = 32, 128


def ffn64(seed: int = 0, dropout: float = 0.1) -> FeedForward:
    torch.manual_seed(seed)
    return FeedForward(D_MODEL, D_FF, dropout).double().eval()


def copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def test_matches_sequential_and_functional_reference_in_float64():
    ours = ffn64()
    ref = nn.Sequential(
        nn.Linear(D_MODEL, D_FF), nn.ReLU(), nn.Dropout(0.1), nn.Linear(D_FF, D_MODEL)
    ).double()
    ref.eval()
    copy_linear(ref[0], ours.linear1)
    copy_linear(ref[3], ours.linear2)
    x = torch.randn(3, 2, 7, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        y = ours(x)
        functional = F.linear(
            F.relu(F.linear(x, ours.linear1.weight, ours.linear1.bias)),
            ours.linear2.weight,
            ours.linear2.bias,
        )
        assert rel_err(y, ref(x)) < 1e-10
        assert rel_err(y, functional) < 1e-10
        # eq. ffn with explicit matrices: max(0, x W_1 + b_1) W_2 + b_2
        w1, w2 = ours.linear1.weight.T, ours.linear2.weight.T  # (d_model, d_ff), (d_ff, d_model)
        by_hand = torch.clamp(x @ w1 + ours.linear1.bias, min=0) @ w2 + ours.linear2.bias
        assert rel_err(y, by_hand) < 1e-10


def test_matches_transformer_encoder_layer_ff_block():
    ours = ffn64(1)
    layer = nn.TransformerEncoderLayer(
        D_MODEL, 4, dim_feedforward=D_FF, dropout=0.1, batch_first=True, dtype=torch.float64
    ).eval()
    copy_linear(layer.linear1, ours.linear1)
    copy_linear(layer.linear2, ours.linear2)
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        assert rel_err(ours(x), layer._ff_block(x)) < 1e-10


def test_two_kernel_size_one_convolutions_are_the_same_network():
    ours = ffn64(2)
    conv1 = nn.Conv1d(D_MODEL, D_FF, 1, dtype=torch.float64)
    conv2 = nn.Conv1d(D_FF, D_MODEL, 1, dtype=torch.float64)
    with torch.no_grad():
        for conv, linear in [(conv1, ours.linear1), (conv2, ours.linear2)]:
            conv.weight.copy_(linear.weight.unsqueeze(-1))
            conv.bias.copy_(linear.bias)
        x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
        by_conv = conv2(torch.relu(conv1(x.transpose(1, 2)))).transpose(1, 2)
        assert rel_err(ours(x), by_conv) < 1e-10


def test_dropout_only_in_train_mode_and_placed_like_pytorch():
    ours = ffn64(3, dropout=0.5)
    ref = nn.Sequential(
        nn.Linear(D_MODEL, D_FF), nn.ReLU(), nn.Dropout(0.5), nn.Linear(D_FF, D_MODEL)
    ).double()
    copy_linear(ref[0], ours.linear1)
    copy_linear(ref[3], ours.linear2)
    x = torch.randn(4, 6, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        ours.eval()
        clean = ours(x)
        assert torch.equal(clean, ours(x))  # eval: deterministic, no dropout
        ours.train()
        ref.train()
        torch.manual_seed(7)
        noisy = ours(x)
        torch.manual_seed(7)
        torch.testing.assert_close(noisy, ref(x), rtol=0, atol=1e-12)  # same mask, same place
        assert not torch.allclose(noisy, clean)
        assert not torch.allclose(noisy, ours(x))  # a new mask on every call
        no_dropout = FeedForward(D_MODEL, D_FF, dropout=0.0).double().train()
        copy_linear(no_dropout.linear1, ours.linear1)
        copy_linear(no_dropout.linear2, ours.linear2)
        torch.testing.assert_close(no_dropout(x), clean, rtol=0, atol=1e-12)


def test_permuting_positions_commutes_with_the_network():
    ours = ffn64(4)
    x = torch.randn(3, 10, D_MODEL, dtype=torch.float64)
    perm = torch.randperm(10)
    with torch.no_grad():
        torch.testing.assert_close(ours(x[:, perm]), ours(x)[:, perm], rtol=0, atol=1e-12)
        # and across the batch too: every (batch, position) vector is handled alone
        flat = ours(x.reshape(-1, D_MODEL)).reshape(3, 10, D_MODEL)
        torch.testing.assert_close(flat, ours(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("position", [0, 4, 9])
def test_changing_one_position_changes_only_its_output(position):
    ours = ffn64(5)
    x = torch.randn(2, 10, D_MODEL, dtype=torch.float64)
    changed = x.clone()
    changed[1, position] += torch.randn(D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        moved = (ours(changed) - ours(x)).abs().amax(dim=-1) > 1e-12  # (batch, seq)
    expected = torch.zeros(2, 10, dtype=torch.bool)
    expected[1, position] = True
    assert torch.equal(moved, expected)


@pytest.mark.parametrize(
    "shape", [(D_MODEL,), (5, D_MODEL), (2, 5, D_MODEL), (2, 3, 4, 5, D_MODEL), (2, 0, D_MODEL)]
)
def test_shapes_with_any_leading_dimensions(shape):
    ours = ffn64(6)
    x = torch.randn(shape, dtype=torch.float64)
    with torch.no_grad():
        y = ours(x)
        assert y.shape == shape
        if x.numel():  # the same as running the flattened positions one matrix at a time
            flat = ours(x.reshape(-1, D_MODEL)).reshape(shape)
            torch.testing.assert_close(y, flat, rtol=0, atol=1e-12)


def test_parameter_count_of_the_base_network():
    base = FeedForward(512, 2048)
    assert sum(p.numel() for p in base.parameters()) == 2 * 512 * 2048 + 2048 + 512
    assert base.linear1.weight.shape == (2048, 512) and base.linear2.weight.shape == (512, 2048)
