import pytest
import torch
from torch import nn

from transformer.multihead import KVCache, MultiHeadAttention

D_MODEL, N_HEADS = 32, 4


def copied_pair(seed: int = 0) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """Our layer and nn.MultiheadAttention with the same float64 weights (non-zero biases)."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D_MODEL, N_HEADS).double().eval()
    ref = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        ours.in_proj.bias.normal_()
        ours.out_proj.bias.normal_()
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, ref


def lengths_to_padding(lengths: list[int], width: int) -> torch.Tensor:
    """(batch, width) bool, True at real positions."""
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def test_self_attention_matches_torch_with_causal_and_padding_masks():
    ours, ref = copied_pair()
    x = torch.randn(3, 7, D_MODEL, dtype=torch.float64)
    real = lengths_to_padding([7, 4, 2], 7)  # (batch, T)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    mask = causal & real[:, None, None, :]  # (batch, 1, T, T), True = may attend
    with torch.no_grad():
        out, w = ours(x, mask=mask, need_weights=True)
        ref_out, ref_w = ref(
            x,
            x,
            x,
            attn_mask=~causal,  # PyTorch: True = may NOT attend
            key_padding_mask=~real,
            average_attn_weights=False,
        )
        _, ref_avg = ref(x, x, x, attn_mask=~causal, key_padding_mask=~real)
    assert w.shape == ref_w.shape == (3, N_HEADS, 7, 7)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-10)  # no row is fully masked
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-10)
    torch.testing.assert_close(w.mean(1), ref_avg, rtol=0, atol=1e-10)


def test_cross_attention_matches_torch_with_key_padding():
    ours, ref = copied_pair(1)
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    memory = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    real = lengths_to_padding([9, 3], 9)  # (batch, S)
    with torch.no_grad():
        out, w = ours(x, memory=memory, mask=real[:, None, None, :], need_weights=True)
        ref_out, ref_w = ref(x, memory, memory, key_padding_mask=~real, average_attn_weights=False)
    assert out.shape == (2, 5, D_MODEL) and w.shape == (2, N_HEADS, 5, 9)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-10)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-10)
    assert torch.equal(w[1, :, :, 3:], torch.zeros(N_HEADS, 5, 6, dtype=torch.float64))


def test_cross_attention_on_itself_is_self_attention():
    ours, _ = copied_pair()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, memory=x), ours(x), rtol=0, atol=1e-12)


def test_fused_path_equals_explicit_path_with_fully_masked_rows():
    ours, _ = copied_pair()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    memory = torch.randn(2, 4, D_MODEL, dtype=torch.float64)
    torch.manual_seed(3)
    for mem, S in [(None, 6), (memory, 4)]:
        mask = torch.rand(2, N_HEADS, 6, S) < 0.5  # per-head masks
        mask[0, 1, 2] = False  # fully masked rows, in one head and in all heads
        mask[1, :, 5] = False
        with torch.no_grad():
            explicit, _ = ours(x, memory=mem, mask=mask, need_weights=True)
            fused = ours(x, memory=mem, mask=mask)
        assert not fused.isnan().any() and not explicit.isnan().any()
        torch.testing.assert_close(fused, explicit, rtol=0, atol=1e-10)
        # a row masked in every head attends to nothing: only the output bias remains
        torch.testing.assert_close(fused[1, 5], ours.out_proj.bias, rtol=0, atol=1e-12)
    for mask in [None, torch.ones(6, 6, dtype=torch.bool).tril()]:  # no mask, 2-D mask
        with torch.no_grad():
            torch.testing.assert_close(
                ours(x, mask=mask), ours(x, mask=mask, need_weights=True)[0], rtol=0, atol=1e-10
            )


def test_fused_path_gradients_stay_finite_with_fully_masked_rows():
    ours, _ = copied_pair()
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    mask[1, :, 3:] = False
    ours(x, mask=mask).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters())


def test_d_head_independent_of_d_model():
    mha = MultiHeadAttention(300, 8, d_head=64)
    assert mha.in_proj.weight.shape == (3 * 512, 300)
    assert mha.out_proj.weight.shape == (300, 512)
    assert sum(p.numel() for p in mha.parameters()) == 3 * 300 * 512 + 3 * 512 + 512 * 300 + 300
    x, memory = torch.randn(2, 7, 300), torch.randn(2, 3, 300)
    out, w = mha(x, memory=memory, need_weights=True)
    assert out.shape == (2, 7, 300) and w.shape == (2, 8, 7, 3)
    assert mha(x).shape == (2, 7, 300)


def test_base_parameter_count_and_init():
    mha = MultiHeadAttention(512, 8)
    assert mha.d_head == 64
    assert sum(p.numel() for p in mha.parameters()) == 4 * 512 * 512 + 4 * 512
    assert not mha.in_proj.bias.any() and not mha.out_proj.bias.any()
    bound = (6 / (512 + 3 * 512)) ** 0.5  # xavier_uniform_ on the stacked (1536, 512) weight
    assert mha.in_proj.weight.abs().max() <= bound
    assert mha.in_proj.weight.abs().max() > 0.9 * bound


def test_future_cannot_leak_through_causal_mask():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).double().eval()
    x = torch.randn(2, 8, D_MODEL, dtype=torch.float64)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    for t in range(8):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :]) * 10
        for need_weights in (False, True):
            with torch.no_grad():
                a = mha(x, mask=causal, need_weights=need_weights)
                b = mha(changed, mask=causal, need_weights=need_weights)
            a, b = (a[0], b[0]) if need_weights else (a, b)
            torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-12)
            if t < 7:
                assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])  # the test can fail


@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_flag_equals_the_causal_mask(need_weights):
    """is_causal=True gives what the explicit lower-triangular mask gives, in both paths."""
    ours, _ = copied_pair()
    x = torch.randn(3, 9, D_MODEL, dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    with torch.no_grad():
        flag = ours(x, is_causal=True, need_weights=need_weights)
        mask = ours(x, mask=causal, need_weights=need_weights)
        unmasked = ours(x, need_weights=need_weights)
    flag, mask, unmasked = (t[0] if need_weights else t for t in (flag, mask, unmasked))
    torch.testing.assert_close(flag, mask, rtol=0, atol=1e-12)
    assert not torch.allclose(flag[:, :-1], unmasked[:, :-1])  # the flag does mask
    if need_weights:
        weights = ours(x, is_causal=True, need_weights=True)[1]  # (3, heads, 9, 9)
        assert torch.equal(weights.masked_select(~causal), torch.zeros(3 * N_HEADS * 36).double())


def test_padded_positions_do_not_change_real_outputs():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).double().eval()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    memory = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    x_real, mem_real = lengths_to_padding([6, 4], 6), lengths_to_padding([5, 2], 5)
    x2, memory2 = x.clone(), memory.clone()
    x2[1, 4:] = torch.randn(2, D_MODEL, dtype=torch.float64)  # new vectors at padded positions
    memory2[1, 2:] = torch.randn(3, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        for need_weights in (False, True):
            pairs = [
                (mha(x, mask=x_real[:, None, None, :], need_weights=need_weights),
                 mha(x2, mask=x_real[:, None, None, :], need_weights=need_weights)),
                (mha(x, memory, mem_real[:, None, None, :], need_weights),
                 mha(x, memory2, mem_real[:, None, None, :], need_weights)),
            ]  # fmt: skip
            for a, b in pairs:
                a, b = (a[0], b[0]) if need_weights else (a, b)
                torch.testing.assert_close(a[x_real], b[x_real], rtol=0, atol=1e-12)
        # without the mask the padded vectors do leak in
        assert not torch.allclose(mha(x)[1, :4], mha(x2)[1, :4])


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.5)
    x = torch.randn(2, 6, D_MODEL)
    mha.eval()
    with torch.no_grad():
        reference = mha(x)
        assert torch.equal(mha(x), reference)
        torch.testing.assert_close(mha(x, need_weights=True)[0], reference)
        mha.train()
        for need_weights in (False, True):
            a = mha(x, need_weights=need_weights)
            b = mha(x, need_weights=need_weights)
            a, b = (a[0], b[0]) if need_weights else (a, b)
            assert not torch.allclose(a, reference) and not torch.allclose(a, b)


def test_head_size_errors():
    """The layer's one check; its other sizes and its dropout are StackConfig's to check."""
    with pytest.raises(ValueError, match=r"d_model=300 is not divisible by n_heads=8.*d_head"):
        MultiHeadAttention(300, 8)
    with pytest.raises(ValueError, match="d_head must be positive, got 0"):
        MultiHeadAttention(512, 8, d_head=0)
    assert MultiHeadAttention(300, 8, d_head=64).d_head == 64  # the fix the message names


def test_cache_step_by_step_equals_full_pass():
    """Self-attention appends to the cache; cross-attention projects the memory once."""
    torch.manual_seed(3)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).double().eval()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    memory = torch.randn(2, 4, D_MODEL, dtype=torch.float64)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    self_cache, cross_cache = KVCache(), KVCache()
    steps_self, steps_cross = [], []
    for t in range(0, 6, 2):  # two new positions per call: causal within the block
        block = causal[t : t + 2, : t + 2]  # (new, earlier + new)
        steps_self.append(mha(x[:, t : t + 2], mask=block, cache=self_cache))
        steps_cross.append(mha(x[:, t : t + 2], memory, cache=cross_cache))
    torch.testing.assert_close(torch.cat(steps_self, 1), mha(x, mask=causal), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat(steps_cross, 1), mha(x, memory), rtol=0, atol=1e-12)
    assert self_cache.k.shape == (2, 6, N_HEADS * mha.d_head)
    assert cross_cache.k.shape == (2, 4, N_HEADS * mha.d_head)
