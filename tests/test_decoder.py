import pytest
import torch
from torch import nn
from torch_reference import torch_stack

from transformer.decoder import Decoder, DecoderCache, DecoderLayer
from transformer.encoder import StackConfig
from transformer.masks import causal_mask, cross_mask, decoder_mask, padding_mask

D_MODEL, N_HEADS, D_FF, PAD = 32, 4, 64, 0


def sizes(**changes) -> StackConfig:
    """This file's small stack sizes, with `changes`."""
    return StackConfig(**{"d_model": D_MODEL, "n_heads": N_HEADS, "d_ff": D_FF} | changes)


def perturbed(module: nn.Module, seed: int = 0) -> nn.Module:
    """float64, eval, with random biases and LayerNorm gains (so that a swap cannot hide)."""
    torch.manual_seed(seed)
    module = module.double().eval()
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return module


def batch(seed: int = 0):
    """Target and source ids with padding, and float64 inputs for them."""
    torch.manual_seed(seed)
    tgt = torch.randint(4, 50, (3, 7))
    tgt[1, 5:] = PAD
    tgt[2, 3:] = PAD
    src = torch.randint(4, 50, (3, 9))
    src[0, 6:] = PAD
    src[2, 2:] = PAD
    x = torch.randn(3, 7, D_MODEL, dtype=torch.float64)
    memory = torch.randn(3, 9, D_MODEL, dtype=torch.float64)
    return tgt, src, x, memory


def rel_error(y: torch.Tensor, y_ref: torch.Tensor) -> float:
    return ((y - y_ref).norm() / y_ref.norm()).item()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("stack", [False, True])
def test_matches_torch_decoder(norm_first, stack):
    ours = (
        Decoder(sizes(n_layers=3, norm_first=norm_first))
        if stack
        else DecoderLayer(sizes(norm_first=norm_first))
    )
    ours = perturbed(ours)
    ref = torch_stack(ours)
    tgt, src, x, memory = batch()
    real = padding_mask(tgt, PAD)  # (batch, T)
    with torch.no_grad():
        y = ours(x, memory, decoder_mask(tgt, PAD), cross_mask(tgt, src, PAD))
        y_ref = ref(
            x,
            memory,
            tgt_mask=~causal_mask(7),  # PyTorch: True = may NOT attend
            tgt_key_padding_mask=~real,
            memory_key_padding_mask=~padding_mask(src, PAD),
        )
    # ours also silences padded queries, PyTorch does not: compare the real positions only
    assert rel_error(y[real], y_ref[real]) < 1e-10
    assert not torch.allclose(y[~real], y_ref[~real])


# our modules in a decoder layer -> PyTorch's, written out here rather than taken from
# transformer.reference.torch_name, which the test below checks
LAYER_MODULES = {
    "self_attn.out_proj": "self_attn.out_proj",
    "cross_attn.out_proj": "multihead_attn.out_proj",
    "feed_forward.linear1": "linear1",
    "feed_forward.linear2": "linear2",
    "self_residual.norm": "norm1",
    "cross_residual.norm": "norm2",
    "ff_residual.norm": "norm3",
}


def test_torch_decoder_copies_every_parameter():
    ours = perturbed(Decoder(sizes(n_layers=2, norm_first=True)))
    theirs = dict(torch_stack(ours).named_parameters())
    pairs = {"norm.weight": "norm.weight", "norm.bias": "norm.bias"}
    for i in range(2):
        for w in ("weight", "bias"):
            pairs[f"layers.{i}.self_attn.in_proj.{w}"] = f"layers.{i}.self_attn.in_proj_{w}"
            pairs[f"layers.{i}.cross_attn.in_proj.{w}"] = f"layers.{i}.multihead_attn.in_proj_{w}"
            for a, b in LAYER_MODULES.items():
                pairs[f"layers.{i}.{a}.{w}"] = f"layers.{i}.{b}.{w}"
    assert sorted(pairs) == sorted(name for name, _ in ours.named_parameters())
    assert sorted(pairs.values()) == sorted(theirs)
    for a, b in pairs.items():
        assert torch.equal(ours.get_parameter(a), theirs[b]), f"{a} was not copied to {b}"


@pytest.mark.parametrize("norm_first", [False, True])
def test_future_cannot_leak(norm_first):
    dec = perturbed(Decoder(sizes(n_layers=2, norm_first=norm_first)))
    _, _, x, memory = batch()
    mask = causal_mask(7)
    with torch.no_grad():
        base = dec(x, memory, mask)
        for t in range(1, 7):
            x_new = x.clone()
            x_new[:, t:] = torch.randn_like(x_new[:, t:])
            out = dec(x_new, memory, mask)
            assert torch.equal(out[:, :t], base[:, :t]), f"position < {t} saw the future"
            assert not torch.equal(out[:, t:], base[:, t:])


def test_without_causal_mask_the_future_leaks():
    """The no-leak test can fail: without the mask, earlier positions do change."""
    dec = perturbed(Decoder(sizes(n_layers=1)))
    _, _, x, memory = batch()
    x_new = x.clone()
    x_new[:, -1] += 1.0
    with torch.no_grad():
        assert not torch.equal(dec(x_new, memory)[:, 0], dec(x, memory)[:, 0])


def test_target_padding_does_not_change_real_positions():
    dec = perturbed(Decoder(sizes(n_layers=2)))
    tgt, src, x, memory = batch()
    real = padding_mask(tgt, PAD)
    masks = (decoder_mask(tgt, PAD), cross_mask(tgt, src, PAD))
    with torch.no_grad():
        base = dec(x, memory, *masks)
        noisy_x = x.clone()
        noisy_x[~real] = torch.randn(int((~real).sum()), D_MODEL, dtype=torch.float64)
        assert torch.equal(dec(noisy_x, memory, *masks)[real], base[real])
        # sentence 2 alone, without its padding
        alone_tgt, alone_src = tgt[1:2, :5], src[1:2]
        alone = dec(
            x[1:2, :5],
            memory[1:2],
            decoder_mask(alone_tgt, PAD),
            cross_mask(alone_tgt, alone_src, PAD),
        )
    torch.testing.assert_close(alone[0], base[1, :5], rtol=0, atol=1e-12)


def test_layer_without_cross_attention():
    layer = perturbed(DecoderLayer(sizes(), cross_attention=False))
    assert layer.cross_attn is None and layer.cross_residual is None
    x = batch()[2]
    with torch.no_grad():
        y = layer(x, self_mask=causal_mask(7))
    assert y.shape == x.shape and torch.isfinite(y).all()
    full = DecoderLayer(sizes())
    n = sum(p.numel() for p in full.parameters()) - sum(p.numel() for p in layer.parameters())
    assert n == 4 * D_MODEL * D_MODEL + 4 * D_MODEL + 2 * D_MODEL  # attention + its LayerNorm


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_steps_equal_full_pass(norm_first):
    dec = perturbed(Decoder(sizes(n_layers=3, norm_first=norm_first)))
    _, src, x, memory = batch()
    x_mask = padding_mask(src, PAD)[:, None, None, :]  # (batch, 1, 1, S)
    with torch.no_grad():
        full = dec(x, memory, causal_mask(7), x_mask)
        cache = DecoderCache()
        steps = [dec(x[:, t : t + 1], memory, None, x_mask, cache) for t in range(7)]
        # two positions at once, after the first three, with a (T_new, T_all) causal mask
        cache2 = DecoderCache()
        first = dec(x[:, :3], memory, causal_mask(3), x_mask, cache2)
        rest = dec(x[:, 3:], memory, torch.ones(4, 7, dtype=torch.bool).tril(3), x_mask, cache2)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, rtol=0, atol=1e-12)
    assert cache.length == cache2.length == 7
    assert len(cache.layers) == 3
    assert cache.layers[0].self_attn.k.shape == (3, 7, D_MODEL)
    assert cache.layers[0].cross_attn.k.shape == (3, 9, D_MODEL)


def test_the_decoder_layers_take_the_three_dropouts():
    c = StackConfig(dropout=0.3, attention_dropout=0.05, activation_dropout=0.2)
    layer = DecoderLayer(c)
    assert layer.self_attn.dropout == layer.cross_attn.dropout == 0.05
    assert layer.feed_forward.dropout.p == 0.2
    assert layer.self_residual.dropout.p == layer.ff_residual.dropout.p == 0.3


def test_cache_select_keeps_the_chosen_rows_of_every_layer():
    """DecoderCache.select reorders every kept key and value, as beam search needs."""
    torch.manual_seed(0)
    stack = Decoder(StackConfig(n_layers=2, d_model=D_MODEL, n_heads=4, d_ff=64, dropout=0.0))
    x, memory = torch.randn(3, 2, D_MODEL), torch.randn(3, 5, D_MODEL)
    cache = DecoderCache()
    with torch.no_grad():
        stack(x, memory, causal_mask(2), None, cache)
    before = [(layer.self_attn.k.clone(), layer.cross_attn.v.clone()) for layer in cache.layers]
    cache.select(torch.tensor([2, 0]))
    for layer, (k, v) in zip(cache.layers, before, strict=True):
        assert torch.equal(layer.self_attn.k, k[[2, 0]])
        assert torch.equal(layer.cross_attn.v, v[[2, 0]])
    assert cache.length == 2
