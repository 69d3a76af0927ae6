"""The translator in the page (src/transformer/static/: translator.js, the page, which loads
transformer.js, the model, and pretrained.js, the loading; appendix 18) in headless Chromium,
held to the package: the same ids as SentencePiece, the same numbers as PyTorch within 1e-4, the
same translations as `load_pretrained(d).translate`, and a page that bad input does not break.

How it works
- A standalone page is built into a temporary folder as the book's build lays it out:
  `_static/translator/` by book/_ext/translator_assets.py's `write_assets` (the three scripts,
  and each shipped file of src/transformer/weights/ as a script holding its bytes), and
  `notebooks/translator.html` holding chapter 14's fragment (`transformer.translator_page`),
  which loads `../_static/translator/translator.js`.
- It is opened from disk (file://) in conftest's headless Chromium through test_browser.Visit:
  every request is intercepted, anything but file:, data: and about: is blocked and recorded,
  and console errors and uncaught exceptions are recorded. One page serves the module's tests,
  so each direction's weights load once; the tests check its record at the end of each.
- Calls go through `window.transformerTranslate` and `window.transformerDebug`, a list at a
  time in one page.evaluate.
- One more page is served over http (from the same files, by the test itself), where the
  browser offers no crypto.subtle: the weights are checked by the script's own SHA-256.
"""

import copy
import hashlib
import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import test_browser
import torch

from transformer import translator_page
from transformer.data import read_sentences
from transformer.decoding import DecoderState, beam_search, evaluating, lp
from transformer.pretrained import load_pretrained, read_manifest, shipped_entry
from transformer.tokenizer import BOS_ID, PAD_ID, UNK_ID

ROOT = Path(__file__).resolve().parents[1]
DIRECTIONS = ("en-de", "de-en")
PAGE = "notebooks/translator"  # the page, as a chapter page sits in the built book
ID = "translator"
TOLERANCE = 1e-4
# texts that test the normalizer (nmt_nfkc), whitespace and unknown characters
ODD_TEXTS = [
    "",
    "   ",
    " x  y ",
    "a\tb\nc\r\nd",
    "😀😀 a😀b ♥",
    "ﬁ Ⅻ ＡＢＣ\u3000x",  # compatibility forms: NFKC
    "e\u0301t\u00e9",  # a combining accent and a composed one
    "\u200bzero\u200bwidth",
    "Ünïcödé Straße “quoted” – dash — ‘x’…",
    "日本語のテキスト",
    "x" * 300,
]


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


translator_assets = load_module(
    "translator_assets", ROOT / "book" / "_ext" / "translator_assets.py"
)


def build_site(root: Path, examples: dict[str, list[str]]) -> Path:
    """The standalone site in `root`; returns the folder that holds PAGE.html."""
    translator_assets.write_assets(root / "_static" / "translator")
    page = root / f"{PAGE}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>translator</title>'
        f"</head><body>{translator_page.translator_html(examples, ID)}</body></html>"
    )
    return root


@pytest.fixture(scope="module")
def examples() -> dict[str, list[str]]:
    return {lang: read_sentences("test_2016_flickr", lang)[:5] for lang in ("en", "de")}


@pytest.fixture(scope="module")
def site(tmp_path_factory, examples) -> Path:
    return build_site(tmp_path_factory.mktemp("translator"), examples)


@pytest.fixture(scope="module")
def visit(browser, site):
    """The page, opened once for the module; each test checks its record as it ends."""
    visit = test_browser.Visit(browser, site, PAGE)
    yield visit
    visit.close()


@pytest.fixture
def page(visit):
    """The module's page, with no request off the machine and no JavaScript error by the end of
    the test."""
    yield visit.page
    assert not visit.blocked, f"requests that would leave the machine: {visit.blocked}"
    assert not visit.errors, "JavaScript errors:\n" + "\n".join(visit.errors)


@pytest.fixture(scope="module")
def pretrained():
    """The shipped translators (on one thread, as every test runs: conftest.py)."""
    return {d: load_pretrained(d) for d in DIRECTIONS}


def call(page, function: str, *args):
    """await window.FUNCTION(...args) in the page (e.g. "transformerDebug.encode")."""
    return page.evaluate(f"(args) => window.{function}(...args)", list(args))


TRANSLATE_ALL = """async ([direction, texts]) => {
  const out = [];
  for (const text of texts) {
    const r = await transformerTranslate(direction, text, {attention: false});
    out.push({translation: r.translation, sourceIds: r.sourceIds, outputIds: r.outputIds,
      score: r.score, seconds: r.seconds});
  }
  return out;
}"""


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("lang", ["en", "de"])
def test_same_ids_as_sentencepiece(page, pretrained, lang):
    """Every val and test2016 sentence of a language (2,014), and odd texts: the same ids as the
    Python sentencepiece package through transformer.tokenizer, and the same text back."""
    tokenizer = pretrained["en-de"].tokenizer
    texts = read_sentences("val", lang) + read_sentences("test_2016_flickr", lang) + ODD_TEXTS
    assert len(texts) >= 500 + len(ODD_TEXTS)
    got = call(page, "transformerDebug.encode", "en-de", texts)
    want = tokenizer.encode(texts)
    wrong = [(t, g, w) for t, g, w in zip(texts, got, want, strict=True) if g != w]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, e.g. (text, page, python): {wrong[:3]}"
    assert call(page, "transformerDebug.decode", "en-de", want) == tokenizer.decode(want)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_encoder_and_first_step_match_pytorch(page, pretrained, direction):
    """The memory and the first step's log-probabilities within 1e-4 of the model's."""
    shipped = pretrained[direction]
    lang = direction.split("-")[0]
    sentences = read_sentences("test_2016_flickr", lang)[:3] + ["I love you.", "Hallo, Welt!"]
    for sentence in sentences:
        ids = shipped.tokenizer.encode(sentence)
        src = torch.tensor([ids])
        with evaluating(shipped.model):
            memory = shipped.model.encode(src)[0].numpy()  # (S, d_model)
            log_p = DecoderState(shipped.model, src, BOS_ID, None, True).log_probs()[0].numpy()
        got = np.array(call(page, "transformerDebug.encoderOutput", direction, ids))
        assert np.abs(got.reshape(memory.shape) - memory).max() <= TOLERANCE, sentence
        got = np.array(
            [
                -np.inf if v is None else v
                for v in call(page, "transformerDebug.firstStepLogProbs", direction, ids)
            ]
        )
        finite = np.isfinite(log_p)
        assert (np.isfinite(got) == finite).all() and not finite[[PAD_ID, BOS_ID]].any()
        assert np.abs(got[finite] - log_p[finite]).max() <= TOLERANCE, sentence


def python_score(model, src_ids, out_ids, alpha) -> float:
    """log P(out | src) / lp(|out|), teacher-forced: beam search's score of out (model: float64)."""
    with evaluating(model):
        logits = model(torch.tensor([src_ids]), torch.tensor([[BOS_ID, *out_ids[:-1]]]))[0]
    logits[:, [PAD_ID, BOS_ID]] = -math.inf
    log_p = logits.log_softmax(-1)[torch.arange(len(out_ids)), out_ids].sum().item()
    return log_p / lp(len(out_ids), alpha)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_same_translations_as_pytorch(page, pretrained, direction):
    """100 test2016 captions: the same translation as Pretrained.translate on at least 98; where
    one differs, the two hypotheses score within 1e-4 of each other (a near tie)."""
    shipped = pretrained[direction]
    sentences = read_sentences("test_2016_flickr", direction.split("-")[0])[:100]
    want = shipped.translate(sentences)  # batched, as alone (test_decoding.py tests that)
    got = page.evaluate(TRANSLATE_ALL, [direction, sentences])
    differ = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g["translation"] != w]
    print(f"\n{direction}: {100 - len(differ)}/100 the same; differing: {differ}")
    assert len(differ) <= 2, [(sentences[i], got[i]["translation"], want[i]) for i in differ]
    decoding = shipped.decoding
    in_float64 = copy.deepcopy(shipped.model).double()
    for i in differ:
        src_ids = got[i]["sourceIds"]
        python_ids = beam_search(
            shipped.model, torch.tensor([src_ids]), decoding.beam_size, alpha=decoding.alpha
        )[0]
        ours = python_score(in_float64, src_ids, got[i]["outputIds"], decoding.alpha)
        theirs = python_score(in_float64, src_ids, python_ids, decoding.alpha)
        assert abs(ours - theirs) <= TOLERANCE, (sentences[i], ours, theirs)
        assert abs(got[i]["score"] - ours) <= TOLERANCE


def test_attention_and_score_match_pytorch(page, pretrained):
    """The maps of the page's translation are attention_maps' on the same ids, within 1e-4, in
    the shapes explorer.py takes: [layer][head][query][key]; its score is beam search's."""
    from transformer.attention_maps import attention_maps

    shipped = pretrained["en-de"]
    result = call(page, "transformerTranslate", "en-de", "Two dogs run through the snow.")
    src_ids, out_ids = result["sourceIds"], result["outputIds"]
    assert result["sourcePieces"] == shipped.tokenizer.sp.id_to_piece(src_ids)
    assert result["outputPieces"] == shipped.tokenizer.sp.id_to_piece(out_ids)
    in_float64 = copy.deepcopy(shipped.model).double()
    score = python_score(in_float64, src_ids, out_ids, shipped.decoding.alpha)
    assert abs(result["score"] - score) <= TOLERANCE
    assert result["confidence"] == pytest.approx(
        score * lp(len(out_ids), shipped.decoding.alpha) / len(out_ids), abs=TOLERANCE
    )
    want = attention_maps(shipped.model, src_ids, out_ids)  # kind -> (n_layers, n_heads, q, k)
    for kind, maps in want.items():
        got = np.array(result["attention"][kind])
        assert got.shape == tuple(maps.shape), kind
        assert np.abs(got - maps.numpy()).max() <= TOLERANCE, kind


def test_weights_load_when_asked(browser, site):
    """Opening the page loads translator.js and none of the weights, until Translate; then only
    the translator's two other scripts (the model, and the loading), the manifest, the
    vocabulary and the chosen direction's weights."""
    context = browser.new_context()
    asked, problems = [], []
    context.on("request", lambda request: asked.append(request.url.rsplit("/", 1)[-1]))
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    try:
        page.goto((site / f"{PAGE}.html").as_uri())
        page.wait_for_selector(f"#{ID} textarea")
        page.wait_for_timeout(300)
        opened = list(asked)
        page.click(f"#{ID} button[name=translate]")
        page.wait_for_function(f"document.getElementById('{ID}').dataset.state === 'done'")
    finally:
        context.close()
    assert opened == ["translator.html", "translator.js"], opened
    entry = shipped_entry(read_manifest(), "en-de")  # the direction's best model
    assert sorted(asked[2:]) == sorted(
        ["transformer.js", "pretrained.js", "manifest.json.js"]
        + [f"{entry['tokenizer']}.js", f"{entry['weights']}.js"]
    )
    assert not problems, problems


def test_sha256_by_hand(page):
    """The script's own SHA-256 (for http pages, which have no crypto.subtle) is SHA-256."""
    for size in (0, 3, 55, 56, 63, 64, 65, 1000):
        data = bytes(range(256)) * 4
        got = call(page, "transformerDebug.sha256", list(data[:size]), True)
        assert got == hashlib.sha256(data[:size]).hexdigest(), size


def test_damaged_weights_are_refused(browser, tmp_path, examples):
    """A changed byte in the shipped weights: the translation fails with the SHA-256 message."""
    site = build_site(tmp_path, examples)
    weights = shipped_entry(read_manifest(), "en-de")["weights"]  # what the page loads
    asset = site / "_static" / "translator" / f"{weights}.js"
    text = asset.read_text()
    at = text.index('= "') + 5000
    asset.write_text(text[:at] + ("B" if text[at] != "B" else "C") + text[at + 1 :])
    visit = test_browser.Visit(browser, site, PAGE)
    try:
        visit.page.click(f"#{ID} button[name=translate]")
        visit.page.wait_for_function(f"document.getElementById('{ID}').dataset.state === 'error'")
        status = visit.page.inner_text(f"#{ID} .tx-status")
    finally:
        visit.close()
    assert f"{weights} is damaged or altered" in status, status
    assert not visit.blocked and not visit.errors, (visit.blocked, visit.errors)


def test_served_over_http(browser, site, pretrained):
    """Over http (no crypto.subtle), the page gives the package's translation too."""
    origin = "http://translator.invalid/"
    context = browser.new_context()
    problems = []

    def serve(route):
        url = route.request.url
        path = site / url.removeprefix(origin).split("?")[0]
        if url.startswith(origin) and path.is_file():
            types = {".html": "text/html; charset=utf-8", ".js": "text/javascript"}
            route.fulfill(body=path.read_bytes(), content_type=types.get(path.suffix, "text/plain"))
        else:
            problems.append(f"request: {url}")
            route.abort()

    context.route("**/*", serve)
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    try:
        page.goto(f"{origin}{PAGE}.html")
        assert page.evaluate("() => !window.crypto.subtle")  # not a secure context
        sentence = read_sentences("test_2016_flickr", "de")[0]
        result = page.evaluate(
            "(s) => transformerTranslate('de-en', s, {attention: false})", sentence
        )
    finally:
        context.close()
    assert result["translation"] == pretrained["de-en"].translate([sentence])[0]
    assert not problems, problems


# ---------------------------------------------------------------- bad input


def ui_translate(page, text: str, state: str = "done") -> dict:
    """Type `text`, press Translate, wait for `state`; what the translator shows."""
    page.fill(f"#{ID} textarea", text)
    page.click(f"#{ID} button[name=translate]")
    page.wait_for_function(f"document.getElementById('{ID}').dataset.state === '{state}'")
    return page.evaluate(
        """(id) => {
          const root = document.getElementById(id), q = s => root.querySelector(s);
          return {status: q('.tx-status').textContent, translation: q('.tx-translation').textContent,
            note: q('.tx-note').hidden ? '' : q('.tx-note').textContent,
            disabled: q('button[name=translate]').disabled, direction: q('select[name=direction]').value,
            lang: q('.tx-translation').lang, maps: root.querySelectorAll('.attnx rect[data-q]').length,
            explorer: q('.attnx select[name=sentence]') ? q('.attnx select[name=sentence]').options[0].text : ''};
        }""",
        ID,
    )


def test_a_caption_in_the_page(page, pretrained):
    """The page shows the package's translation, the pieces, the time and the maps."""
    page.select_option(f"#{ID} select[name=direction]", "en-de")
    shown = ui_translate(page, "A man is riding a bike.")
    assert shown["translation"] == pretrained["en-de"].translate(["A man is riding a bike."])[0]
    assert shown["lang"] == "de" and not shown["disabled"] and shown["maps"] > 0
    assert "A man is riding a bike." in shown["explorer"]
    details = page.inner_text(f"#{ID} dl")
    assert "▁riding" in details and re.search(r"\d+\.\d\d s", details), details


def test_blank_text_gives_a_message(page):
    for text in ("", "   \n\t  "):
        shown = ui_translate(page, text, state="empty")
        assert "Type a sentence" in shown["status"] and not shown["disabled"]
    shown = ui_translate(page, "\u200b\u200b", state="empty")  # blank only once normalized
    assert "nothing to translate" in shown["status"] and not shown["disabled"]
    assert call(page, "transformerTranslate", "en-de", "  ")["message"].startswith(
        "There is nothing"
    )


def test_long_text_is_cut_with_a_note(page, pretrained):
    """2,000 words: cut to the model's 256 positions, as evaluation.translate cuts them."""
    text = " ".join(read_sentences("test_2016_flickr", "en"))
    text = " ".join(text.split()[:2000])
    ids = pretrained["en-de"].tokenizer.encode(text)
    assert len(ids) > 256
    shown = ui_translate(page, text)
    assert f"The text is {len(ids)} pieces long" in shown["note"] and "first 256" in shown["note"]
    assert shown["translation"] and not shown["disabled"]
    assert page.locator(f"#{ID} .tx-source .tx-piece").count() == 256
    result = page.evaluate("(t) => transformerDebug.encode('en-de', [t])", text)[0]
    assert result == ids  # and the page cut them to ids[:256], as the 256 pieces show


def test_unknown_characters_become_unk(page):
    result = call(page, "transformerTranslate", "en-de", "The 🐱 sleeps on the ☃ sofa.")
    assert result["sourceIds"].count(UNK_ID) == 2 and result["translation"]
    assert "<unk>" in result["sourcePieces"]
    shown = ui_translate(page, "The 🐱 sleeps on the ☃ sofa 日本.")
    assert "outside the vocabulary" in shown["note"] and shown["translation"]


def test_switching_direction_while_translating(page, pretrained):
    """A translation still running when the direction changes is dropped; the page stays usable
    and translates the other way next."""
    page.select_option(f"#{ID} select[name=direction]", "en-de")
    page.fill(f"#{ID} textarea", " ".join(["A dog runs through the snow."] * 30))
    # the click and the switch in one task of the page, so that the translation is surely
    # still running when the direction changes, whatever the machine's speed
    states = page.evaluate(
        f"""() => {{
        const root = document.getElementById('{ID}');
        root.querySelector('button[name=translate]').click();
        const before = root.dataset.state;
        const menu = root.querySelector('select[name=direction]');
        menu.value = 'de-en';
        menu.dispatchEvent(new Event('input', {{bubbles: true}}));
        menu.dispatchEvent(new Event('change', {{bubbles: true}}));
        return [before, root.dataset.state];
    }}"""
    )
    assert states == ["running", "idle"]
    sentence = read_sentences("test_2016_flickr", "de")[1]
    shown = ui_translate(page, sentence)
    assert shown["direction"] == "de-en" and shown["lang"] == "en"
    assert shown["translation"] == pretrained["de-en"].translate([sentence])[0]


def test_translate_pressed_twice(page):
    page.select_option(f"#{ID} select[name=direction]", "en-de")
    page.fill(f"#{ID} textarea", "Two children play football on the beach.")
    disabled = page.evaluate(
        f"() => {{ const b = document.querySelector('#{ID} button[name=translate]'); "
        "b.click(); b.click(); return b.disabled; }"
    )
    assert disabled  # the second press finds the button disabled
    page.wait_for_function(f"document.getElementById('{ID}').dataset.state === 'done'")
    page.wait_for_timeout(200)
    assert page.evaluate(f"document.getElementById('{ID}').dataset.state") == "done"
    assert page.inner_text(f"#{ID} .tx-translation")


def test_examples_follow_the_direction(page, examples):
    page.select_option(f"#{ID} select[name=direction]", "en-de")
    page.select_option(f"#{ID} select[name=example]", "2")
    assert page.input_value(f"#{ID} textarea") == examples["en"][2]
    page.select_option(f"#{ID} select[name=direction]", "de-en")
    assert page.input_value(f"#{ID} textarea") == examples["de"][2]
