"""The attention explorer (transformer.explorer, appendix 18): the data it embeds, and the
fragment in headless Chromium (conftest's browser: the system's Chromium or $CHROMIUM_PATH), on
synthetic attention of a 3+3-layer, 8-head model in two directions; then chapter 14's explorer
on the built page (conftest's book_html), against the CPU records in results/."""

import copy
import json
import re

import numpy as np
import pytest
import test_browser

from transformer.explorer import DIGITS, SMALL, AttentionExplorer, explorer_html
from transformer.pretrained import machine_kind, read_manifest, shipped_entry
from transformer.results import load_results

SCREENSHOTS = test_browser.SCREENSHOTS
PAGE_URL = "http://explorer.invalid/"  # served by the test itself; nothing else may be asked for
N_ENC, N_DEC, N_HEADS = 3, 3, 8
LONG = 3  # en-de sentence 3 has 45 source pieces; sentence 0 has 10
WORDS = {
    "en": "▁A ▁man ▁in ▁a ▁blue ▁shirt ▁is ▁play ing ▁with ▁two ▁dog s ▁on ▁the ▁beach . ▁girl",
    "de": "▁Ein ▁Mann ▁in ▁einem ▁blau en ▁Hemd ▁spielt ▁mit ▁zwei ▁Hund en ▁am ▁Strand . ▁Mädchen",
}
ODD_PIECE = '▁"<b>&amp;'  # must come out as text, not markup


# ---------------------------------------------------------------- data


def softmax_maps(rng, n_layers: int, n_queries: int, n_keys: int, causal: bool = False) -> list:
    """Random attention to 3 decimals, some heads sharp and some diffuse, as nested lists."""
    sharpness = rng.uniform(0.5, 5, (n_layers, N_HEADS, 1, 1))
    logits = rng.normal(size=(n_layers, N_HEADS, n_queries, n_keys)) * sharpness
    if causal:
        logits = np.where(np.tril(np.ones((n_queries, n_keys), bool)), logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return np.round(weights / weights.sum(-1, keepdims=True), 3).tolist()


def make_sentence(rng, src: str, tgt: str, n_source: int) -> dict:
    n_output = int(np.clip(n_source + rng.integers(-3, 4), 4, 48))
    source = [str(p) for p in rng.choice(WORDS[src].split(), n_source)]
    output = [*(str(p) for p in rng.choice(WORDS[tgt].split(), n_output - 1)), "</s>"]
    return {
        "source": source,
        "output": output,
        "encoder": softmax_maps(rng, N_ENC, n_source, n_source),
        "decoder": softmax_maps(rng, N_DEC, n_output, n_output, causal=True),
        "cross": softmax_maps(rng, N_DEC, n_output, n_source),
    }


@pytest.fixture(scope="module")
def directions() -> dict[str, list[dict]]:
    """2 directions x 12 sentences of a 3+3-layer, 8-head model; en-de sentence 0 has 10 source
    pieces and sentence 3 has 45, one of whose pieces needs escaping."""
    rng = np.random.default_rng(2017)
    data = {}
    for src, tgt in (("en", "de"), ("de", "en")):
        lengths = [10, *rng.integers(8, 29, 11)]
        if src == "en":
            lengths[LONG] = 45
        data[f"{src}-{tgt}"] = [make_sentence(rng, src, tgt, int(n)) for n in lengths]
    data["en-de"][LONG]["source"][5] = ODD_PIECE
    return data


def quantized(maps: list) -> np.ndarray:
    return np.rint(np.asarray(maps) * 1000).astype(int)


def unpack(text: str) -> list[int]:
    """The test's own reading of the packing that explorer.py documents."""
    values, chars = [], iter(text)
    for c in chars:
        d = DIGITS.index(c)
        values.append(d if d < SMALL else SMALL + (d - SMALL) * 64 + DIGITS.index(next(chars)))
    return values


def embedded(fragment: str) -> list[dict]:
    found = re.findall(
        r'<script type="application/json" class="attnx-data">(.*?)</script>', fragment
    )
    assert len(found) == 1
    return json.loads(found[0])


# ---------------------------------------------------------------- browser


@pytest.fixture
def load(browser):
    """load(*fragments) opens a page holding them at PAGE_URL; the test fails at teardown on any
    other request, console error or uncaught exception (test_offline_and_quiet checks inline)."""
    problems: list[str] = []
    pages = []

    def load(*fragments: str):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

        def serve(route):
            if route.request.url == PAGE_URL:
                body = f'<!doctype html><meta charset="utf-8"><body>{"".join(fragments)}</body>'
                route.fulfill(body=body, content_type="text/html; charset=utf-8")
            else:
                problems.append(f"request: {route.request.url}")
                route.abort()

        page.route("**/*", serve)
        page.goto(PAGE_URL)
        pages.append(page)
        return page

    load.problems = problems
    yield load
    for page in pages:
        page.close()
    assert problems == []


CHOOSE = """(root, choices) => {
  for (const [name, value] of Object.entries(choices)) {
    const menu = root.querySelector(`select[name=${name}]`);
    if (!menu || menu.disabled || ![...menu.options].some((o) => o.value === value)) {
      throw new Error(`no enabled menu ${name} with the option ${value}`);
    }
    menu.value = value;  // then the events a reader's choice fires, in the same order
    menu.dispatchEvent(new Event("input", {bubbles: true}));
    menu.dispatchEvent(new Event("change", {bubbles: true}));
  }
}"""


def choose(page, root: str, **choices) -> None:
    """Choose in the menus of explorer `root`, in order, as a reader would: one round trip."""
    page.eval_on_selector(f"#{root}", CHOOSE, {k: str(v) for k, v in choices.items()})


DRAWN = """(root) => ({
  state: {...root.dataset},
  // the cells as one string: 2,000 small arrays would cross to Python one value at a time
  cells: Array.from(root.querySelectorAll("rect[data-q]"),
    (r) => `${r.dataset.q},${r.dataset.k},${r.dataset.value || ""}`).join(" "),
})"""


def drawn(page, root: str) -> tuple[dict, dict, set]:
    """Explorer `root` as the page shows it, in one round trip: its state (the data-
    attributes of its element), the weighted cells {(q, k): weight}, and the masked (q, k)."""
    seen = page.eval_on_selector(f"#{root}", DRAWN)
    cells = [cell.split(",") for cell in seen["cells"].split()]
    weights = {(int(q), int(k)): float(v) for q, k, v in cells if v}
    masked = {(int(q), int(k)) for q, k, v in cells if not v}
    assert len(weights) + len(masked) == len(cells)
    return seen["state"], weights, masked


def assert_shows(page, root, directions, direction, sentence, kind, layer, head) -> None:
    """The page's explorer `root` draws exactly this selection's weights."""
    state, weights, masked = drawn(page, root)
    assert state == dict(
        direction=direction, sentence=str(sentence), kind=kind, layer=str(layer), head=str(head)
    )
    heads = quantized(directions[direction][sentence][kind])[layer - 1]  # (n_heads, q, k)
    want = heads.mean(0) if head == "mean" else heads[head - 1]
    n_q, n_k = want.shape
    upper = {(q, k) for q in range(n_q) for k in range(n_k) if k > q}
    assert masked == (upper if kind == "decoder" else set())
    assert set(weights) == {(q, k) for q in range(n_q) for k in range(n_k)} - masked
    got = np.zeros((n_q, n_k))
    for (q, k), w in weights.items():
        got[q, k] = w * 1000
    if head == "mean":  # drawn to 3 decimals
        assert np.abs(got - want).max() <= 0.5 + 1e-6
    else:
        assert np.array_equal(np.rint(got), want)


# ---------------------------------------------------------------- tests


def test_embedded_data_equals_input(directions):
    fragment = explorer_html(directions, "ex")
    kinds = ("encoder", "decoder", "cross")
    plain = [
        [quantized(s[kind]).tolist() for s in ss for kind in kinds] for ss in directions.values()
    ]
    plain = len(json.dumps(plain, separators=(",", ":")))
    size = len(fragment.encode())
    print(f"\nfragment: {size:,} bytes (the weights as plain JSON integers alone: {plain:,} bytes)")
    assert size < 1_000_000
    payload = embedded(fragment)
    assert [d["name"] for d in payload] == list(directions)
    for d in payload:
        for s, record in zip(d["sentences"], directions[d["name"]], strict=True):
            assert (s["source"], s["output"]) == (record["source"], record["output"])
            text = "".join(record["source"]).replace("▁", " ").strip()
            shortened = s["title"].endswith("…") and text.startswith(s["title"][:-1])
            assert len(s["title"]) <= 60 and (s["title"] == text or shortened)
            for kind in ("encoder", "decoder", "cross"):
                want = quantized(record[kind])
                assert np.shape(s[kind]) == want.shape[:2]
                for layer, heads in enumerate(s[kind]):
                    for head, text in enumerate(heads):
                        values = unpack(text)
                        if kind == "decoder":  # only on and below the diagonal
                            got = np.zeros_like(want[layer, head])
                            got[np.tril_indices(len(got))] = values
                        else:
                            got = np.reshape(values, want.shape[2:])
                        assert np.array_equal(got, want[layer, head]), f"{d['name']} {kind} {layer}"


def test_every_control_draws_its_selection(directions, load):
    page = load(explorer_html(directions, "ex"))
    shows = lambda *selection: assert_shows(page, "ex", directions, *selection)  # noqa: E731
    shows("en-de", 0, "encoder", 1, 1)
    choose(page, "ex", layer=2)
    shows("en-de", 0, "encoder", 2, 1)
    choose(page, "ex", head=5)
    shows("en-de", 0, "encoder", 2, 5)
    choose(page, "ex", kind="cross")
    shows("en-de", 0, "cross", 2, 5)
    choose(page, "ex", sentence=LONG)
    shows("en-de", LONG, "cross", 2, 5)
    choose(page, "ex", head="mean")
    shows("en-de", LONG, "cross", 2, "mean")
    choose(page, "ex", kind="encoder", layer=3, head=8)
    shows("en-de", LONG, "encoder", 3, 8)
    choose(page, "ex", direction=1)  # de-en; the sentence index, layer and head are kept
    shows("de-en", LONG, "encoder", 3, 8)
    choose(page, "ex", sentence=7, head="mean")
    shows("de-en", 7, "encoder", 3, "mean")

    # labels: every piece, as text; the sentence menu shows the detokenized sources
    choose(page, "ex", direction=0, sentence=LONG, kind="cross")
    record = directions["en-de"][LONG]
    rows = page.eval_on_selector_all("#ex text[data-q]", "ts => ts.map(t => t.textContent)")
    columns = page.eval_on_selector_all("#ex text[data-k]", "ts => ts.map(t => t.textContent)")
    assert (rows, columns) == (record["output"], record["source"])
    assert ODD_PIECE in columns
    menu = page.eval_on_selector_all(
        "#ex select[name=sentence] option", "os => os.map(o => o.text)"
    )
    assert len(menu) == 12 and menu[0].startswith("1. ") and len(menu[LONG]) <= 64

    # hovering a cell reads it out; its <title> says the same
    cell = "#ex rect[data-q='4'][data-k='5']"
    page.hover(cell)
    value = page.get_attribute(cell, "data-value")
    line = f"{record['output'][4]} → {ODD_PIECE}: {value}"
    assert page.text_content("#ex .attnx-readout") == line
    assert page.text_content(f"{cell} title") == line


def test_decoder_upper_triangle_is_masked(directions, load):
    page = load(explorer_html(directions, "ex"))
    for direction, sentence in (("en-de", LONG), ("de-en", 2)):
        choose(page, "ex", direction=list(directions).index(direction), sentence=sentence)
        choose(page, "ex", kind="decoder")
        for layer in range(1, N_DEC + 1):
            for head in [*range(1, N_HEADS + 1), "mean"]:
                choose(page, "ex", layer=layer, head=head)
                assert_shows(page, "ex", directions, direction, sentence, "decoder", layer, head)
        fill = page.get_attribute("#ex rect.attnx-masked", "fill")
        assert fill == "url(#ex-mask)"  # hatched grey, unlike the white of a 0 weight


def test_offline_and_quiet(directions, load):
    fragment = explorer_html(directions, "ex")
    assert not re.search(r"\b(src|href)=|@import|url\((?!#)|https?://", fragment)
    page = load(fragment)
    for kind in ("encoder", "decoder", "cross"):
        choose(page, "ex", kind=kind, sentence=LONG, head="mean")
        page.hover("#ex rect[data-q='1'][data-k='0']")
    assert page.eval_on_selector_all("#ex rect[data-value]", "rs => rs.length") > 0
    assert load.problems == []


def test_two_explorers_are_independent(directions, load):
    other = {"de-en": directions["de-en"][:4]}
    page = load(explorer_html(directions, "one"), explorer_html(other, "two"))
    assert_shows(page, "one", directions, "en-de", 0, "encoder", 1, 1)
    assert_shows(page, "two", other, "de-en", 0, "encoder", 1, 1)
    choose(page, "one", layer=2, head=3)
    assert_shows(page, "one", directions, "en-de", 0, "encoder", 2, 3)
    assert_shows(page, "two", other, "de-en", 0, "encoder", 1, 1)
    choose(page, "two", kind="decoder", sentence=2, head="mean")
    assert_shows(page, "two", other, "de-en", 2, "decoder", 1, "mean")
    assert_shows(page, "one", directions, "en-de", 0, "encoder", 2, 3)
    page.hover("#two rect[data-q='3'][data-k='1']")
    assert "→" in page.text_content("#two .attnx-readout")
    assert "→" not in page.text_content("#one .attnx-readout")
    assert page.get_attribute("#two rect.attnx-masked", "fill") == "url(#two-mask)"


def test_deterministic(directions):
    fragment = explorer_html(directions, "ex")
    reordered = {  # the same data with every record's keys in another order
        name: [dict(reversed(list(s.items()))) for s in copy.deepcopy(sentences)]
        for name, sentences in directions.items()
    }
    assert explorer_html(reordered, "ex") == fragment
    assert AttentionExplorer(directions, "ex")._repr_html_() == fragment
    first, second = explorer_html(directions), explorer_html(directions)
    assert re.search(r'id="([^"]+)"', first)[1] != re.search(r'id="([^"]+)"', second)[1]


def break_shape(d):
    d["s"][0]["encoder"][0][0].pop()  # the first head's map loses a row: not S x S


def break_triangle(d):
    d["s"][0]["decoder"][1][2][0][3] = 0.2


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda d: d.clear(), "non-empty dict"),
        (lambda d: d.update(s=[]), "non-empty list"),
        (lambda d: d["s"][0].pop("cross"), "has no 'cross' attention"),
        (
            lambda d: d["s"][0].update(source=d["s"][0]["source"][:-1]),
            r"'encoder' attention has shape",
        ),
        (break_shape, "'encoder' attention is not a rectangular array"),
        (
            lambda d: d["s"][0].update(cross=d["s"][0]["encoder"]),
            r"'cross' attention has shape \(3, 8, 10, 10\)",
        ),
        (break_triangle, "nonzero weight above the diagonal"),
        (lambda d: d["s"][0].update(output=[]), "'output' must be a non-empty list"),
        (lambda d: d["s"][0]["encoder"][0][0][0].__setitem__(0, 1.5), r"outside \[0, 1\]"),
    ],
)
def test_bad_input(directions, spoil, message):
    d = {"s": copy.deepcopy(directions["en-de"][:1])}
    explorer_html(d, "ex")  # fine before it is spoilt
    spoil(d)
    with pytest.raises(ValueError, match=message):
        explorer_html(d, "ex")


def test_bad_element_id(directions):
    with pytest.raises(ValueError, match="element_id"):
        explorer_html(directions, "a b")


@pytest.mark.parametrize("sentence, kind", [(LONG, "cross"), (0, "decoder")])
def test_screenshot_fits_the_column(directions, load, sentence, kind):
    page = load(explorer_html(directions, "ex"))
    choose(page, "ex", sentence=sentence, kind=kind, layer=2)
    before = page.locator("#ex svg").bounding_box()
    page.hover("#ex rect[data-q='4'][data-k='3']")  # the shot shows a readout and marked labels
    root = page.locator("#ex").bounding_box()
    svg = page.locator("#ex svg").bounding_box()
    assert svg == before  # hovering moves nothing
    n = len(directions["en-de"][sentence]["source"])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#ex").screenshot(path=SCREENSHOTS / f"explorer_{n}_pieces_{kind}.png")
    print(f"\n{n} pieces: explorer {root['width']:.0f} px wide, heat map {svg['width']:.0f} px")
    assert root["width"] <= 690
    assert svg["x"] >= root["x"] and svg["x"] + svg["width"] <= root["x"] + root["width"]
    labels = page.eval_on_selector_all(
        "#ex svg text",
        """ts => ts.map(t => { const b = t.getBoundingClientRect();
             return [b.left, b.top, b.right, b.bottom, parseFloat(getComputedStyle(t).fontSize)]; })""",
    )
    assert labels
    for left, top, right, bottom, font in labels:  # every label whole inside the drawing
        assert svg["x"] - 0.5 <= left and right <= svg["x"] + svg["width"] + 0.5
        assert svg["y"] - 0.5 <= top and bottom <= svg["y"] + svg["height"] + 0.5
        assert font >= 11


FAINTEST = """(root) => {
  const cells = Array.from(root.querySelectorAll("rect[data-value]"));
  const faintest = cells.reduce((a, b) => (+b.dataset.value < +a.dataset.value ? b : a));
  const rgb = e => {  // "rgb(r, g, b)", or "color(srgb r g b)" (0..1) where color-mix made it
    const fill = getComputedStyle(e).fill, scale = fill.startsWith("color(") ? 255 : 1;
    return fill.match(/[\\d.]+/g).slice(0, 3).map(v => Math.round(scale * v));
  };
  return {cell: rgb(faintest), label: rgb(root.querySelector("svg text"))};
}"""


def test_fits_a_phone_and_the_dark_theme(directions, load):
    """At a phone's 390 px the map is drawn again for the explorer's width (not shrunk), with
    the same weights and labels of 11 px or more; under html[data-theme=dark] a weight near 0
    is dark and the labels light, and back under light."""
    page = load(explorer_html(directions, "ex"))
    choose(page, "ex", sentence=LONG, kind="cross")
    wide = float(page.get_attribute("#ex svg", "width"))
    page.set_viewport_size({"width": 390, "height": 800})
    page.wait_for_function(f"+document.querySelector('#ex svg').getAttribute('width') < {wide}")
    root = page.locator("#ex").bounding_box()
    assert root["x"] + root["width"] <= 390
    assert float(page.get_attribute("#ex svg", "width")) <= root["width"] - 2  # drawn to fit
    assert_shows(page, "ex", directions, "en-de", LONG, "cross", 1, 1)
    fonts = page.eval_on_selector_all(
        "#ex svg text", "ts => ts.map(t => parseFloat(getComputedStyle(t).fontSize))"
    )
    assert fonts and min(fonts) >= 11
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#ex").screenshot(path=SCREENSHOTS / "explorer_390_light.png")
    light = page.eval_on_selector("#ex", FAINTEST)
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    dark = page.eval_on_selector("#ex", FAINTEST)
    page.locator("#ex").screenshot(path=SCREENSHOTS / "explorer_390_dark.png")
    assert sum(light["cell"]) > 600 and sum(dark["cell"]) < 200, (light, dark)
    assert sum(light["label"]) < 200 and sum(dark["label"]) > 500, (light, dark)


# ---------------------------------------------------------------- the built book


def test_chapter_14_page_shows_the_records(browser, book_html):
    """On the built chapter 14, the explorer of the shipped translators (the default of each
    direction) draws their records' own weights for every direction, kind, a shallow and the
    last layer, one head and the mean, on the pronoun sentence and the longest one; it loads
    nothing and logs no error."""
    manifest = read_manifest()
    default = {d: machine_kind(shipped_entry(manifest, d)["trained_on"]) for d in manifest}
    runs = {
        r["direction"]: r["attention"]
        for r in load_results(test_browser.ROOT / "results")
        if machine_kind(r["device"]) == default[r["direction"]]
        and r["config"]["decoding"]["max_sentences"] is None
    }
    assert sorted(runs) == sorted(manifest), "results/ lacks a shipped model's record"
    visit = test_browser.Visit(browser, book_html, "notebooks/14_translator")
    try:
        page = visit.page
        page.wait_for_selector("#shipped-attention rect[data-q]")
        # the menu lists the directions in the chapter's order: find each by its label
        labels = page.eval_on_selector_all(
            "#shipped-attention select[name=direction] option",
            "options => options.map(o => o.text)",
        )
        assert sorted(labels) == sorted(runs)
        for direction, records in runs.items():
            index = labels.index(direction)
            longest = max(range(len(records)), key=lambda i: len(records[i]["source"]))
            n_layers = len(records[0]["cross"])
            for sentence in (1, longest):
                for kind in ("encoder", "decoder", "cross"):
                    for layer, head in ((1, 2), (n_layers, "mean"), (n_layers, 7)):
                        choose(page, "shipped-attention", direction=index, sentence=sentence)
                        choose(page, "shipped-attention", kind=kind, layer=layer, head=head)
                        selection = (direction, sentence, kind, layer, head)
                        assert_shows(page, "shipped-attention", runs, *selection)
    finally:
        visit.close()
    assert not visit.blocked, f"requests that would leave the machine: {visit.blocked}"
    assert not visit.errors, "\n".join(visit.errors)
