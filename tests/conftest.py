import inspect

import pytest

from transformer.data import read_sentences


@pytest.fixture(scope="session")
def train_sentences() -> list[str]:
    """German and English training sentences (needs the corpus: MULTI30K_DIR or network)."""
    return read_sentences("train", "de") + read_sentences("train", "en")


@pytest.fixture
def beam_alphas(monkeypatch) -> list[float]:
    """The length penalty (alpha) of every beam_search call made through transformer.evaluation
    (translate, evaluate_split and the commands built on them), in call order."""
    from transformer import evaluation  # here, so that other tests need not import it

    real, alphas = evaluation.beam_search, []
    signature = inspect.signature(real)

    def spy(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        alphas.append(call.arguments["length_penalty"])
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "beam_search", spy)
    return alphas
