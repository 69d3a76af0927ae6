import pytest

from transformer.data import read_sentences


@pytest.fixture(scope="session")
def train_sentences() -> list[str]:
    """German and English training sentences (needs the corpus: MULTI30K_DIR or network)."""
    return read_sentences("train", "de") + read_sentences("train", "en")
