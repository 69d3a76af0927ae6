import warnings
from dataclasses import asdict

import pytest
import torch
from sacrebleu.metrics import BLEU

from transformer import evaluation
from transformer.attention_maps import attention_maps, attention_weights
from transformer.bleu import corpus_bleu
from transformer.checkpoints import save_checkpoint, save_step
from transformer.data import load_multi30k
from transformer.decoding import Decoding
from transformer.evaluation import (
    average_checkpoints,
    evaluate_split,
    load_model,
    load_run,
    translate,
)
from transformer.model import Transformer, TransformerConfig
from transformer.tokenizer import BOS_ID, multi30k_tokenizer


def small_config(vocab: int = 40, **changes) -> TransformerConfig:
    options = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=24, dropout=0.0)
    return TransformerConfig(vocab, vocab, **{**options, **changes})


def write_checkpoint(path, seed: int = 0, config: TransformerConfig | None = None):
    """A checkpoint as loop.train writes it (the parts evaluation reads)."""
    config = config or small_config()
    torch.manual_seed(seed)
    model = Transformer(config)
    save_checkpoint(
        {"step": seed, "model": model.state_dict(), "model_config": asdict(config)}, path
    )
    return path


def test_average_of_identical_checkpoints_is_that_checkpoint(tmp_path):
    path = write_checkpoint(tmp_path / "a.pt")
    original = torch.load(path, weights_only=True)["model"]
    averaged = average_checkpoints([path, path, path])
    assert averaged.keys() == original.keys()
    for k, v in original.items():
        assert averaged[k].dtype == v.dtype
        assert torch.allclose(averaged[k], v, rtol=0, atol=1e-7)


def test_average_of_two_is_their_mean(tmp_path):
    paths = [write_checkpoint(tmp_path / f"{s}.pt", seed=s) for s in (1, 2)]
    a, b = (torch.load(p, weights_only=True)["model"] for p in paths)
    averaged = average_checkpoints(paths)
    key = "decoder.layers.0.feed_forward.linear1.weight"
    assert key in averaged and not torch.equal(a[key], b[key])
    for k in a:
        assert torch.allclose(
            averaged[k], (a[k].double() + b[k].double()).div(2).float(), atol=1e-7
        )
    model, ckpt = load_model(paths)  # several paths: their average
    assert all(torch.equal(model.state_dict()[k], averaged[k]) for k in averaged)
    assert ckpt["step"] == 2  # the rest of the dict is the last checkpoint's


def test_averaging_refuses_different_configurations_and_names_the_fields(tmp_path):
    a = write_checkpoint(tmp_path / "a.pt")
    b = write_checkpoint(tmp_path / "b.pt", config=small_config(d_ff=48, n_layers=2))
    with pytest.raises(ValueError, match="d_ff: 48 vs 32; n_layers: 2 vs 1"):
        average_checkpoints([a, b])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def test_load_model_rebuilds_the_model(tmp_path):
    path = write_checkpoint(tmp_path / "a.pt", seed=3)
    model, ckpt = load_model(path)
    torch.manual_seed(3)
    original = Transformer(small_config()).eval()
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4))
    assert not model.training and model.config == small_config()
    assert torch.equal(model(src, tgt), original(src, tgt))
    assert ckpt["step"] == 3


def test_load_model_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_model(tmp_path / "missing.pt")
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a readable PyTorch checkpoint"):
        load_model(tmp_path / "notes.pt")
    save_checkpoint({"model": {}}, tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="holds no model_config"):
        load_model(tmp_path / "bare.pt")
    # weights of one configuration, saved with another: the error names the tensors that differ
    good = torch.load(write_checkpoint(tmp_path / "a.pt"), weights_only=True)
    wrong = {**good, "model_config": {**good["model_config"], "d_ff": 48}}
    save_checkpoint(wrong, tmp_path / "wrong.pt")
    with pytest.raises(ValueError, match=r"linear1.weight: \(32, 16\) vs \(48, 16\)"):
        load_model(tmp_path / "wrong.pt")
    unknown = {**good, "model_config": {**good["model_config"], "n_experts": 8}}
    save_checkpoint(unknown, tmp_path / "unknown.pt")
    with pytest.raises(ValueError, match="unexpected keyword argument .n_experts."):
        load_model(tmp_path / "unknown.pt")
    invalid = {**good, "model_config": {**good["model_config"], "dropout": 2.0}}
    save_checkpoint(invalid, tmp_path / "invalid.pt")
    with pytest.raises(ValueError, match="dropout must lie in"):
        load_model(tmp_path / "invalid.pt")


def test_load_run_averages_the_last_checkpoints_of_a_run_folder(tmp_path):
    """A run folder as train leaves it (step checkpoints, the newest 3 kept): load_run averages
    its last `average`, or loads one checkpoint file as it is (paper section 6.1)."""
    run = tmp_path / "run"
    for step in (1, 2, 3, 4):
        state = torch.load(write_checkpoint(tmp_path / f"{step}.pt", seed=step), weights_only=True)
        save_step(run, step, state, keep=3)
    steps = [run / "checkpoints" / f"step_{s:07d}.pt" for s in (2, 3, 4)]
    for average in (1, 2, 3):
        model, ckpt = load_run(run, average)
        want = average_checkpoints(steps[-average:])
        assert all(torch.equal(model.state_dict()[k], v) for k, v in want.items())
        assert ckpt["step"] == 4 and not model.training
    model, _ = load_run(steps[0], 1)  # a file, as it is
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4))
    assert torch.equal(model(src, tgt), load_model(steps[0])[0](src, tgt))
    with pytest.raises(ValueError, match="keeps 3 step checkpoints, fewer than the 4 to average"):
        load_run(run, 4)
    with pytest.raises(ValueError, match="averaging 2 checkpoints needs a run folder"):
        load_run(steps[0], 2)
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*neither a file nor a run"):
        load_run(tmp_path / "nowhere", 1)
    with pytest.raises(ValueError, match="average must be a positive integer, got 0"):
        load_run(run, 0)


@pytest.fixture(scope="module")
def tokenizer():
    """The shared Multi30k tokenizer (needs the corpus: MULTI30K_DIR or network)."""
    return multi30k_tokenizer()


def random_model(tokenizer, max_len: int = 24) -> Transformer:
    torch.manual_seed(0)
    return Transformer(small_config(tokenizer.vocab_size, max_len=max_len)).eval()


def test_translate_empty_lines_and_order(tokenizer):
    model = random_model(tokenizer)
    lines = ["A dog runs.", "", "   ", "Two men ☃ in the snow.", "A girl."]
    out = translate(model, tokenizer, lines, Decoding(beam_size=2), max_len=6, batch_size=2)
    assert len(out) == len(lines) and out[1] == out[2] == ""
    assert all(out[i] for i in (0, 3, 4))  # a random model still writes something
    for line, translation in zip(lines, out, strict=True):  # batching and sorting change nothing
        assert translate(model, tokenizer, [line], Decoding(beam_size=2), max_len=6) == [
            translation
        ]
    assert translate(model, tokenizer, lines, Decoding(beam_size=1), max_len=6)[1:3] == ["", ""]
    assert translate(model, tokenizer, []) == []


def test_translate_truncates_long_sentences_with_a_warning(tokenizer):
    model = random_model(tokenizer, max_len=10)
    long = "A man in a blue shirt is standing on a ladder cleaning windows."
    assert len(tokenizer.encode(long)) > 10
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = translate(model, tokenizer, [long, "A dog.", long], Decoding(beam_size=1))
    assert len(caught) == 1
    assert "2 of 3 sentences are longer than the model's max_len=10" in str(caught[0].message)
    assert out[0] == out[2] != ""
    truncated = tokenizer.decode(tokenizer.encode(long)[:10])
    assert out[0] == translate(model, tokenizer, [truncated], Decoding(beam_size=1))[0]


def test_translate_refuses_bad_input(tokenizer):
    model = random_model(tokenizer)
    with pytest.raises(TypeError, match="list of sentences"):
        translate(model, tokenizer, "A dog runs.")
    with pytest.raises(ValueError, match="the tokenizer has 8000 pieces but the model"):
        translate(Transformer(small_config()), tokenizer, ["A dog."])
    with pytest.raises(ValueError, match="batch_size"):
        translate(model, tokenizer, ["A dog."], batch_size=0)


def test_bleu_wrapper_matches_sacrebleu():
    hyps = ["Ein Hund rennt im Schnee .", "zwei Männer stehen .", "Eine Frau liest"]
    refs = [
        "Ein Hund läuft durch den Schnee .",
        "Zwei Männer stehen draußen .",
        "Eine Frau liest .",
    ]
    scores = corpus_bleu(hyps, refs)
    cased, lower = BLEU(), BLEU(lowercase=True)
    assert scores.cased.score == cased.corpus_score(hyps, [refs]).score
    assert scores.lowercased.score == lower.corpus_score(hyps, [refs]).score
    assert scores.lowercased.score > scores.cased.score  # "zwei" matches "Zwei" only lowercased
    assert scores.cased_signature == str(cased.get_signature())
    assert "case:mixed" in scores.cased_signature and "tok:13a" in scores.cased_signature
    assert "case:lc" in scores.lowercased_signature
    assert corpus_bleu(refs, refs).cased.score == pytest.approx(100.0)
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        corpus_bleu(hyps, refs[:2])
    with pytest.raises(ValueError, match="at least one pair"):
        corpus_bleu([], [])


def test_alpha_reaches_beam_search(tokenizer, beam_alphas):
    model, lines = random_model(tokenizer), ["A dog runs.", "A girl."]
    translate(model, tokenizer, lines, Decoding(beam_size=2, alpha=1.7), max_len=4, batch_size=1)
    assert beam_alphas == [1.7, 1.7]  # one call per batch
    zero = Decoding(beam_size=2, alpha=0.0)
    evaluate_split(model, tokenizer, "val", decoding=zero, max_len=4, max_sentences=2)
    assert beam_alphas[2:] == [0.0]
    translate(model, tokenizer, lines, Decoding(beam_size=2), max_len=4)
    assert beam_alphas[3:] == [0.6]  # the paper's alpha by default


def test_evaluate_split_scores_its_translations(tokenizer, monkeypatch):
    pairs = load_multi30k("val", "de", "en")[:5]
    sources, targets = [de for de, _ in pairs], [en for _, en in pairs]
    model = random_model(tokenizer)
    greedy = Decoding(beam_size=1)
    result = evaluate_split(model, tokenizer, "val", "de", "en", greedy, max_sentences=5, max_len=5)
    assert result.references == targets  # the split's English side, in order: not its sources
    assert result.hypotheses == translate(
        model, tokenizer, sources, Decoding(beam_size=1), max_len=5
    )
    # a translator that writes the first half of each reference: every n-gram matches, and only
    # the brevity penalty lowers the score; scored the other way round, BLEU would differ
    halves = {de: " ".join(en.split()[: len(en.split()) // 2]) for de, en in pairs}
    monkeypatch.setattr(
        evaluation, "translate", lambda m, t, lines, *a, **k: [halves[s] for s in lines]
    )
    scored = evaluate_split(model, tokenizer, "val", "de", "en", max_sentences=5).bleu
    hypotheses = [halves[s] for s in sources]
    want = BLEU().corpus_score(hypotheses, [targets]).score
    assert 0 < want < 100 and want != BLEU().corpus_score(targets, [hypotheses]).score
    assert scored.cased.score == want
    assert scored.lowercased.score == BLEU(lowercase=True).corpus_score(hypotheses, [targets]).score
    assert "case:lc" in scored.lowercased_signature


def test_attention_weights_leave_outputs_unchanged():
    torch.manual_seed(0)
    model = Transformer(small_config(n_layers=2)).eval()
    src = torch.randint(4, 40, (2, 6))
    src[1, 3:] = 0  # padding
    tgt = torch.randint(4, 40, (2, 4))
    layers = [layer.cross_attn for layer in model.decoder.layers]
    plain = model(src, tgt)
    with attention_weights(layers) as maps:
        hooked = model(src, tgt)
    assert torch.allclose(plain, hooked, rtol=0, atol=1e-5)  # explicit softmax vs fused kernel
    assert [len(calls) for calls in maps] == [1, 1]
    weights = maps[1][0]  # (batch, n_heads, T, S)
    assert weights.shape == (2, 2, 4, 6)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 4))
    assert (weights[1, :, :, 3:] == 0).all()
    assert all(not layer._forward_hooks and not layer._forward_pre_hooks for layer in layers)


def test_attention_maps_are_the_layers_attention_by_hand():
    torch.manual_seed(0)
    model = Transformer(small_config(n_layers=2)).double().eval()
    src_ids, out_ids = [5, 9, 7, 11, 6], [8, 12, 3]
    maps = attention_maps(model, src_ids, out_ids)
    assert maps["encoder"].shape == (2, 2, 5, 5)
    assert maps["decoder"].shape == (2, 2, 3, 3)
    assert maps["cross"].shape == (2, 2, 3, 5)
    for m in maps.values():
        assert torch.allclose(m.sum(-1), torch.ones(m.shape[:-1], dtype=m.dtype))
    assert (maps["decoder"].triu(1) == 0).all()  # no output piece reads a later one

    def by_hand(attn, x, causal):  # eq. attention: softmax(Q K^T / sqrt(d_head)) per head
        q, k, _ = attn.in_proj(x).split(attn.inner, dim=-1)  # (1, L, inner) each
        q, k = (t.view(1, -1, attn.n_heads, attn.d_head).transpose(1, 2) for t in (q, k))
        scores = q @ k.transpose(-2, -1) / attn.d_head**0.5  # (1, h, L, L)
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores).triu(1).bool(), float("-inf"))
        return scores.softmax(-1)[0]  # (h, L, L)

    with torch.no_grad():  # layer 1 of each stack reads the embeddings (post-LN)
        src = model.src_embed(torch.tensor([src_ids]))
        tgt = model.tgt_embed(torch.tensor([[BOS_ID, *out_ids[:-1]]]))
        encoder = by_hand(model.encoder.layers[0].self_attn, src, causal=False)
        decoder = by_hand(model.decoder.layers[0].self_attn, tgt, causal=True)
    assert torch.allclose(maps["encoder"][0], encoder, atol=1e-12)
    assert torch.allclose(maps["decoder"][0], decoder, atol=1e-12)
