import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from transformer.data import read_sentences

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
INSTALL_HINT = (
    "The browser checks need Chromium and found none. Install Debian's package "
    "(`sudo apt-get install chromium`; `bash .ci/run` does this itself), or point CHROMIUM_PATH "
    "at a Chromium or Chrome executable."
)


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
        alphas.append(call.arguments["alpha"])
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "beam_search", spy)
    return alphas


def find_chromium() -> str | None:
    if path := os.environ.get("CHROMIUM_PATH"):
        return path
    for name in ("chromium", "google-chrome", "google-chrome-stable", "chromium-browser"):
        if found := shutil.which(name):
            return found
    return None


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (the system's, or $CHROMIUM_PATH) driven by Playwright; without one the
    browser checks skip with an install hint, except under CI=true, where they fail."""
    executable = find_chromium()
    if executable is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(INSTALL_HINT)
    if not Path(executable).exists():
        pytest.fail(f"CHROMIUM_PATH={executable} does not exist. {INSTALL_HINT}", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_FLAGS
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    """The book built strictly from the sources as they are now, once per test session, into a
    temporary folder; BOOK_HTML=_build/html checks an existing build instead."""
    if existing := os.environ.get("BOOK_HTML"):
        html = Path(existing).resolve()
        assert (html / "index.html").is_file(), f"BOOK_HTML={existing} holds no built book"
        return html
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book", "build", str(ROOT)]
    command += ["-W", "-n", "--keep-going", "--path-output", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, (
        "the strict book build failed:\n" + (result.stdout + result.stderr)[-6000:]
    )
    return out / "_build" / "html"
