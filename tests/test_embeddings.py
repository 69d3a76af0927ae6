import math

import pytest
import torch

from transformer.embeddings import (
    PositionalEncoding,
    TokenEmbedding,
    TransformerEmbedding,
    check_token_ids,
    sinusoidal_positional_encoding,
)


def test_pe_matches_the_formula():
    pe = sinusoidal_positional_encoding(50, 16, dtype=torch.float64)
    for pos in (0, 7, 49):
        for k in range(8):
            omega = 1 / 10000 ** (2 * k / 16)
            assert pe[pos, 2 * k].item() == pytest.approx(math.sin(pos * omega), abs=1e-12)
            assert pe[pos, 2 * k + 1].item() == pytest.approx(math.cos(pos * omega), abs=1e-12)


def test_pe_shift_is_a_fixed_rotation():
    """PE[pos + k] = R_k PE[pos] for every pos, with R_k a block-diagonal rotation."""
    d_model, k = 32, 5
    pe = sinusoidal_positional_encoding(300, d_model, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    rotation[0::2, 0::2], rotation[0::2, 1::2] = torch.diag(c), torch.diag(s)
    rotation[1::2, 0::2], rotation[1::2, 1::2] = torch.diag(-s), torch.diag(c)
    assert torch.allclose(pe[:-k] @ rotation.T, pe[k:], atol=1e-12)


def test_pe_rejects_odd_d_model():
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_positional_encoding(10, 7)


def test_token_embedding_is_scaled_lookup():
    emb = TokenEmbedding(100, 64)
    ids = torch.tensor([[1, 5, 99]])
    assert torch.equal(emb(ids), emb.embedding.weight[ids] * 8.0)
    # unit variance per coordinate after the scale (init std d_model ** -0.5)
    assert emb(torch.arange(100)[None]).std().item() == pytest.approx(1.0, abs=0.05)


def test_token_id_errors():
    with pytest.raises(ValueError, match=r"\[0, 10\).*from 0 to 10"):
        check_token_ids(torch.tensor([[0, 10]]), 10)
    with pytest.raises(ValueError, match="from -1 to 3"):
        check_token_ids(torch.tensor([[-1, 3]]), 10)
    with pytest.raises(TypeError, match="integer tensor"):
        check_token_ids(torch.tensor([[0.0]]), 10)
    check_token_ids(torch.tensor([[0, 9]]), 10)  # the whole range passes


def test_positional_encoding_adds_the_table_from_start():
    """The layer trusts the length: the model's entry points check it (tests/test_model.py)."""
    pos = PositionalEncoding(16, max_len=10, dropout=0.0)
    x = torch.zeros(2, 4, 16)
    assert torch.equal(pos(x), sinusoidal_positional_encoding(10, 16)[:4].expand(2, 4, 16))
    assert torch.equal(pos(x[:, :1], start=3), pos(x)[:, 3:4])
    assert "pe" not in pos.state_dict()  # recomputed, never checkpointed


def test_transformer_embedding_shapes_dropout_and_offsets():
    torch.manual_seed(0)
    embed = TransformerEmbedding(50, 12, max_len=20, dropout=0.5)
    ids = torch.randint(0, 50, (3, 7))
    assert embed(ids).shape == (3, 7, 12)
    embed.eval()
    full = embed(ids)
    expected = embed.token(ids) + sinusoidal_positional_encoding(20, 12)[:7]
    assert torch.allclose(full, expected)
    steps = torch.cat([embed(ids[:, t : t + 1], start=t) for t in range(7)], dim=1)
    assert torch.allclose(steps, full)
    embed.train()
    assert not torch.equal(embed(ids), full)  # dropout is active in training
