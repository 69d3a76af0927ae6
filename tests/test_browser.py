"""The built book in a real browser, offline: every page of _toc.yml opened in headless Chromium.

How it works
- The book is built strictly (`jupyter-book build -W -n --keep-going`) into a temporary folder,
  once per test session (conftest.py's `book_html`, shared with tests/test_explorer.py), so the
  check always sees the sources as they are now, never a stale `_build/`. Setting
  `BOOK_HTML=_build/html` checks an existing build instead (the deploy workflow does this, to
  check the very files it publishes).
- Playwright drives the system's Chromium (`CHROMIUM_PATH`, else `chromium`, `google-chrome` or
  `chromium-browser` on the PATH) with --headless --no-sandbox --disable-gpu
  --disable-background-networking. Every page is a fresh browser context (a first visit) and is
  opened from disk (file://).
- Every request is intercepted: file:, data: and about: URLs go through, anything else is
  blocked and recorded, and the test fails on it. So "works offline" here means "needs nothing
  but the files of the build".
- Per page it asserts: MathJax rendered every math element (an mjx-container in each, no TeX
  error) and no raw `$$` is left in the text; every <img> loaded (naturalWidth > 0); no request
  left the machine; no JavaScript error (console errors and uncaught exceptions); no tool
  marker (`#| export`, `# NBVAL_...`) shows on the page; no display math or code output is
  wider than its box without a scrollbar, and no printed output or shown code needs a sideways scroll at
  1280 px; no table is wider than the text column; the drawn diagrams of book/figures/ are shown
  wide enough that their labels read at 11 px or more; a main-line page (outside the _toc.yml
  parts captioned Appendix) is at most 20,000 px tall and an appendix 25,000; the main line
  without the back matter's reference pages, 240,000 in all; the translator chapter is at most 10,000 px, with its box above 900 px, and
  the landing page's box starts above 1,000 px.
- The search page, `search.html?q=attention`, must list at least one hit, each linking to a
  built page.
- Every chapter page carries launch buttons that open that very notebook on Colab and on Binder
  (JupyterLab), built from the repository in _config.yml.
- Under CI=true, a full-page screenshot of every page goes to `_build/screenshots/` (ignored
  by git; CI keeps it as an artifact). Nothing is asserted on it, and it takes about half of
  a page's time, so a run without CI skips it.
"""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import urlopen

import pytest
import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "_build" / "screenshots"
LOCAL_SCHEMES = {"file", "data", "about"}


def toc_pages() -> list[str]:
    """Every file of _toc.yml, in reading order (root first), without its suffix."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", [{"chapters": toc.get("chapters")}]):
        walk(part.get("chapters"))
    return [str(Path(page).with_suffix("")) for page in pages]


def appendix_pages() -> set[str]:
    """The files of the _toc.yml parts whose caption says Appendix; every other page is the
    main line."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p for p in toc["parts"] if "Appendix" in p["caption"]]
    return {str(Path(c["file"]).with_suffix("")) for p in parts for c in p["chapters"]}


def launch_urls(notebook: str) -> list[str]:
    """The Colab and Binder addresses that should open `notebook` (a path without .ipynb)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repository = urlparse(config["repository"]["url"]).path.strip("/")
    branch = config["repository"]["branch"]
    launch = config["launch_buttons"]
    return [
        f"{launch['colab_url']}/github/{repository}/blob/{branch}/{notebook}.ipynb",
        f"{launch['binderhub_url']}/v2/gh/{repository}/{branch}?urlpath=lab/tree/{notebook}.ipynb",
    ]


def screenshot(page, name: str) -> None:
    """A full-page screenshot for CI's artifact; none outside CI (the module docstring)."""
    if os.environ.get("CI"):
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


class Visit:
    """One page opened offline in a fresh context, with its requests and errors recorded."""

    def __init__(self, browser, html: Path, page: str, query: str = ""):
        path = html / f"{page}.html"
        assert path.is_file(), f"{page} is in _toc.yml but the build has no {path.name}"
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"uncaught error: {error}"))
        self.page.goto(path.as_uri() + query, wait_until="load")

    def _route(self, route):
        url = route.request.url
        if urlparse(url).scheme in LOCAL_SCHEMES:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def _console(self, message):
        if message.type == "error":
            where = message.location.get("url", "") if message.location else ""
            self.errors.append(f"console.error: {message.text}" + (f" ({where})" if where else ""))

    def assert_clean(self) -> None:
        """No request left the machine and no JavaScript error happened, so far."""
        assert not self.blocked, f"requests that would leave the machine: {self.blocked}"
        assert not self.errors, "JavaScript errors:\n" + "\n".join(self.errors)

    def close(self) -> None:
        self.context.close()


WAIT_FOR_IMAGES = """async () => {
  const images = Array.from(document.images);
  images.forEach((img) => { img.loading = "eager"; });
  const settled = (img) => img.complete ? null : new Promise((done) => {
    img.addEventListener("load", done); img.addEventListener("error", done);
  });
  const timeout = new Promise((done) => setTimeout(done, 15000));
  await Promise.race([Promise.all(images.map(settled)), timeout]);
  return images.map((img) => ({src: img.getAttribute("src"), width: img.naturalWidth}));
}"""

# px at 1280 px wide (BOOK.md): a main-line page teaches one idea, an appendix holds more
MAX_MAIN_LINE_HEIGHT, MAX_APPENDIX_HEIGHT, MAX_MAIN_LINE_TOTAL = 20_000, 25_000, 240_000
# book/figures/diagrams.py draws 11-pt labels at 200 dpi on a 7-inch canvas (1,400 px): shown
# at this width or more, they read at 11 px or more (1,400 * 11 / (11 * 200 / 72))
MIN_DIAGRAM_WIDTH = 504
# the pages that show the translator box, its tallest page, and how far down the box may start
TRANSLATOR_PAGES = {"book/intro": (None, 1_000), "notebooks/14_translator": (10_000, 900)}
HEIGHTS: dict[str, int] = {}  # page -> height, as test_page_renders_offline measured it

PAGE_STATE = """() => {
  const maths = Array.from(document.querySelectorAll("span.math, div.math"));
  return {
    elements: maths.length,
    unrendered: maths.filter((m) => !m.querySelector("mjx-container"))
                     .map((m) => m.textContent.trim().slice(0, 80)),
    containers: document.querySelectorAll("mjx-container").length,
    texErrors: document.querySelectorAll('mjx-container [data-mml-node="merror"]').length,
    // connections a browser may open without a request that interception would see
    height: document.documentElement.scrollHeight,
    translatorTop: (() => {
      const box = document.querySelector(".transformer-translator");
      return box ? Math.round(box.getBoundingClientRect().top + window.scrollY) : null;
    })(),
    // tables wider than the text column: their last columns hide behind a sideways scroll
    tables: Array.from(document.querySelectorAll("article table"))
      .filter((t) => t.parentElement.clientWidth > 0
        && t.scrollWidth > t.parentElement.clientWidth + 1)
      .map((t) => t.innerText.trim().split("\\n")[0].slice(0, 70)),
    // printed outputs wider than the text column: a reader must scroll sideways to their end
    wide: Array.from(document.querySelectorAll("div.cell_output pre, div.output pre"))
      .filter((el) => el.scrollWidth > el.clientWidth + 1)
      .map((el) => el.textContent.trim().replace(/\\s+/g, " ").slice(0, 70)),
    // shown code (cells, literal includes) that needs a sideways scroll at 1280 px; folded code
    // has no box until unfolded, and notebooks/ruff.toml keeps its lines to 88 columns too
    scrolling: Array.from(document.querySelectorAll("div.highlight pre"))
      .filter((el) => el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      .map((el) => el.textContent.trim().split("\\n")[0].slice(0, 70)),
    // the drawn diagrams (book/figures/, 11 pt text on a 1,400-px canvas): shown narrower
    // than MIN_DIAGRAM_WIDTH, their labels read under 11 px
    diagrams: Array.from(document.querySelectorAll("article img"))
      .filter((img) => img.getAttribute("src").includes("figures/"))
      .map((img) => [img.getAttribute("src").split("/").pop(),
                     Math.round(img.getBoundingClientRect().width)]),
    remoteHints: Array.from(document.querySelectorAll("link[href]"))
      .filter((l) => /preconnect|dns-prefetch|prefetch|prerender/.test(l.rel))
      .map((l) => l.href).filter((href) => !/^(file|data|about):/.test(href)),
  };
}"""


CLIPPED = """() => {
  // display math and code outputs whose content is wider than their box, with no scrollbar on
  // the box or on an ancestor inside the article: a reader would never see their right end
  const scrolls = (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  const boxes = document.querySelectorAll("div.math, div.cell_output pre, div.output pre");
  return Array.from(boxes).filter((el) => {
    if (el.scrollWidth <= el.clientWidth + 1) return false;
    for (let box = el; box && !box.matches("article, body"); box = box.parentElement) {
      if (scrolls(box)) return false;
    }
    return true;
  }).map((el) => el.textContent.trim().replace(/\\s+/g, " ").slice(0, 70));
}"""


@pytest.mark.parametrize("page", toc_pages())
def test_page_renders_offline(browser, book_html, page):
    problems = []
    visit = Visit(browser, book_html, page)
    try:
        has_math = visit.page.locator("span.math, div.math").count() > 0
        if has_math:  # MathJax typesets after load; its startup promise settles when it is done
            try:
                visit.page.wait_for_function(
                    "() => window.MathJax && MathJax.startup", timeout=20_000
                )
                visit.page.evaluate("() => MathJax.startup.promise.then(() => true)")
            except PlaywrightTimeout:
                problems.append("MathJax never started (is _static/mathjax/tex-svg-full.js there?)")
        images = visit.page.evaluate(WAIT_FOR_IMAGES)
        state = visit.page.evaluate(PAGE_STATE)
        text = visit.page.inner_text("body")
        clipped = visit.page.evaluate(CLIPPED)
        screenshot(visit.page, page)
    finally:
        visit.close()

    if has_math and not state["containers"]:
        problems.append("the page has math but MathJax rendered none (no mjx-container)")
    if has_math and state["unrendered"]:
        problems.append(f"math left unrendered: {state['unrendered'][:5]}")
    if state["texErrors"]:
        problems.append(f"{state['texErrors']} TeX errors in the rendered math")
    if "$$" in text:
        problems.append("raw $$ in the visible text (math that was never parsed)")
    if clipped:
        problems.append(f"math or output cut off at the right (no scrollbar): {clipped[:5]}")
    if state["wide"]:
        problems.append(f"outputs wider than the text column at 1280 px: {state['wide'][:5]}")
    if state["scrolling"]:
        problems.append(f"code that scrolls sideways at 1280 px: {state['scrolling'][:5]}")
    HEIGHTS[page] = state["height"]
    problems += height_problems(page, state)
    if markers := re.findall(r"#\| \w+|# NBVAL_\w+", text):
        problems.append(f"tool markers on the page (book/_ext/hide_markers.py): {markers[:5]}")
    if small := [d for d in state["diagrams"] if d[1] < MIN_DIAGRAM_WIDTH]:
        problems.append(f"diagrams shown under {MIN_DIAGRAM_WIDTH} px, labels under 11 px: {small}")
    if broken := [image["src"] for image in images if image["width"] == 0]:
        problems.append(f"images that did not load: {broken}")
    if visit.blocked:
        problems.append(f"requests that would leave the machine (blocked): {visit.blocked}")
    if state["remoteHints"]:
        problems.append(f"links that open remote connections: {state['remoteHints']}")
    problems += visit.errors
    assert not problems, f"{page}:\n" + "\n".join(problems)


def height_problems(page: str, state: dict) -> list[str]:
    """A page's height against its kind's limit; the translator box's place; wide tables."""
    problems = []
    appendix = page in appendix_pages()
    limit, top = TRANSLATOR_PAGES.get(page, (None, None))
    limit = limit or (MAX_APPENDIX_HEIGHT if appendix else MAX_MAIN_LINE_HEIGHT)
    if state["height"] > limit:
        kind = "an appendix" if appendix else "a main-line page"
        problems.append(f"{state['height']:,} px tall at 1280 px, over {limit:,} for {kind}")
    if top is not None and (state["translatorTop"] is None or state["translatorTop"] >= top):
        problems.append(
            f"the translator box starts at {state['translatorTop']} px, not above {top}"
        )
    if state["tables"]:
        problems.append(f"tables wider than the text column: {state['tables'][:5]}")
    return problems


def back_matter_pages() -> set[str]:
    """The reference pages of the _toc.yml part captioned Back matter (notation, glossary,
    results, bibliography): neither teaching nor engineering."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p for p in toc["parts"] if p["caption"] == "Back matter"]
    return {str(Path(c["file"]).with_suffix("")) for p in parts for c in p["chapters"]}


def test_the_main_line_fits_its_length(browser, book_html):
    """The main line, the landing page, chapters 1 to 15 and the closing page (every page
    outside the Appendix parts and the back matter), totals at most 240,000 px."""
    main_line = [p for p in toc_pages() if p not in appendix_pages() | back_matter_pages()]
    for page in main_line:
        if page not in HEIGHTS:  # this test ran alone: measure the page here
            visit = Visit(browser, book_html, page)
            HEIGHTS[page] = visit.page.evaluate(PAGE_STATE)["height"]
            visit.close()
    total = sum(HEIGHTS[p] for p in main_line)
    assert total <= MAX_MAIN_LINE_TOTAL, (
        f"the main line is {total:,} px at 1280 px, over {MAX_MAIN_LINE_TOTAL:,}: "
        + ", ".join(f"{p} {HEIGHTS[p]:,}" for p in main_line)
    )


def test_search_works_offline(browser, book_html):
    visit = Visit(browser, book_html, "search", query="?q=attention")
    try:
        visit.page.wait_for_function(
            "() => /Search finished/.test(document.querySelector('#search-results')?.innerText)"
        )
        hits = visit.page.eval_on_selector_all(
            "#search-results ul.search li > a", "links => links.map((a) => a.href)"
        )
        screenshot(visit.page, "search")
    finally:
        visit.close()

    assert hits, "searching the offline book for 'attention' found nothing"
    missing = [hit for hit in hits if not Path(unquote(urlparse(hit).path)).is_file()]
    assert not missing, f"search hits that link to no built page: {missing}"
    assert not visit.blocked, f"search: requests that would leave the machine: {visit.blocked}"
    assert not visit.errors, "search: JavaScript errors:\n" + "\n".join(visit.errors)


@pytest.mark.parametrize(
    "notebook", [page for page in toc_pages() if page.startswith("notebooks/")]
)
def test_launch_buttons_open_the_chapter(book_html, notebook):
    links = re.findall(r'href="([^"]+)"', (book_html / f"{notebook}.html").read_text())
    missing = [url for url in launch_urls(notebook) if url not in links]
    assert not missing, f"{notebook}: no launch button for {missing}"


# JupyterLab: the learners' view of the same notebooks, with jupyterlab-myst rendering MyST.
RAW_MYST = ["{doc}`", "{eq}`", "{ref}`", "{numref}`", "{cite}`", "```{", ":class: dropdown"]
LAB_SETTINGS = {  # every cell rendered at once, and no news request
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": '{"windowingMode": "none"}',
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": '{"fetchNews": "false"}',
}


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory) -> str:
    """A JupyterLab server on a free local port, serving the repository; yields its URL."""
    settings = tmp_path_factory.mktemp("lab-settings")
    for name, text in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(text)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lab = Path(sys.executable).with_name("jupyter")
    command = [str(lab), "lab", "--no-browser", "--allow-root", f"--port={port}"]
    command += [
        "--ServerApp.ip=127.0.0.1",
        "--IdentityProvider.token=",
        f"--ServerApp.root_dir={ROOT}",
    ]
    command += [f"--LabApp.user_settings_dir={settings}", "--LabApp.news_url=None"]
    command += [f"--LabApp.workspaces_dir={tmp_path_factory.mktemp('lab-workspaces')}"]
    log = tmp_path_factory.mktemp("lab-log") / "lab.log"
    server = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to 30 s for the server to answer
            try:
                urlopen(f"{url}/api/status", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"jupyter lab exited:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("notebook", ["notebooks/03_attention", "notebooks/10_transformer"])
def test_jupyterlab_renders_the_myst_markup(browser, jupyterlab, notebook):
    """Opened in JupyterLab, a chapter shows its roles, directives and math rendered, not raw."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page, remote = context.new_page(), []
    page.on(
        "request",
        lambda request: (
            urlparse(request.url).hostname not in ("127.0.0.1", None) and remote.append(request.url)
        ),
    )
    try:
        page.goto(f"{jupyterlab}/lab/tree/{notebook}.ipynb", timeout=60_000)
        # MyST typesets the math with KaTeX; once it has begun, let it finish every cell
        page.wait_for_selector(".jp-MarkdownCell .katex", state="attached", timeout=60_000)
        page.wait_for_timeout(3000)
        text = page.inner_text(".jp-NotebookPanel:not(.lm-mod-hidden)")
        maths = page.locator(".jp-MarkdownCell .katex").count()
        images = page.evaluate(
            "() => Array.from(document.querySelectorAll('.jp-MarkdownCell img'))"
            ".map((img) => ({src: img.getAttribute('src'), width: img.naturalWidth}))"
        )
        links = page.locator(".jp-MarkdownCell a").count()
        screenshot(page, f"jupyterlab-{Path(notebook).name}")
    finally:
        context.close()
    raw = [markup for markup in RAW_MYST if markup in text]
    assert not raw, f"{notebook}: raw MyST markup in JupyterLab: {raw}"
    assert maths > 0, f"{notebook}: JupyterLab rendered no math"
    assert links > 0, f"{notebook}: no rendered links (the {{doc}} roles)"
    assert not [image for image in images if image["width"] == 0], images
    assert not remote, f"{notebook}: JupyterLab requests that would leave the machine: {remote}"
