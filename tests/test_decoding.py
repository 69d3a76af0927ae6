import inspect
import itertools
import math
from collections import Counter
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from transformer.decoding import Decoding, beam_search, greedy_decode, length_limits, lp
from transformer.devices import host_reads
from transformer.model import Transformer, TransformerConfig

V, PAD, BOS = 50, 0, 2


def random_model(seed: int = 0, norm_first: bool = False, max_len: int = 64) -> Transformer:
    """float64. A fresh model tends to repeat the token it reads, since its output layer is its
    target table; shrinking that table (not the source's) lets the context decide."""
    torch.manual_seed(seed)
    sizes = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, norm_first=norm_first)
    config = TransformerConfig(V, V, max_len=max_len, share_embeddings=False, **sizes)
    model = Transformer(config).double()
    with torch.no_grad():
        model.tgt_embed.token.embedding.weight.mul_(0.1)
    return model


def padded_sources(seed: int = 1, lengths=(9, 6, 3, 1)) -> torch.Tensor:
    torch.manual_seed(seed)
    src = torch.randint(4, V, (len(lengths), max(lengths)))  # (batch, S)
    for row, n in enumerate(lengths):
        src[row, n:] = PAD
    return src


def produced_token(model: Transformer, src: torch.Tensor) -> int:
    """A token the model produces after the first step of some rows: as EOS, rows end unevenly."""
    out = greedy_decode(model, src, max_len=20, eos_id=None)
    later = Counter(t for t in out[:, 1:].flatten().tolist() if t not in out[:, 0].tolist())
    return later.most_common(1)[0][0]


def rows(ids: torch.Tensor) -> list[list[int]]:
    return [row[row != PAD].tolist() for row in ids]


@pytest.mark.parametrize("norm_first", [False, True])
def test_cache_gives_the_tokens_of_recomputation(norm_first):
    model, src = random_model(norm_first=norm_first), padded_sources()
    eos = produced_token(model, src)
    cached = greedy_decode(model, src, max_len=30, eos_id=eos)
    recomputed = greedy_decode(model, src, max_len=30, eos_id=eos, use_cache=False)
    assert torch.equal(cached, recomputed)
    lengths = [len(r) for r in rows(cached)]
    assert len(set(lengths)) > 1  # some rows stopped at EOS, others went on
    assert (cached == eos).any(dim=1).sum() >= 1
    assert len(set(cached.flatten().tolist())) > 3  # not one token repeated


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_padded_batch_decodes_as_its_sentences_alone(norm_first):
    model, src = random_model(norm_first=norm_first), padded_sources()
    eos = produced_token(model, src)
    together = rows(greedy_decode(model, src, max_len=20, eos_id=eos))
    beams = beam_search(model, src, beam_size=3, max_len=20, eos_id=eos)
    for i, sentence in enumerate(src):
        alone = sentence[sentence != PAD][None]  # (1, S_i), no padding
        assert rows(greedy_decode(model, alone, max_len=20, eos_id=eos)) == [together[i]]
        assert beam_search(model, alone, beam_size=3, max_len=20, eos_id=eos) == [beams[i]]


@pytest.mark.parametrize("norm_first", [False, True])
def test_beam_of_one_is_greedy(norm_first):
    model, src = random_model(seed=3, norm_first=norm_first), padded_sources(seed=4)
    eos = produced_token(model, src)
    greedy = rows(greedy_decode(model, src, eos_id=eos))
    assert beam_search(model, src, beam_size=1, eos_id=eos) == greedy
    assert beam_search(model, src, beam_size=1, eos_id=eos, alpha=2.0) == greedy


def test_beam_search_with_cache_equals_without():
    model, src = random_model(seed=5), padded_sources(seed=6)
    eos = produced_token(model, src)
    for k in (2, 4):
        cached = beam_search(model, src, beam_size=k, max_len=25, eos_id=eos)
        assert cached == beam_search(model, src, k, 25, eos_id=eos, use_cache=False)


class MemoryProjections(TorchFunctionMode):
    """Counts, while active, the linear maps that the cross-attention layers of `model` apply to
    the memory they are given (their keys and values)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.count, self.memory = 0, None
        self.layers = [layer.cross_attn for layer in model.decoder.layers]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.linear and args[0] is self.memory:
            self.count += 1
        return func(*args, **(kwargs or {}))

    def remember(self, module, args, kwargs) -> None:
        self.memory = args[1] if len(args) > 1 else kwargs["memory"]

    def __enter__(self):
        self.hooks = [
            m.register_forward_pre_hook(self.remember, with_kwargs=True) for m in self.layers
        ]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        return super().__exit__(*exc)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_memory_keys_and_values_are_projected_once_per_sentence(search):
    """With the cache, each layer projects the memory once, at the first step, not at every step."""
    model, src = random_model(), padded_sources()
    with MemoryProjections(model) as one_step:
        search(model, src, max_len=1, eos_id=None)
    with MemoryProjections(model) as twelve_steps:
        search(model, src, max_len=12, eos_id=None)
    with MemoryProjections(model) as recomputed:
        search(model, src, max_len=12, eos_id=None, use_cache=False)
    assert one_step.count == twelve_steps.count == model.config.n_layers  # K and V in one product
    assert recomputed.count == 12 * model.config.n_layers  # the check can fail


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"beam_size": 0}, "beam_size must be a positive integer, got 0"),
        ({"beam_size": True}, "beam_size must be a positive integer, got True"),
        ({"average": 2.0}, "average must be a positive integer, got 2.0"),
        ({"alpha": -0.1}, "alpha, the length penalty exponent, must be >= 0, got -0.1"),
        ({"alpha": "0.6"}, "alpha, the length penalty exponent, must be >= 0, got '0.6'"),
        ({"alpha": float("nan")}, "alpha, the length penalty exponent, must be >= 0, got nan"),
    ],
)
def test_a_bad_decoding_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Decoding(**fields)


def test_decoding_defaults_are_the_papers():
    assert asdict(Decoding()) == {"average": 5, "beam_size": 4, "alpha": 0.6}


def test_decoding_is_the_one_home_of_the_defaults():
    """beam_search and lp take their defaults from Decoding, and beam_search checks its beam
    size and alpha by building one (the messages above)."""
    defaults = Decoding()
    beam = inspect.signature(beam_search).parameters
    assert beam["beam_size"].default == defaults.beam_size
    assert beam["alpha"].default == inspect.signature(lp).parameters["alpha"].default
    assert beam["alpha"].default == defaults.alpha


def test_length_penalty_values():
    assert lp(1) == 1.0
    assert lp(7, alpha=1.0) == pytest.approx(2.0)
    assert lp(25, alpha=0.6) == pytest.approx(5**0.6)
    assert all(lp(n, 0.0) == 1.0 for n in range(1, 50))
    values = [lp(n) for n in range(1, 60)]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_maximum_length_is_source_length_plus_50_within_max_len():
    src = padded_sources(lengths=(9, 6, 3, 1))
    model = random_model(max_len=64)
    assert length_limits(model, src).tolist() == [59, 56, 53, 51]
    assert [len(r) for r in rows(greedy_decode(model, src, eos_id=None))] == [59, 56, 53, 51]
    assert [len(h) for h in beam_search(model, src, 2, eos_id=None)] == [59, 56, 53, 51]
    capped = random_model(max_len=40)
    assert length_limits(capped, src).tolist() == [40] * 4
    assert greedy_decode(capped, src, eos_id=None).shape == (4, 40)
    assert greedy_decode(model, src, max_len=7, eos_id=None).shape == (4, 7)  # explicit max_len


def test_decoding_restores_the_training_mode_and_builds_no_graph():
    model, src = random_model(), padded_sources()
    model.train()
    out = greedy_decode(model, src, max_len=5)
    assert model.training and not out.requires_grad
    beam_search(model, src, 2, max_len=5)
    assert model.training


class MarkovModel(nn.Module):
    """A stand-in for Transformer whose next-token logits depend on the last token only:
    table[last]. It keeps count of its decoder calls, and works with and without a cache."""

    check_ids = True  # Transformer's switch, which decoding turns off for the ids it chose

    def __init__(self, table: torch.Tensor, max_len: int = 64):
        super().__init__()
        n = table.size(0)
        self.config = TransformerConfig(
            n, n, d_model=4, n_heads=1, d_ff=4, n_layers=1, max_len=max_len
        )
        self.table = nn.Parameter(table.double(), requires_grad=False)  # (V, V)
        self.calls = 0

    def encode(self, src):
        return torch.zeros(*src.shape, 4, dtype=torch.float64)

    def decode(self, tgt_in, memory, src, cache=None):
        self.calls += 1
        if cache is not None:
            cache.length += tgt_in.size(1)
        return self.table[tgt_in]  # (batch, T, V)


EOS, A, B = 3, 4, 5  # in a 6-token vocabulary: PAD, UNK, BOS, EOS, A, B


def log_probs(table: torch.Tensor) -> torch.Tensor:
    """The normalized log-probabilities decoding uses: PAD and BOS are never produced."""
    logits = table.double().clone()
    logits[:, [PAD, BOS]] = -math.inf
    return logits.log_softmax(-1)


def best_by_exhaustion(table: torch.Tensor, limit: int, alpha: float) -> list[int]:
    """The output of highest eq. beam-score among all outputs of at most `limit` tokens."""
    lp_table = log_probs(table)
    tokens = [t for t in range(table.size(0)) if t not in (PAD, BOS)]
    best, best_score = None, -math.inf
    for n in range(1, limit + 1):
        for seq in itertools.product(tokens, repeat=n):
            if EOS in seq[:-1] or (n < limit and seq[-1] != EOS):
                continue  # an output ends at its first EOS, or is cut at the limit
            total = sum(
                lp_table[last, nxt].item() for last, nxt in zip((BOS, *seq[:-1]), seq, strict=True)
            )
            if total / lp(n, alpha) > best_score:
                best, best_score = list(seq), total / lp(n, alpha)
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
@pytest.mark.parametrize("seed", [0, 3, 4])  # tables where greedy misses the best, mostly
def test_a_wide_beam_finds_the_exhaustive_best(seed, alpha):
    torch.manual_seed(seed)
    table = torch.randn(6, 6)
    model, src = MarkovModel(table), torch.tensor([[4, 5, 4]])
    want = best_by_exhaustion(table, limit=5, alpha=alpha)
    # UNK, EOS, A or B may follow: at most 3**4 live prefixes, whose 4 * 81 extensions all fit in
    # the 400 best, so nothing is pruned and beam search is exhaustive
    assert beam_search(model, src, 400, max_len=5, eos_id=EOS, alpha=alpha) == [want]


def test_a_hypothesis_that_finished_early_is_kept():
    p = torch.full((6, 6), 1e-6)
    p[BOS, [A, EOS, B]] = torch.tensor([0.4, 0.35, 0.25])  # EOS is second best at step 1
    p[A, [A, B, EOS]] = torch.tensor([0.45, 0.35, 0.2])
    p[B, [A, B, EOS]] = torch.tensor([0.45, 0.35, 0.2])
    model, src = MarkovModel(p.log()), torch.tensor([[4, 4]])
    assert rows(greedy_decode(model, src, max_len=6, eos_id=EOS)) == [[A] * 6]  # greedy: A A A
    model.calls = 0
    out = beam_search(model, src, beam_size=2, max_len=6, eos_id=EOS, alpha=0.0)
    assert model.calls > 1  # the beam went on after [EOS] finished at step 1 ...
    assert out == [[EOS]] == [best_by_exhaustion(p.log(), 6, 0.0)]  # ... and [EOS] still won
    # a length penalty that favours long outputs picks another answer, still the best one
    long = beam_search(model, src, beam_size=2, max_len=6, eos_id=EOS, alpha=3.0)
    assert long != [[EOS]] and long == [best_by_exhaustion(p.log(), 6, 3.0)]


def test_decoding_stops_when_every_sentence_is_done():
    p = torch.full((6, 6), 1e-6)
    p[BOS, A], p[A, B], p[B, EOS] = 1.0, 1.0, 1.0  # BOS A B EOS, surely
    model, src = MarkovModel(p.log()), torch.tensor([[4, 5, 0], [4, 0, 0]])
    assert greedy_decode(model, src, eos_id=EOS).tolist() == [[A, B, EOS]] * 2
    assert model.calls == 3  # not 52 (the length limit)
    model.calls = 0
    assert beam_search(model, src, beam_size=2, eos_id=EOS) == [[A, B, EOS]] * 2
    assert model.calls <= 6


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, s: beam_search(m, s, beam_size=0), "beam_size must be a positive integer"),
        (lambda m, s: beam_search(m, s, beam_size=2.5), "beam_size must be a positive integer"),
        (lambda m, s: beam_search(m, s, 2, alpha=-1), "alpha, the length penalty exponent"),
        (lambda m, s: greedy_decode(m, s, max_len=0), "max_len must be an integer from 1"),
        (lambda m, s: beam_search(m, s, 2, max_len=65), "max_len must be an integer from 1"),
        (lambda m, s: greedy_decode(m, s[0]), "2-D"),
        (lambda m, s: greedy_decode(m, s.double()), "tensor of token ids"),
        (lambda m, s: greedy_decode(m, s[:, :0]), "pass at least one token"),
        (lambda m, s: greedy_decode(m, s.repeat(1, 10)), "truncate the sources"),
        (lambda m, s: greedy_decode(m, s, bos_id=V), "bos_id must be a target id"),
        (lambda m, s: greedy_decode(m, s, eos_id=PAD), "eos_id=0 is the pad id"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(random_model(), padded_sources())


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_reads_the_source_ids_once_not_every_token(search):
    """The ids of the source are checked (two reads: their smallest and largest) once per call;
    the ids decoding chose itself are never re-read, however many tokens it makes."""
    model, src = random_model(), padded_sources()
    with host_reads() as reads:
        if search == "greedy":
            out = greedy_decode(model, src, max_len=12, eos_id=None)
        else:
            out = beam_search(model, src, beam_size=3, max_len=12, eos_id=None)
    assert (out.size(1) if search == "greedy" else max(map(len, out))) == 12  # twelve steps
    assert {site: n for site, n in reads.items() if site.startswith("check_token_ids")} == {
        "check_token_ids: __bool__": 2
    }
    assert model.check_ids  # restored after decoding
