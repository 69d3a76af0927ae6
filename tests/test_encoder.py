import pytest
import torch
from torch import nn
from torch_reference import torch_stack

from transformer.encoder import Encoder, EncoderLayer, StackConfig
from transformer.masks import encoder_mask, padding_mask
from transformer.normalization import LayerNorm

D_MODEL, N_HEADS, D_FF, N_LAYERS, PAD = 32, 4, 64, 3, 0


def sizes(**changes) -> StackConfig:
    """This file's small stack sizes, with `changes`."""
    return StackConfig(**{"d_model": D_MODEL, "n_heads": N_HEADS, "d_ff": D_FF} | changes)


def perturbed_encoder(norm_first: bool, seed: int = 0) -> Encoder:
    """A float64 eval-mode encoder whose biases and LayerNorm parameters are not 0 and 1."""
    torch.manual_seed(seed)
    encoder = Encoder(sizes(n_layers=N_LAYERS, norm_first=norm_first)).double().eval()
    with torch.no_grad():
        for p in encoder.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return encoder


def padded_batch(
    lengths: list[int], width: int, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (batch, width) padded with PAD after each length, and float64 inputs for them."""
    torch.manual_seed(seed)
    ids = torch.randint(1, 50, (len(lengths), width))
    ids[torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None]] = PAD
    return ids, torch.randn(len(lengths), width, D_MODEL, dtype=torch.float64)


def relative_error(ours: torch.Tensor, theirs: torch.Tensor, real: torch.Tensor) -> float:
    return ((ours - theirs)[real].norm() / theirs[real].norm()).item()


@pytest.mark.parametrize("grad", [False, True], ids=["torch-fast-path", "torch-python-path"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_layer_matches_torch_with_padding(norm_first, grad):
    ours = perturbed_encoder(norm_first).layers[0]
    theirs = torch_stack(ours)
    ids, x = padded_batch([7, 4, 2], 7)
    real = padding_mask(ids, PAD)  # (batch, S)
    with torch.set_grad_enabled(grad):  # no grad: PyTorch takes its fused inference kernel
        out = ours(x, encoder_mask(ids, PAD))
        ref = theirs(x, src_key_padding_mask=~real)
    assert out.shape == ref.shape == (3, 7, D_MODEL)
    assert relative_error(out, ref, real) < 1e-10
    # PyTorch masks only padded keys, we also mask padded queries: padded rows differ
    assert not torch.allclose(out[~real], ref[~real])


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize(  # PyTorch has no nested-tensor path for norm_first=True
    ("norm_first", "nested"),
    [(False, False), (False, True), (True, False)],
    ids=["post-LN", "post-LN-nested-tensor", "pre-LN"],
)
def test_stack_matches_torch_with_padding(norm_first, nested):
    ours = perturbed_encoder(norm_first)
    theirs = torch_stack(ours, nested=nested)
    ids, x = padded_batch([9, 5, 3], 9)
    real = padding_mask(ids, PAD)
    with torch.no_grad():
        out = ours(x, encoder_mask(ids, PAD))
        ref = theirs(x, src_key_padding_mask=~real)
    assert relative_error(out, ref, real) < 1e-10
    if nested:  # the nested-tensor path computes real positions only and pads with zeros
        assert (ref[~real] == 0).all() and not (out[~real] == 0).all()


def test_torch_reference_is_really_compared():
    """The parity check fails when one weight differs, or when the final norm is left out."""
    ours = perturbed_encoder(norm_first=True)
    ids, x = padded_batch([6, 4], 6)
    real = padding_mask(ids, PAD)
    theirs = torch_stack(ours)
    with torch.no_grad():
        theirs.layers[1].linear2.bias[0] += 1e-3  # (a uniform shift would vanish in the LayerNorms)
        assert relative_error(ours(x, encoder_mask(ids, PAD)), theirs(x, None, ~real), real) > 1e-6
        theirs = torch_stack(ours)
        theirs.norm = None
        assert relative_error(ours(x, encoder_mask(ids, PAD)), theirs(x, None, ~real), real) > 1e-3


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_extra_padding_leaves_real_positions_unchanged(norm_first):
    encoder = perturbed_encoder(norm_first)
    ids, x = padded_batch([6, 3, 5], 6)
    more_ids = torch.nn.functional.pad(ids, (0, 4), value=PAD)  # (batch, 10)
    more_x = torch.cat([x, torch.randn(3, 4, D_MODEL, dtype=torch.float64)], dim=1)
    padded = more_ids == PAD  # (batch, 10): put large noise at every padded position
    more_x[padded] = 5 * torch.randn(int(padded.sum()), D_MODEL, dtype=torch.float64)
    real = padding_mask(ids, PAD)
    with torch.no_grad():
        short = encoder(x, encoder_mask(ids, PAD))
        long = encoder(more_x, encoder_mask(more_ids, PAD))
    torch.testing.assert_close(long[:, :6][real], short[real], rtol=0, atol=1e-12)


def test_encoder_is_bidirectional():
    encoder = perturbed_encoder(norm_first=False)
    x = torch.randn(1, 6, D_MODEL, dtype=torch.float64)
    changed = x.clone()
    changed[0, -1] += 1.0  # a different last token
    with torch.no_grad():
        moved = (encoder(x) - encoder(changed)).norm(dim=-1)[0]  # (S,)
        causal = torch.ones(6, 6, dtype=torch.bool).tril()
        moved_causal = (encoder(x, causal) - encoder(changed, causal)).norm(dim=-1)[0]
    assert (moved > 1e-3).all()  # every position, the first included, sees the last token
    assert (moved_causal[:-1] == 0).all()  # a causal mask (the decoder's) hides it


def test_norm_first_stack_has_final_layernorm():
    pre, post = (
        Encoder(sizes(n_layers=2, norm_first=True)),
        Encoder(sizes(n_layers=2)),
    )
    assert isinstance(pre.norm, LayerNorm)
    assert isinstance(post.norm, nn.Identity)
    assert all(layer.attn_residual.norm_first for layer in pre.layers)
    assert not any(layer.ff_residual.norm_first for layer in post.layers)
    with torch.no_grad():
        out = pre.eval()(torch.randn(2, 5, D_MODEL) * 10)
    # the final LayerNorm (gamma = 1, beta = 0) leaves every position with mean 0, variance 1
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, correction=0), torch.ones(2, 5), atol=1e-3, rtol=0)


def test_base_parameter_counts():
    layer = EncoderLayer(StackConfig())
    attention, ffn, norms = 4 * 512**2 + 4 * 512, 2 * 512 * 2048 + 2048 + 512, 4 * 512
    n = sum(p.numel() for p in layer.parameters())
    assert n == attention + ffn + norms == 3_152_384
    stack = Encoder(StackConfig())
    assert sum(p.numel() for p in stack.parameters()) == 6 * n == 18_914_304
    pre = Encoder(StackConfig(norm_first=True))
    assert sum(p.numel() for p in pre.parameters()) == 6 * n + 2 * 512
    assert (
        len({id(layer.feed_forward.linear1.weight) for layer in stack.layers}) == 6
    )  # own weights


def test_the_three_dropouts_reach_their_modules():
    assert StackConfig(dropout=0.3).attention_dropout == 0.3  # unset: the dropout
    c = StackConfig(dropout=0.3, attention_dropout=0.0, activation_dropout=0.2)
    layer = EncoderLayer(c)
    assert layer.self_attn.dropout == 0.0  # on the attention weights
    assert layer.feed_forward.dropout.p == 0.2  # on the hidden layer
    assert layer.attn_residual.dropout.p == layer.ff_residual.dropout.p == 0.3  # on the outputs


@pytest.mark.parametrize("name", ["dropout", "attention_dropout", "activation_dropout"])
@pytest.mark.parametrize("bad", [-0.1, 1.0])
def test_dropouts_must_lie_in_0_1(name, bad):
    """The config checks the three rates once; the layers built from it trust them."""
    with pytest.raises(ValueError, match=rf"{name} must lie in \[0, 1\), got {bad}"):
        StackConfig(**{name: bad})


@pytest.mark.parametrize("name", StackConfig.positive_ints)
@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "512"])
def test_sizes_must_be_positive_integers(name, bad):
    """The config is where a stack's sizes are checked (the layers trust them). A bool is
    refused too, although Python counts it as an int."""
    with pytest.raises(ValueError, match=rf"{name} must be a positive integer, got {bad!r}"):
        StackConfig(**{name: bad})
