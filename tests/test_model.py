import inspect
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_reference import torch_transformer

from transformer.decoder import DecoderCache, DecoderLayer
from transformer.embeddings import TokenEmbedding
from transformer.encoder import EncoderLayer, StackConfig
from transformer.masks import cross_mask, decoder_mask, encoder_mask
from transformer.model import Transformer, TransformerConfig
from transformer.multihead import MultiHeadAttention
from transformer.word_vectors import load_word_vectors, read_glove

V, PAD = 60, 0


def small_config(**changes) -> TransformerConfig:
    options = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, max_len=40)
    return TransformerConfig(V, V, **{**options, **changes})


def small_model(seed: int = 0, **changes) -> Transformer:
    """float64, eval, with random biases and LayerNorm parameters (so that a swap cannot hide)."""
    torch.manual_seed(seed)
    model = Transformer(small_config(**changes)).double().eval()
    with torch.no_grad():
        for p in [*model.encoder.parameters(), *model.decoder.parameters()]:
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded source (3, 9) and target input (3, 7) ids."""
    torch.manual_seed(seed)
    src = torch.randint(4, V, (3, 9))
    src[0, 6:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(4, V, (3, 7))
    tgt[1, 5:] = PAD
    tgt[2, 3:] = PAD
    return src, tgt


def count(config: TransformerConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(config).parameters())


def test_base_parameter_count():
    n = count(TransformerConfig(37000, 37000))
    assert n == 63_082_496
    assert 60e6 <= n <= 66e6
    assert count(TransformerConfig(37000, 37000, max_len=1024)) == n  # positions are no parameter
    assert count(TransformerConfig(37000, 37000, norm_first=True)) == n + 2 * 2 * 512  # final LNs
    separate = TransformerConfig(37000, 30000, share_embeddings=False)
    assert count(separate) == n - 37000 * 512 + (37000 + 30000) * 512


def rates_and_eps(module: nn.Module) -> tuple[list[float], list[float]]:
    """The dropout probabilities and LayerNorm eps inside a module of ours or of PyTorch's."""
    attention = (MultiHeadAttention, nn.MultiheadAttention)
    rates = [m.dropout for m in module.modules() if isinstance(m, attention)]
    rates += [m.p for m in module.modules() if isinstance(m, nn.Dropout)]
    return sorted(rates), sorted(m.eps for m in module.modules() if hasattr(m, "eps"))


def test_defaults_are_pytorchs():
    """Built without the options, our configuration and layers are PyTorch's built without them."""
    theirs = inspect.signature(nn.Transformer).parameters
    names = {"d_model": "d_model", "n_heads": "nhead", "n_layers": "num_encoder_layers"}
    names |= {"d_ff": "dim_feedforward", "dropout": "dropout", "norm_first": "norm_first"}
    for ours, their_name in names.items():
        assert getattr(TransformerConfig(V, V), ours) == theirs[their_name].default, ours
    sizes = StackConfig(d_model=32, n_heads=4, d_ff=64)  # dropout and norm_first: defaults
    pairs = [
        (MultiHeadAttention(32, 4), nn.MultiheadAttention(32, 4)),
        (EncoderLayer(sizes), nn.TransformerEncoderLayer(32, 4, 64)),
        (DecoderLayer(sizes), nn.TransformerDecoderLayer(32, 4, 64)),
    ]
    for ours, theirs in pairs:
        assert rates_and_eps(ours) == rates_and_eps(theirs), type(ours).__name__


def test_embeddings_shared_and_tied():
    model = Transformer(small_config())
    table = model.src_embed.token.embedding.weight
    assert model.tgt_embed is model.src_embed
    assert model.generator.weight is table
    assert sum(p.numel() for p in model.parameters()) == count(small_config())
    separate = Transformer(
        TransformerConfig(V, V + 5, d_model=32, n_heads=4, share_embeddings=False)
    )
    assert separate.tgt_embed is not separate.src_embed
    assert separate.generator.weight is separate.tgt_embed.token.embedding.weight
    assert separate.generator.weight.shape == (V + 5, 32)


def test_tie_survives_conversion_gradient_and_loading():
    model = small_model()
    table = model.src_embed.token.embedding.weight
    assert model.generator.weight is table and table.dtype == torch.float64
    src, tgt = batch()
    model(src, tgt).sum().backward()
    assert model.generator.weight.grad is table.grad
    assert bool((table.grad.abs().sum(dim=1) > 0).all())  # every row, through the output side

    loaded = Transformer(small_config()).double()
    loaded.load_state_dict(model.state_dict())
    assert loaded.generator.weight is loaded.src_embed.token.embedding.weight
    assert torch.equal(loaded.generator.weight, table)


def test_tied_gradient_is_input_plus_output_gradient():
    model = small_model()
    untied = small_model()
    untied.generator.weight = nn.Parameter(untied.generator.weight.detach().clone())
    src, tgt = batch()
    target = torch.randint(4, V, tgt.shape)
    for m in (model, untied):
        F.cross_entropy(m(src, tgt).transpose(1, 2), target).backward()
    total = untied.src_embed.token.embedding.weight.grad + untied.generator.weight.grad
    assert torch.allclose(model.generator.weight.grad, total, atol=1e-12)
    # every row of the output projection gets gradient, not only those of the input pieces
    assert bool((untied.generator.weight.grad.abs().sum(1) > 0).all())


def test_initialization():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(1000, 1000, d_model=128, n_heads=4, d_ff=256, n_layers=2))
    table = model.src_embed.token.embedding.weight
    assert table.std().item() == pytest.approx(128**-0.5, rel=0.05)
    for name, p in [*model.encoder.named_parameters(), *model.decoder.named_parameters()]:
        if p.dim() > 1:  # Xavier-uniform
            bound = math.sqrt(6 / sum(p.shape))
            assert p.abs().max() <= bound, name
            assert p.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1), name
        elif ".norm." in name:
            assert torch.equal(p, torch.ones_like(p) if name.endswith("weight") else 0 * p), name
        elif "_proj" in name:  # attention biases
            assert bool((p == 0).all()), name
        else:  # feed-forward biases keep nn.Linear's U(+-1/sqrt(fan_in))
            fan_in = 128 if "linear1" in name else 256
            assert 0 < p.abs().max() <= fan_in**-0.5, name
    # logits of unit variance and an initial loss near ln V + 1/2 (eqs. init-logit-variance, init-loss)
    model.eval()
    src, tgt = torch.randint(4, 1000, (8, 12)), torch.randint(4, 1000, (8, 10))
    with torch.no_grad():
        logits = model(src, tgt)
    assert logits.std().item() == pytest.approx(1.0, abs=0.15)
    loss = F.cross_entropy(logits.transpose(1, 2), torch.randint(4, 1000, (8, 10))).item()
    assert loss == pytest.approx(math.log(1000) + 0.5, abs=0.25)


def rel_error(y: torch.Tensor, y_ref: torch.Tensor) -> float:
    return ((y - y_ref).abs().max() / y_ref.abs().max()).item()


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_nn_transformer(norm_first):
    model = small_model(norm_first=norm_first)
    ref = torch_transformer(model)
    src, tgt = batch()
    src_pad, tgt_pad = src == PAD, tgt == PAD
    causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).triu(1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, y = model.src_embed(src), model.tgt_embed(tgt)
        memory = model.encoder(x, encoder_mask(src, PAD))
        h = model.decoder(y, memory, decoder_mask(tgt, PAD), cross_mask(tgt, src, PAD))
        memory_ref = ref.encoder(x, src_key_padding_mask=src_pad)
        h_ref = ref(
            x,
            y,
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        logits = model(src, tgt)
    assert rel_error(memory[~src_pad], memory_ref[~src_pad]) < 1e-10
    assert rel_error(h[~tgt_pad], h_ref[~tgt_pad]) < 1e-10
    assert rel_error(logits[~tgt_pad], model.generator(h_ref)[~tgt_pad]) < 1e-10


def test_post_ln_differs_from_torch_with_its_final_norms():
    """The nn.Identity swap matters: with PyTorch's final LayerNorms the outputs differ."""
    model = small_model()
    ref = torch_transformer(model)
    ref.decoder.norm = nn.LayerNorm(32, dtype=torch.float64)
    src, tgt = batch()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, y = model.src_embed(src), model.tgt_embed(tgt)
        h = model.decoder(
            y,
            model.encoder(x, encoder_mask(src, PAD)),
            decoder_mask(tgt, PAD),
            cross_mask(tgt, src, PAD),
        )
        h_ref = ref(x, y, tgt_mask=torch.ones(7, 7, dtype=torch.bool).triu(1),
                    src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
                    memory_key_padding_mask=src == PAD)  # fmt: skip
    assert rel_error(h[tgt != PAD], h_ref[tgt != PAD]) > 1e-3


@pytest.mark.parametrize("norm_first", [False, True])
def test_future_target_tokens_cannot_leak(norm_first):
    model = small_model(norm_first=norm_first)
    src, _ = batch()
    tgt = torch.randint(4, V, (3, 7))
    with torch.no_grad():
        full = model(src, tgt)
        for t in range(1, tgt.size(1)):
            changed = tgt.clone()
            changed[:, t:] = torch.randint(4, V, changed[:, t:].shape)
            assert not torch.equal(changed, tgt)
            out = model(src, changed)
            assert torch.allclose(out[:, :t], full[:, :t], rtol=0, atol=1e-12), t
            assert not torch.allclose(out[:, t:], full[:, t:])  # the test can see a change


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_does_not_change_logits(norm_first):
    model = small_model(norm_first=norm_first)
    src, tgt = batch()
    pad = torch.full((3, 4), PAD)
    with torch.no_grad():
        logits = model(src, tgt)
        more_src_padding = model(torch.cat([src, pad], dim=1), tgt)
        more_tgt_padding = model(src, torch.cat([tgt, pad], dim=1))
        changed_src = src.clone()
        changed_src[0, 0] = (changed_src[0, 0] + 1 - 4) % (V - 4) + 4
        other = model(changed_src, tgt)
    assert torch.allclose(more_src_padding, logits, rtol=0, atol=1e-12)
    real = tgt != PAD
    assert torch.allclose(
        more_tgt_padding[:, : tgt.size(1)][real], logits[real], rtol=0, atol=1e-12
    )
    assert not torch.allclose(other[0], logits[0])  # a real source token does matter


@pytest.mark.parametrize("chunk", [1, 2])
def test_cached_decoding_equals_full_decode(chunk):
    """Feeding the target step by step with a DecoderCache gives the logits of one full pass."""
    model = small_model()
    src, _ = batch()  # padded sources
    tgt = torch.randint(4, V, (3, 7))
    tgt[2, 5:] = PAD  # and a padded target row
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory, src)
        cache = DecoderCache()
        steps = [
            model.decode(tgt[:, t : t + chunk], memory, src, cache)
            for t in range(0, tgt.size(1), chunk)
        ]
    assert cache.length == tgt.size(1)
    real = tgt != PAD
    assert torch.allclose(torch.cat(steps, dim=1)[real], full[real], rtol=0, atol=1e-10)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    model = Transformer(small_config(dropout=0.3))
    src, tgt = batch()
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))
    model.train()
    assert not torch.equal(model(src, tgt), model(src, tgt))


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_read_glove(tmp_path):
    text = "3 4\nthe 0.1 0.2 0.3 0.4\ndog -1 0 1e-1 2.5\n\nthe 9 9 9 9\nDog 1 1 1 1 \n"
    vectors = read_glove(write(tmp_path / "v.txt", text))
    assert list(vectors) == ["the", "dog", "Dog"]  # header and blank line skipped
    assert torch.equal(vectors["the"], torch.tensor([0.1, 0.2, 0.3, 0.4]))  # first one wins
    assert torch.equal(vectors["dog"], torch.tensor([-1.0, 0.0, 0.1, 2.5]))
    assert vectors["Dog"].shape == (4,)  # trailing space tolerated


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "dog 0.1 0.2\ncat 0.3\n",
            r"v.txt, line 2: 'cat' has 1 values, but the first vector had 2",
        ),
        ("dog 0.1 0.2\ncat 0.3 0.4 0.5\n", r"line 2: 'cat' has 3 values"),
        ("dog 0.1 x\n", r"line 1: 'dog' has a value that is not a number"),
        ("dog 0.1 0.2\ncat\n", r"line 2: 'cat' has no numbers"),
        ("dog 0.1 nan\n", r"line 1: 'dog' has a value that is not finite"),
        ("\n\n", r"v.txt holds no word vectors"),
    ],
)
def test_read_glove_errors(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_glove(write(tmp_path / "v.txt", text))


PIECES = ["<pad>", "<unk>", "<s>", "</s>", "▁the", "▁Dog", "dog", "▁cat", "s", "▁"]


def test_load_word_vectors(tmp_path):
    torch.manual_seed(0)
    text = "".join(
        f"{w} {' '.join(f'{v:.4f}' for v in (0.5 * torch.randn(8)).tolist())}\n"
        for w in ["the", "dog", "s", "<unk>", "bird"]
    )
    vectors = read_glove(write(tmp_path / "v.txt", text))
    emb = TokenEmbedding(len(PIECES), 8)
    before = emb.embedding.weight.detach().clone()
    assert load_word_vectors(emb, vectors, PIECES) == 4  # ▁the, ▁Dog, dog, s; never <unk>
    weight = emb.embedding.weight
    rows = [4, 5, 6, 8]
    assert torch.equal(weight[[0, 1, 2, 3, 7, 9]], before[[0, 1, 2, 3, 7, 9]])
    assert weight[rows].pow(2).sum(-1).mean().item() == pytest.approx(1.0)  # rescaled
    assert torch.equal(weight[5], weight[6])  # ▁Dog and dog share the vector of "dog"
    scale = weight[4] / vectors["the"]
    assert torch.allclose(weight[5] / vectors["dog"], scale)  # one common factor
    assert torch.allclose(emb(torch.tensor([rows])).pow(2).mean(), torch.tensor(1.0))

    exact = TokenEmbedding(len(PIECES), 8)
    assert load_word_vectors(exact, vectors, PIECES, lowercase=False, rescale=False) == 3
    assert torch.equal(exact.embedding.weight[6], vectors["dog"])  # unchanged values
    assert load_word_vectors(exact, {"zebra": torch.ones(8)}, PIECES) == 0


def test_load_word_vectors_errors():
    emb = TokenEmbedding(len(PIECES), 8)
    with pytest.raises(ValueError, match=r"shape \(5,\), but the embedding has d_model=8"):
        load_word_vectors(emb, {"the": torch.ones(8), "dog": torch.ones(5)}, PIECES)
    with pytest.raises(ValueError, match="got 3 pieces for an embedding of 10 rows"):
        load_word_vectors(emb, {"the": torch.ones(8)}, PIECES[:3])


def test_glove_sized_model_with_decoupled_d_head():
    config = TransformerConfig(V, V, d_model=300, n_heads=8, d_head=64, d_ff=64, n_layers=1)
    model = Transformer(config)
    pieces = [f"▁w{i}" for i in range(V)]
    vectors = {f"w{i}": torch.randn(300) for i in range(10, 20)}
    assert load_word_vectors(model.src_embed.token, vectors, pieces) == 10
    src, tgt = batch()
    assert model(src, tgt).shape == (3, 7, V)


def test_config_errors():
    with pytest.raises(ValueError, match="src_vocab_size=8000 and tgt_vocab_size=6000"):
        TransformerConfig(8000, 6000)
    TransformerConfig(8000, 6000, share_embeddings=False)
    with pytest.raises(ValueError, match="n_layers must be a positive integer, got 0"):
        TransformerConfig(V, V, n_layers=0)
    with pytest.raises(ValueError, match="max_len must be a positive integer, got True"):
        TransformerConfig(V, V, max_len=True)  # StackConfig's loop checks the model's sizes too
    with pytest.raises(ValueError, match="tgt_vocab_size must be a positive integer, got 0"):
        TransformerConfig(V, 0, share_embeddings=False)
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\), got 1.0"):
        TransformerConfig(V, V, dropout=1.0)
    with pytest.raises(ValueError, match="pad_id=60 is not an id"):
        TransformerConfig(V, V, pad_id=60)
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        Transformer(TransformerConfig(V, V, d_model=30, n_heads=4))


def test_input_errors():
    model = Transformer(small_config(max_len=8))
    src, tgt = batch()
    with pytest.raises(ValueError, match="source length 9 exceeds the model's max_len 8"):
        model(src, tgt)
    with pytest.raises(ValueError, match="target length 9 exceeds the model's max_len 8"):
        model(src[:, :8], torch.cat([tgt, tgt[:, :2]], dim=1))
    memory = model.encode(src[:, :8])
    cache = DecoderCache()
    model.decode(tgt, memory, src[:, :8], cache)
    with pytest.raises(ValueError, match="target length 9 exceeds"):
        model.decode(tgt[:, :2], memory, src[:, :8], cache)  # 7 kept + 2 new
    bad = tgt.clone()
    bad[0, 0] = V
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {V}\)"):
        model(src[:, :8], bad)
    with pytest.raises(TypeError, match="token ids must be an integer tensor, got torch.float32"):
        model(src[:, :8].float(), tgt)
    with pytest.raises(ValueError, match="src holds 3 sentences but tgt_in holds 2"):
        model(src[:, :8], tgt[:2])
    with pytest.raises(ValueError, match=r"must be a 2-D \(batch, seq\) tensor, got \(8,\)"):
        model(src[0, :8], tgt[0])
    with pytest.raises(ValueError, match=r"memory \(3, 8, 32\) and src \(2, 8\) do not fit"):
        model.decode(tgt[:2], memory, src[:2, :8])
    with pytest.raises(ValueError, match=r"memory \(3, 8, 32\) and src \(3, 6\) do not fit"):
        model.decode(tgt, memory, src[:, :6])


def test_decode_checks_memory_and_cache():
    """What the layers no longer check, decode does: the memory's width, and the cache."""
    model = Transformer(small_config(max_len=8))  # d_model 32, 2 layers
    src, tgt = batch()
    src = src[:, :8]
    memory = model.encode(src)  # (3, 8, 32)
    fits = r"\(batch, S, d_model=32\) and \(batch, S\)"
    with pytest.raises(
        ValueError, match=rf"memory \(3, 8, 16\) and src \(3, 8\) do not fit {fits}"
    ):
        model.decode(tgt, memory[..., :16], src)
    with pytest.raises(ValueError, match=r"memory NoneType and src \(3, 8\) do not fit"):
        model.decode(tgt, None, src)
    with pytest.raises(ValueError, match="src holds 3 sentences but tgt_in holds 2"):
        model.decode(tgt[:2], memory, src)  # forward's batch check, shared by decode
    with pytest.raises(ValueError, match=r"source ids must be a 2-D \(batch, seq\) tensor"):
        model.decode(tgt, memory, src[0])
    deeper = Transformer(small_config(max_len=8, n_layers=3))
    cache = DecoderCache()
    deeper.decode(tgt[:, :1], deeper.encode(src), src, cache)
    with pytest.raises(ValueError, match="cache holds 3 layers but this decoder has 2"):
        model.decode(tgt[:, 1:2], memory, src, cache)
    cache = DecoderCache()
    model.decode(tgt[:, :1], memory, src, cache)  # kept: 3 sentences
    with pytest.raises(ValueError, match="cache holds 3 sentences but tgt_in has 2"):
        model.decode(tgt[:2, 1:2], memory[:2], src[:2], cache)
    model.decode(tgt[:, 1:2], memory, src, cache)  # the right batch goes on
    assert cache.length == 2
