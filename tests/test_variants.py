"""The encoder-only and decoder-only language models of chapter 15 (transformer.variants)."""

import pytest
import torch

from transformer.decoder import DecoderCache
from transformer.devices import host_reads
from transformer.generation import generate, sample_token
from transformer.model import TransformerConfig
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer.variants import (
    FIRST_PIECE_ID,
    MASK_PROB,
    MASK_SPLIT,
    CausalLM,
    MaskedLM,
    clm_loss,
    fill_mask,
    lm_config,
    mask_tokens,
    mlm_loss,
)

V = 50  # a toy vocabulary: ids 0-3 are special, 4-49 are pieces


def config(**overrides) -> TransformerConfig:
    sizes = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, max_len=24)
    return lm_config(V, **(sizes | overrides))


def models(seed: int = 0, **overrides) -> list[torch.nn.Module]:
    torch.manual_seed(seed)
    return [MaskedLM(config(**overrides)).eval(), CausalLM(config(**overrides)).eval()]


def pieces(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(FIRST_PIECE_ID, V, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_model_cannot_see_the_future(norm_first):
    torch.manual_seed(0)
    model = CausalLM(config(norm_first=norm_first)).double().eval()
    ids = pieces(3, 12)
    with torch.no_grad():
        base = model(ids)  # (batch, T, V)
        for j in range(12):
            changed = ids.clone()
            changed[:, j] = FIRST_PIECE_ID + (ids[:, j] - FIRST_PIECE_ID + 1) % (V - FIRST_PIECE_ID)
            out = model(changed)
            assert torch.equal(out[:, :j], base[:, :j]), f"a change at {j} leaked backwards"
            assert not torch.equal(out[:, j], base[:, j]), f"position {j} ignores its own token"


def test_masked_model_sees_both_sides():
    torch.manual_seed(0)
    model = MaskedLM(config()).double().eval()
    ids = pieces(2, 10)
    with torch.no_grad():
        base = model(ids)
        for j in range(1, 10):
            changed = ids.clone()
            changed[:, j] = model.mask_id
            out = model(changed)
            moved = (out[:, :j] - base[:, :j]).abs().amax(dim=-1) > 1e-9  # (batch, j)
            assert moved.all(), f"a change at {j} did not reach every earlier position"


@pytest.mark.parametrize("model", models(), ids=["masked", "causal"])
def test_padding_does_not_change_real_positions(model):
    short, long = pieces(1, 5, seed=1), pieces(1, 9, seed=2)
    batch = torch.full((2, 9), PAD_ID)
    batch[0, :5], batch[1] = short, long
    with torch.no_grad():
        alone, padded = model(short), model(batch)
        torch.testing.assert_close(padded[0, :5], alone[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(padded[1], model(long)[0], atol=1e-5, rtol=1e-5)


def test_cached_forward_equals_full_forward():
    torch.manual_seed(0)
    model = CausalLM(config(norm_first=True)).double().eval()
    ids = pieces(2, 10)
    with torch.no_grad():
        full = model(ids)
        cache = DecoderCache()
        parts = [model(ids[:, :4], cache), model(ids[:, 4:5], cache), model(ids[:, 5:], cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    assert cache.length == 10


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generation_with_cache_equals_recomputation(seed):
    model = models(seed)[1]
    prompt = torch.cat([torch.full((4, 1), BOS_ID), pieces(4, 3, seed=seed)], dim=1)
    greedy = [generate(model, prompt, 15, eos_id=-1, use_cache=c) for c in (True, False)]
    assert greedy[0].shape == (4, 4 + 15)
    assert torch.equal(greedy[0], greedy[1])
    assert torch.equal(greedy[0][:, :4], prompt)
    for temperature, top_k in [(1.0, None), (0.7, 5), (2.0, 1)]:
        runs = [
            generate(
                model,
                prompt,
                15,
                sample=True,
                temperature=temperature,
                top_k=top_k,
                generator=torch.Generator().manual_seed(seed),
                use_cache=c,
            )
            for c in (True, False)
        ]
        assert torch.equal(runs[0], runs[1]), (temperature, top_k)
    assert torch.equal(runs[0], greedy[0]), "top_k=1 must be greedy"


def test_generation_stops_rows_at_eos_and_pads_after_it():
    model = models(3)[1]
    prompt = torch.cat([torch.full((3, 1), BOS_ID), pieces(3, 2, seed=4)], dim=1)  # (3, 3)

    def run(rows: int, eos_id: int) -> torch.Tensor:  # the new ids, (rows, <= 12)
        g = torch.Generator().manual_seed(0)  # the same draws in every run
        out = generate(
            model, prompt[:rows], 12, sample=True, temperature=3.0, generator=g, eos_id=eos_id
        )
        return out[:, 3:]

    free = run(3, eos_id=-1)  # 12 new ids per row, no stop
    eos = int(free[0, 2])  # pretend the third new id of row 0 ends a sentence
    stops = [row.index(eos) + 1 if eos in row else 12 for row in free.tolist()]
    assert len(set(stops)) > 1, "pick a seed where the rows stop at different steps"
    out = run(3, eos)
    assert out.size(1) == max(stops), "the loop must end when every row has stopped"
    for row, free_row, stop in zip(out, free, stops, strict=True):
        assert torch.equal(row[:stop], free_row[:stop])
        assert (row[stop:] == PAD_ID).all()
    alone = run(1, eos_id=-1)[0].tolist()  # one row: the loop ends at its EOS
    stop = alone.index(alone[2]) + 1
    assert run(1, alone[2])[0].tolist() == alone[:stop]


def test_generate_restores_training_mode():
    model = models()[1].train()
    generate(model, torch.tensor([[BOS_ID]]), 3)
    assert model.training


def test_mask_tokens_follows_the_recipe():
    ids = pieces(400, 60, seed=5)
    ids[:, 50:] = PAD_ID  # padding
    ids[:, 0] = BOS_ID  # special ids are never chosen
    mask_id = V
    inputs, labels = mask_tokens(ids, mask_id, V, torch.Generator().manual_seed(0))
    chosen = labels != PAD_ID
    eligible = (ids >= FIRST_PIECE_ID).sum().item()
    assert not chosen[:, 50:].any() and not chosen[:, 0].any()
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    n = chosen.sum().item()
    assert abs(n / eligible - MASK_PROB) < 0.01  # about 19,600 draws: sd 0.0026
    masked = (inputs[chosen] == mask_id).float().mean().item()
    replaced = inputs[chosen] != ids[chosen]
    random = (replaced & (inputs[chosen] != mask_id)).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    assert abs(masked - MASK_SPLIT[0]) < 0.02
    assert abs(random - MASK_SPLIT[1]) < 0.015
    assert abs(kept - MASK_SPLIT[2]) < 0.015
    random_ids = inputs[chosen][replaced & (inputs[chosen] != mask_id)]
    assert random_ids.min() >= FIRST_PIECE_ID and random_ids.max() < V


def test_mask_tokens_repeats_with_a_seed_and_varies_without():
    ids = pieces(8, 20)
    a = mask_tokens(ids, V, V, torch.Generator().manual_seed(7))
    b = mask_tokens(ids, V, V, torch.Generator().manual_seed(7))
    c = mask_tokens(ids, V, V, torch.Generator().manual_seed(8))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[1], c[1])


def test_masked_head_is_tied_and_never_predicts_mask():
    model = models()[0]
    assert model.mask_id == V
    assert model.embed.token.embedding.weight.shape[0] == V + 1
    logits = model(pieces(2, 6))
    assert logits.shape == (2, 6, V)
    with torch.no_grad():
        model.embed.token.embedding.weight[7] += torch.randn(32)  # the head moves with the table
    assert not torch.allclose(model(pieces(2, 6))[..., 7], logits[..., 7])


def test_causal_loss_predicts_the_next_token():
    """Eq. clm-loss on random ids, where the next token is not the current one: position t is
    scored on ids[t + 1], padding left out."""
    model = models()[1]
    ids = torch.cat([torch.full((3, 1), BOS_ID), pieces(3, 9, seed=6)], dim=1)  # (3, 10)
    ids[1, 7:], ids[2, 4:] = PAD_ID, PAD_ID
    assert (ids[0, 1:] != ids[0, :-1]).all()  # no piece repeats: "next" is never "current"
    with torch.no_grad():
        log_p = model(ids).log_softmax(dim=-1)  # (batch, T, V)
        real = (ids[:, 1:] != PAD_ID).nonzero().tolist()  # (row, position) of each target
        terms = [-log_p[b, t, ids[b, t + 1]] for b, t in real]
        torch.testing.assert_close(clm_loss(model, ids, "sum"), sum(terms))
        torch.testing.assert_close(clm_loss(model, ids), sum(terms) / len(terms))


def test_masked_loss_scores_the_labelled_positions():
    """Eq. mlm-loss: the original ids at the chosen positions, read from the corrupted input."""
    model = models()[0]
    ids = pieces(4, 12, seed=7)
    inputs, labels = mask_tokens(ids, model.mask_id, V, torch.Generator().manual_seed(1))
    chosen = (labels != PAD_ID).nonzero().tolist()
    assert len(chosen) > 1
    with torch.no_grad():
        log_p = model(inputs).log_softmax(dim=-1)  # (batch, S, V)
        terms = [-log_p[b, i, ids[b, i]] for b, i in chosen]
        torch.testing.assert_close(mlm_loss(model, inputs, labels), sum(terms) / len(terms))


def test_losses_train_both_models():
    """Each row repeats one piece: both objectives can learn it from the context."""
    for model, loss_fn in zip(models(), ["masked", "causal"], strict=True):
        ids = pieces(16, 1, seed=9).repeat(1, 12)  # (16, 12)
        if loss_fn == "causal":
            ids = torch.cat([torch.full((16, 1), BOS_ID), ids, torch.full((16, 1), EOS_ID)], 1)
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        losses = []
        for step in range(30):
            if loss_fn == "masked":
                generator = torch.Generator().manual_seed(step)
                loss = mlm_loss(model, *mask_tokens(ids, model.mask_id, V, generator))
            else:
                loss = clm_loss(model, ids)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0] - 1.5, f"{loss_fn} LM did not learn: {losses[::10]}"


def test_fill_mask_ranks_candidates_for_every_mask():
    model = models()[0]
    ids = pieces(2, 7)
    ids[0, 2] = ids[1, 5] = ids[1, 1] = model.mask_id
    top = fill_mask(model, ids, k=4)
    assert top.values.shape == top.indices.shape == (3, 4)
    assert (top.values[:, :-1] >= top.values[:, 1:]).all()
    probs = model(ids).softmax(dim=-1)
    assert torch.allclose(top.values[1], probs[1, 1].topk(4).values)  # reading order


def test_sample_token_respects_top_k_and_temperature():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0]]).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    picks = sample_token(logits, top_k=2, generator=g)
    assert set(picks.tolist()) == {1, 3}
    cold = sample_token(logits, temperature=0.05, generator=g)
    assert (cold == 1).all()
    hot = sample_token(logits, temperature=100.0, generator=g)
    assert len(set(hot.tolist())) == 5


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: generate(m, torch.empty(1, 0, dtype=torch.long), 3), "non-empty"),
        (lambda m: generate(m, torch.tensor([BOS_ID, 5]), 3), "non-empty"),
        (lambda m: generate(m, torch.full((1, 30), 5), 1), "max_len=24"),
        (lambda m: generate(m, torch.full((1, 20), 5), 10), "at most 4 new tokens"),
        (lambda m: generate(m, torch.tensor([[BOS_ID, PAD_ID]]), 3), "padding"),
        (lambda m: generate(m, torch.tensor([[BOS_ID]]), 0), "max_new_tokens"),
        (lambda m: generate(m, torch.tensor([[BOS_ID]]), 3, sample=True, top_k=0), "top_k"),
        (lambda m: generate(m, torch.tensor([[BOS_ID]]), 3, sample=True, top_k=-2), "top_k"),
        (lambda m: generate(m, torch.tensor([[BOS_ID]]), 3, temperature=0.0), "temperature"),
        (lambda m: generate(m, torch.tensor([[BOS_ID]]), 3, temperature=-1), "temperature"),
        (lambda m: generate(m, torch.tensor([[BOS_ID]]), 3, temperature=float("nan")), "temp"),
        (lambda m: m(torch.tensor([5, 6, 7])), "unsqueeze"),
        (lambda m: m(torch.full((1, 25), 5)), "max_len"),
    ],
)
def test_causal_model_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(models()[1])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: fill_mask(m, torch.tensor([[5, 6, 7]])), "no \\[MASK\\]"),
        (lambda m: fill_mask(m, torch.tensor([[5, V, 7]]), k=0), "k must"),
        (lambda m: fill_mask(m, torch.tensor([[5, V, 7]]), k=V + 1), "k must"),
        (lambda m: m(torch.tensor([5, V, 7])), "unsqueeze"),
        (lambda m: m(torch.full((1, 25), 5)), "max_len"),
        (lambda m: mask_tokens(torch.tensor([[5, 6]]), V, V, mask_prob=0.0), "mask_prob"),
        (lambda m: mask_tokens(torch.tensor([[5, 6]]), V, V, mask_prob=1.5), "mask_prob"),
        (lambda m: mask_tokens(torch.tensor([[1, 2]]), 4, 4), "no real pieces"),
        (lambda m: mlm_loss(m, torch.tensor([[5, 6]]), torch.tensor([[PAD_ID] * 2])), "no pos"),
    ],
)
def test_masked_model_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(models()[0])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(d_model=0), "d_model must be a positive integer"),
        (dict(n_layers=1.5), "n_layers must be a positive integer"),
        (dict(pad_id=V), "pad_id"),
    ],
)
def test_config_bad_input(overrides, message):
    with pytest.raises(ValueError, match=message):
        config(**overrides)


@pytest.mark.parametrize("model_class", [MaskedLM, CausalLM])
def test_language_models_need_one_vocabulary(model_class):
    two = TransformerConfig(V, V + 10, d_model=32, n_heads=4, share_embeddings=False)
    with pytest.raises(ValueError, match="one vocabulary"):
        model_class(two)


def test_generation_reads_the_prompt_ids_once_not_every_token():
    """generate checks the prompt's ids (two reads) and never re-reads the ids it chose."""
    model = models()[1]
    prompt = torch.tensor([[BOS_ID, *pieces(4).tolist()]])
    with host_reads() as reads:
        out = generate(model, prompt, 10, eos_id=-1)  # no EOS: ten new tokens
    assert out.size(1) == 5 + 10
    assert {site: n for site, n in reads.items() if site.startswith("check_token_ids")} == {
        "check_token_ids: __bool__": 2
    }
    assert model.check_ids  # restored after generating


def test_masked_model_refuses_ids_outside_its_vocabulary():
    """MaskedLM takes the pieces and [MASK] (id vocab_size), and names anything else."""
    model = models()[0]
    model(torch.tensor([[FIRST_PIECE_ID, model.mask_id]]))  # [MASK] is an id of the model
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[FIRST_PIECE_ID, model.mask_id + 1]]))
