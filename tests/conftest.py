import fcntl
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from playwright.sync_api import sync_playwright

from transformer.data import read_sentences

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
INSTALL_HINT = (
    "The browser checks need Chromium and found none. Install Debian's package "
    "(`sudo apt-get install chromium`; `bash .ci/run` does this itself), or point CHROMIUM_PATH "
    "at a Chromium or Chrome executable."
)


def pytest_configure(config):
    """Every test runs torch on one thread, and so do the commands and notebook kernels it
    starts (they inherit OMP_NUM_THREADS). The models tested are small: on a few cores they
    run fastest on one thread, and pytest-xdist runs one test file per core beside it."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


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
    """The book built strictly from the sources as they are now, once per test run, into a
    temporary folder; BOOK_HTML=_build/html checks an existing build instead. Under
    pytest-xdist the workers share one build: the first to ask builds it while holding a
    lock, the others wait on the lock and read the result."""
    if existing := os.environ.get("BOOK_HTML"):
        html = Path(existing).resolve()
        assert (html / "index.html").is_file(), f"BOOK_HTML={existing} holds no built book"
        return html
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    out, log = shared / "book", shared / "book.log"
    with open(shared / "book.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not log.exists():
            log.write_text(build_book(out))
    html = out / "_build" / "html"
    assert (html / "index.html").is_file(), (
        "the strict book build failed:\n" + log.read_text()[-6000:]
    )
    return html


def build_book(out: Path) -> str:
    """Build the book strictly into `out`; return the build's output."""
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book", "build", str(ROOT)]
    command += ["-W", "-n", "--keep-going", "--path-output", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        shutil.rmtree(out / "_build" / "html", ignore_errors=True)  # no half a book
    return result.stdout + result.stderr
