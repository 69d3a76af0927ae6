"""Chapter 11's reversal Transformer trained in the page (src/transformer/static/trainer.js on
layers.js, and trainer_page.js) in headless Chromium, held to the package: the hand-written
backward pass gives PyTorch autograd's gradients, a run gives `train_step`'s losses, and the
page's batches are transformer.reversal's.

How it works
- A standalone page in a temporary folder holds one widget, the fragment that
  transformer.trainer_page writes for the book, with its scripts (common.js, layers.js,
  trainer.js, trainer_session.js, trainer_page.js) beside it. It is opened from disk (file://) through test_browser.Visit: any
  request but file:, data: and about: is blocked and recorded, and so are console errors and
  uncaught exceptions; each test checks that record as it ends. One page serves the module.
- Weights go from a PyTorch `Transformer` (the package's config and init) to the page as lists
  of numbers, by their named_parameters() names; the page builds its model from them in
  float32 (Float32Array) or float64 (Float64Array).
- Gradients: one batch with padding, every parameter's gradient from trainer.js's backward pass
  against autograd's of the label-smoothed loss, within 1e-5 in float32 and 1e-9 in float64.
  In float64 PyTorch runs in float64 throughout: the positional table is rebuilt in float64
  (`.double()` only widens the float32 one) and the loss is F.cross_entropy on the float64
  logits (`label_smoothed_loss` casts them to float32; in float32 both are the same call).
- Training: 50 steps of `train_step` (label smoothing, clipping, fused Adam, the Noam schedule)
  against trainer.js's `trainStep` on the stream's batches, losses within 1e-4. Float32 runs
  are chaotic in the end: a ReLU input that falls within rounding of 0 sends one row's gradient
  one way in PyTorch and the other in the page, and Adam turns that into a step of the learning
  rate's size. This configuration and seed are clear of that for 50 steps (the float32 and
  float64 runs of PyTorch agree within 1e-6 here); the float64 comparison is not exposed to it.
- The widget trains in a Web Worker built from a Blob of trainer.js's source, from file:// and
  from http (a server on 127.0.0.1, started by the test).
- Robustness, a few seconds each: `trainReversal` with a target stops at it (or at maxSeconds);
  Reset in the middle of training, a double click on Start, a live setting and a model setting
  changed while training; a hidden tab pauses and a visible one resumes; learning-rate factor
  100 on d_model 8 diverges, the page says so and still answers what is typed; a typed
  sequence longer than the model's positions hold is cut, and the page says so.
- What chapter 11 quotes: the held-out set is evaluated a slice at a time, with the figures of
  one batch, and the widget names the step at which its exact match first reached its target,
  the same step as `trainReversal` with the same options.
- The speed figures (steps/s against `train_step`, time to 99%, input latency) are
  benchmarks/browser_train.py's, not a test's: they depend on the machine.
"""

import functools
import http.server
import itertools
import json
import math
import re
import threading
from pathlib import Path

import pytest
import test_browser
import torch
import torch.nn.functional as F

from transformer.batching import Batch
from transformer.embeddings import sinusoidal_positional_encoding
from transformer.model import Transformer, TransformerConfig
from transformer.reversal import MAX_LENGTH, MIN_LENGTH, Mulberry32, reversal_batches
from transformer.tokenizer import EOS_ID, PAD_ID
from transformer.trainer_page import trainer_html, write_trainer_page
from transformer.training import label_smoothed_loss, make_optimizer, train_step

PAGE = "trainer"
VOCAB, MAX_LEN = 20, 16  # the reversal task's ids 0..19; 10 symbols and BOS fit in 16
CHAPTER = dict(d_model=64, n_heads=4, d_ff=128, n_layers=2)  # chapter 11's reversal model
SMALL = dict(d_model=16, n_heads=2, d_ff=32, n_layers=2)  # for runs of many steps
# a widget that learns fast enough for a test, and reaches its target in a few seconds
WIDGET_OPTIONS = {"d_model": 16, "n_heads": 2, "batchSize": 16, "heldOut": 50, "target": 0.3}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trainer")
    write_trainer_page(folder, options=WIDGET_OPTIONS)
    return folder


@pytest.fixture(scope="module")
def visit(browser, site):
    visit = test_browser.Visit(browser, site, PAGE)
    yield visit
    visit.close()


@pytest.fixture
def page(visit):
    """The module's page, with no request off the machine and no JavaScript error by the end of
    the test."""
    yield visit.page
    visit.assert_clean()


def torch_model(sizes: dict, seed: int, dtype: torch.dtype) -> Transformer:
    """The package's reversal model, initialised by its own init from `seed`, in `dtype`."""
    torch.manual_seed(seed)
    config = TransformerConfig(VOCAB, VOCAB, dropout=0.0, max_len=MAX_LEN, **sizes)
    model = Transformer(config).to(dtype)
    # the float64 table, not the float32 one widened (src_embed is tgt_embed: one table)
    pe = sinusoidal_positional_encoding(MAX_LEN, config.d_model, dtype)
    model.src_embed.position.pe = pe
    return model


def weights_of(model: Transformer) -> dict[str, list[float]]:
    return {name: p.detach().flatten().tolist() for name, p in model.named_parameters()}


def batch_json(batch: Batch) -> dict:
    (B, S), T = batch.src.shape, batch.tgt_in.size(1)
    lists = {
        name: getattr(batch, key).flatten().tolist()
        for name, key in (("src", "src"), ("tgtIn", "tgt_in"), ("tgtOut", "tgt_out"))
    }
    return {"B": B, "S": S, "T": T, **lists}


def max_difference(values: list[float], tensor: torch.Tensor) -> float:
    return (
        (torch.tensor(values, dtype=torch.float64) - tensor.double().flatten()).abs().max().item()
    )


# numbers travel as JSON text: Playwright's own encoding of 100,000 numbers takes seconds
GRADIENTS = """([sizes, weights, batch, float64]) => {
  const T = window.transformerTrainer;
  const model = T.createModel({...sizes, max_len: 16, weights: JSON.parse(weights), float64});
  const b = {B: batch.B, S: batch.S, T: batch.T, src: Int32Array.from(batch.src),
    tgtIn: Int32Array.from(batch.tgtIn), tgtOut: Int32Array.from(batch.tgtOut)};
  const tape = T.forward(model, b, 0.1);
  T.backward(model, tape);
  const grads = {};
  for (const [name, g] of Object.entries(model.grads)) grads[name] = Array.from(g);
  const type = model.params[Object.keys(grads)[0]].constructor.name;
  return JSON.stringify({loss: tape.loss, grads, type});
}"""


@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-9)], ids=["f32", "f64"]
)
def test_gradients_match_autograd(page, dtype, tolerance):
    model = torch_model(CHAPTER, seed=0, dtype=dtype)
    batch = next(reversal_batches(5, 8))
    assert (batch.src == PAD_ID).any() and (batch.tgt_out == PAD_ID).any(), "no padding to mask"
    logits = model(batch.src, batch.tgt_in)
    if dtype == torch.float32:
        loss = label_smoothed_loss(logits, batch.tgt_out, 0.1)
    else:  # the same loss without label_smoothed_loss's cast to float32
        loss = F.cross_entropy(
            logits.flatten(0, -2),
            batch.tgt_out.flatten(),
            ignore_index=PAD_ID,
            label_smoothing=0.1,
        )
    loss.backward()
    expected = {name: p.grad for name, p in model.named_parameters()}

    weights = json.dumps(weights_of(model))
    got = json.loads(
        page.evaluate(GRADIENTS, [CHAPTER, weights, batch_json(batch), dtype == torch.float64])
    )
    assert got["type"] == ("Float64Array" if dtype == torch.float64 else "Float32Array")
    assert sorted(got["grads"]) == sorted(expected)  # every parameter, by the package's names
    assert abs(got["loss"] - loss.item()) < tolerance
    differences = {name: max_difference(got["grads"][name], g) for name, g in expected.items()}
    worst = max(differences, key=differences.get)
    assert differences[worst] < tolerance, f"{worst}: {differences[worst]:.3g}"
    # not a vacuous check: the gradients are far from 0
    assert max(g.abs().max().item() for g in expected.values()) > 1e-2


PRODUCTS = """([cases]) => {
  const T = window.transformerTrainer;
  return cases.map(([A, aT, B, bT, m, k, n, C, add]) => {
    const f32 = Float32Array.from(C), f64 = Float64Array.from(C);
    T.product(Float32Array.from(A), aT, Float32Array.from(B), bT, m, k, n, f32, add);
    T.product(Float64Array.from(A), aT, Float64Array.from(B), bT, m, k, n, f64, add);
    return [Array.from(f32), Array.from(f64)];
  });
}"""


def test_products_match_torch(page):
    """product, which every matrix product of the model goes through: in float32 the
    WebAssembly kernel (which Chromium runs), in float64 the plain loops, each against
    torch.matmul, with either operand transposed, with and without `add`, and sizes
    that are no multiple of the kernel's blocks of 4 rows by 8 columns."""
    assert page.evaluate("window.transformerTrainer.simd"), "no WebAssembly SIMD kernel"
    generator, cases, expected = torch.Generator().manual_seed(0), [], []
    for (m, k, n), aT, bT in itertools.product(
        [(1, 1, 1), (5, 7, 3), (8, 16, 24), (13, 33, 20)], (False, True), (False, True)
    ):
        A = torch.randn(k if aT else m, m if aT else k, generator=generator, dtype=torch.float64)
        B = torch.randn(n if bT else k, k if bT else n, generator=generator, dtype=torch.float64)
        C, add = torch.randn(m, n, generator=generator, dtype=torch.float64), bool(m % 2)
        A32, B32 = A.float().double(), B.float().double()  # what the float32 side holds
        flat = [t.flatten().tolist() for t in (A32, B32, C.float().double())]
        cases.append([flat[0], aT, flat[1], bT, m, k, n, flat[2], add])
        product = (A32.T if aT else A32) @ (B32.T if bT else B32)
        expected.append(product + C.float().double() if add else product)
    for (f32, f64), want in zip(page.evaluate(PRODUCTS, [cases]), expected, strict=True):
        assert max_difference(f64, want) < 1e-12
        assert max_difference(f32, want) < 1e-5 * max(1.0, want.abs().max().item())


LOSSES = """([sizes, weights, seed, batchSize, steps, float64]) => {
  const T = window.transformerTrainer;
  const model = T.createModel({...sizes, max_len: 16, weights: JSON.parse(weights), float64});
  const stream = T.reversalBatches(seed, batchSize);
  return Array.from({length: steps},
    () => T.trainStep(model, stream.next().value, {warmup: 100}));
}"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_training_losses_match_train_step(page, dtype):
    seed, batch_size, steps = 2, 16, 50
    model = torch_model(SMALL, seed=2, dtype=dtype)
    weights = json.dumps(weights_of(model))
    optimizer, scheduler = make_optimizer(model, SMALL["d_model"], warmup=100)
    batches = reversal_batches(seed, batch_size)
    expected = [train_step(model, next(batches), optimizer, scheduler).item() for _ in range(steps)]

    got = page.evaluate(LOSSES, [SMALL, weights, seed, batch_size, steps, dtype == torch.float64])
    differences = [abs(a - b) for a, b in zip(got, expected, strict=True)]
    worst = max(range(steps), key=differences.__getitem__)
    assert differences[worst] < 1e-4, (
        f"step {worst + 1}: page {got[worst]:.7f}, train_step {expected[worst]:.7f}"
    )
    assert expected[-1] < expected[0] - 0.5  # it trained: the comparison covers real updates


STREAM = """([seed, batchSize, n]) => {
  const stream = window.transformerTrainer.reversalBatches(seed, batchSize);
  return Array.from({length: n}, () => {
    const b = stream.next().value;
    return {B: b.B, S: b.S, T: b.T, src: Array.from(b.src), tgtIn: Array.from(b.tgtIn),
      tgtOut: Array.from(b.tgtOut)};
  });
}"""


@pytest.mark.parametrize("seed, batch_size", [(0, 64), (1, 1), (123456789, 7), (2**32 - 1, 5)])
def test_streams_agree(page, seed, batch_size):
    python = reversal_batches(seed, batch_size)
    expected = [batch_json(next(python)) for _ in range(3)]
    assert page.evaluate(STREAM, [seed, batch_size, 3]) == expected


def test_stream_draws_the_task():
    """The Python side alone: lengths 4..10, symbols 4..19, the target the reverse, all values
    seen, and a seed's stream repeatable and unlike another seed's."""
    batch = next(reversal_batches(3, 2000))
    lengths = (batch.src != PAD_ID).sum(1)
    assert set(lengths.tolist()) == set(range(MIN_LENGTH, MAX_LENGTH + 1))
    assert set(batch.src[batch.src != PAD_ID].tolist()) == set(range(4, 20))
    for src, tgt_out, n in zip(batch.src[:50], batch.tgt_out[:50], lengths[:50], strict=True):
        assert tgt_out[:n].tolist() == src[:n].flip(0).tolist() and tgt_out[n] == EOS_ID
    assert torch.equal(next(reversal_batches(3, 2000)).src, batch.src)
    assert not torch.equal(next(reversal_batches(4, 2000)).src[:10], batch.src[:10])
    rng = Mulberry32(-1)  # seeds are taken mod 2**32, as JavaScript's `>>> 0` takes them
    assert rng.state == 2**32 - 1 and 0 <= rng.below(7) < 7


RUN = "options => window.trainReversal(options)"
RUN_OPTIONS = dict(seed=1, batchSize=32, d_model=32, n_heads=2, n_layers=1, heldOut=64)


def test_train_reversal_runs_in_a_worker(page):
    result = page.evaluate(RUN, {**RUN_OPTIONS, "steps": 80})
    assert result["worker"] is True
    losses = result["losses"]
    assert result["steps"] == len(losses) == 80 and result["seconds"] > 0
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert first > math.log(VOCAB) - 0.5 and last < first - 0.8, (first, last)
    assert 0 <= result["exactMatch"] <= 1
    # the same code on the page's own thread: the same numbers, to the last bit
    here = page.evaluate(RUN, {**RUN_OPTIONS, "steps": 10, "worker": False})
    assert here["worker"] is False and here["losses"] == losses[:10]


SCREEN_SHOWS = """() => {
  const root = document.querySelector(".reversal-trainer");
  const canvas = root.querySelector("canvas.rt-heatmap");
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let inked = 0;
  for (let i = 0; i < pixels.length; i += 4) inked += pixels[i + 3] > 0 && pixels[i] < 200;
  return {inked, stats: root.querySelector(".rt-stats").textContent,
    output: root.querySelector(".rt-output").textContent, heads: root.querySelectorAll(
      "select[name=head] option").length, state: root.dataset.state};
}"""


def test_widget_trains_and_shows(page):
    root = ".reversal-trainer"
    page.wait_for_selector(f"{root}[data-state=ready]")
    page.click(f"{root} button[name=start]")
    page.wait_for_function(
        "() => Number(document.querySelector('.reversal-trainer').dataset.step) >= 30",
        timeout=30_000,
    )
    page.fill(f"{root} input[name=typed]", "abc dz!")
    page.select_option(f"{root} select[name=example]", "1")  # held-out example 1
    page.select_option(f"{root} select[name=head]", "1")  # the second head
    page.wait_for_function(
        "() => document.querySelector('.reversal-trainer .rt-output').textContent"
        ".startsWith('a b c d →')"
    )
    page.click(f"{root} button[name=start]")  # pause
    shown = page.evaluate(SCREEN_SHOWS)
    assert shown["state"] == "paused" and shown["heads"] == 2
    assert "steps/s" in shown["stats"] and "exact match" in shown["stats"]
    assert "left out: z !" in shown["output"]
    assert shown["inked"] > 100  # the heatmap is drawn


def test_works_over_http(browser, site):
    """The same page served over http (not a secure context off localhost, but the worker
    comes from a Blob either way); nothing is asked of another host."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context = browser.new_context()
    elsewhere = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith(f"http://127.0.0.1:{server.server_port}/") or url.startswith("blob:"):
            request_route.continue_()
        else:
            elsewhere.append(url)
            request_route.abort()

    try:
        context.route("**/*", route)
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.server_port}/{PAGE}.html")
        result = page.evaluate(RUN, {**RUN_OPTIONS, "steps": 5})
    finally:
        context.close()
        server.shutdown()
    assert result["worker"] is True and len(result["losses"]) == 5
    assert not elsewhere


def test_missing_scripts_are_reported(browser, tmp_path):
    """The fragment where its scripts are not (a notebook outside the built book) says so
    in place of the widget, instead of staying blank or claiming JavaScript is off."""
    (tmp_path / "missing.html").write_text(
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>t</title></head>'
        f"<body>{trainer_html(static='nowhere/')}</body></html>"
    )
    page = browser.new_page()
    try:
        page.goto((tmp_path / "missing.html").as_uri())
        page.wait_for_function(
            "() => document.querySelector('.rt-fallback').textContent.includes('not found')"
        )
        text = page.locator(".rt-fallback").inner_text()
    finally:
        page.close()
    assert text == "The trainer runs in the built book: its files were not found here."


def test_train_reversal_trains_to_a_target(page):
    """With a target, a run goes until the held-out exact match reaches it (or maxSeconds)."""
    options = dict(seed=0, d_model=16, n_heads=2, batchSize=16, heldOut=50)
    result = page.evaluate(RUN, {**options, "target": 0.3, "maxSeconds": 20})
    assert result["heldOut"] == 50 and result["steps"] == len(result["losses"]) > 10
    assert result["reached"] is True and result["exactMatch"] >= 0.3, result["exactMatch"]
    assert result["seconds"] < 20.5
    short = page.evaluate(RUN, {**options, "target": 1.0, "maxSeconds": 0.5})
    assert short["reached"] is False and 0.5 <= short["seconds"] < 2


WIDGET = ".reversal-trainer"
STATE = "() => document.querySelector('.reversal-trainer').dataset.state"
STEP = "() => Number(document.querySelector('.reversal-trainer').dataset.step || 0)"
STATS = "() => document.querySelector('.reversal-trainer .rt-stats').textContent"


def start_training(page, steps: int = 5) -> None:
    """A fresh run of the widget, started and past `steps` steps."""
    page.click(f"{WIDGET} button[name=reset]")
    page.wait_for_selector(f"{WIDGET}[data-state=ready]")
    page.click(f"{WIDGET} button[name=start]")
    page.wait_for_function(f"() => ({STEP})() >= {steps}", timeout=20_000)


def test_reset_and_settings_while_training(page):
    start_training(page)
    page.click(f"{WIDGET} button[name=reset]")  # in the middle of a slice of steps
    assert page.evaluate(STATE) == "ready"
    page.wait_for_function(f"() => ({STEP})() === 0")
    page.dblclick(f"{WIDGET} button[name=start]")  # start and pause: no run twice
    assert page.evaluate(STATE) == "paused"
    page.click(f"{WIDGET} button[name=start]")
    page.wait_for_function(f"() => ({STEP})() >= 3")
    page.select_option(f"{WIDGET} select[name=warmup]", "25")  # live: the run goes on
    assert page.evaluate(STATE) == "running"
    page.select_option(f"{WIDGET} select[name=d_model]", "8")  # a new model, still running
    assert page.evaluate(STATE) == "running"
    page.wait_for_function(f"() => ({STATS})().includes('new model')")
    page.wait_for_function(f"() => ({STEP})() >= 3")
    assert page.evaluate("() => reversalTrainer.DEFAULTS.d_model") == 32
    page.click(f"{WIDGET} button[name=start]")  # pause
    assert page.evaluate(STATE) == "paused"


HIDE = """hidden => {
  for (const [name, value] of [["visibilityState", hidden ? "hidden" : "visible"],
      ["hidden", hidden]]) {
    Object.defineProperty(document, name, {configurable: true, get: () => value});
  }
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_hidden_tab_pauses_and_resumes(page):
    start_training(page)
    try:
        page.evaluate(HIDE, True)
        assert page.evaluate(STATE) == "paused"
        page.wait_for_function(f"() => ({STATS})().includes('hidden')")
        step = page.evaluate(STEP)
        page.wait_for_timeout(300)
        assert page.evaluate(STEP) <= step + 40  # at most the slice under way
    finally:
        page.evaluate(HIDE, False)
    assert page.evaluate(STATE) == "running"
    page.wait_for_function(f"() => ({STEP})() > {step + 40}", timeout=20_000)
    page.click(f"{WIDGET} button[name=start]")


def test_pathological_settings_diverge_without_freezing(page):
    """Learning-rate factor 100 on d_model 8: the loss climbs (or turns NaN), the page says so
    and answers input while it trains; no error."""
    page.select_option(f"{WIDGET} select[name=d_model]", "8")
    page.select_option(f"{WIDGET} select[name=factor]", "100")
    start_training(page, steps=60)
    assert page.evaluate("() => 1 + 1") == 2  # the page answers while it trains
    page.fill(f"{WIDGET} input[name=typed]", "abcd")
    page.wait_for_function(
        "() => document.querySelector('.reversal-trainer .rt-output').textContent"
        ".startsWith('a b c d →')"
    )
    page.wait_for_function(f"() => ({STATS})().includes('too high')", timeout=20_000)
    page.click(f"{WIDGET} button[name=start]")
    assert page.evaluate(STATE) == "paused"
    page.select_option(f"{WIDGET} select[name=factor]", "1")
    page.select_option(f"{WIDGET} select[name=d_model]", "16")


def test_typed_sequence_cut_to_the_positions_says_so(page):
    """Sixteen letters are more than the model's 16 positions hold with the end (⏎): the box
    reads the first 15 and says so, as it says when a sequence is outside the lengths the model
    trained on."""
    page.wait_for_selector(f"{WIDGET}[data-state]")
    page.fill(f"{WIDGET} input[name=typed]", "abcdefghijklmnop")
    page.wait_for_function(
        "() => document.querySelector('.reversal-trainer .rt-output').textContent"
        ".startsWith('a b c d e f g h i j k l m n o →')"
    )
    text = page.locator(f"{WIDGET} .rt-output").inner_text()
    assert "first 15 of the 16 symbols" in text, text
    assert "It trained on 4 to 10 symbols." in text, text
    page.fill(f"{WIDGET} input[name=typed]", "hello")


SLICES = """([n, seed]) => {
  const T = window.transformerTrainer;
  const model = T.createModel({d_model: 16, n_heads: 2, seed});
  const held = T.heldOutSet(seed, n);
  const whole = T.evaluate(model, T.collate(held.pairs), 0.1);
  const sliced = T.evaluateSlices(model, held.slices, 0.1);
  return {whole, sliced, slices: held.slices.length,
    sizes: held.slices.map(batch => batch.B)};
}"""


def test_held_out_set_is_evaluated_in_slices(page):
    """The widget evaluates its 1,000 held-out sequences a slice at a time, between slices of
    training, so that the page answers meanwhile; the slices give the figures of one batch."""
    got = page.evaluate(SLICES, [1000, 3])
    assert got["slices"] > 1 and sum(got["sizes"]) == 1000
    assert got["sliced"]["exactMatch"] == got["whole"]["exactMatch"]
    assert abs(got["sliced"]["loss"] - got["whole"]["loss"]) < 1e-9
    assert page.evaluate("() => reversalTrainer.DEFAULTS.heldOut") == 1000


REACHED = r"(\d+)% first at step ([\d,]+)"


def test_widget_reports_the_step_it_reaches_the_target(page):
    """The box measures what chapter 11 quotes from benchmarks/browser_train.py: the exact match
    on the held-out set, and the step at which it first reaches the target, asked by the rule
    of trainReversal; so the box and trainReversal name the same step."""
    options = {**WIDGET_OPTIONS, "seed": 0, "warmup": 100, "factor": 1, "labelSmoothing": 0.1}
    for name in ("factor", "warmup", "labelSmoothing", "d_model", "n_heads"):
        page.select_option(f"{WIDGET} select[name={name}]", str(options[name]))
    page.select_option(f"{WIDGET} select[name=n_layers]", "1")
    start_training(page)
    page.wait_for_function(f"() => /{REACHED}/.test(({STATS})())", timeout=30_000)
    page.click(f"{WIDGET} button[name=start]")  # pause
    stats = page.evaluate(STATS)
    percent, step = re.search(REACHED, stats).groups()
    assert f"of {options['heldOut']} held-out" in stats, stats
    headless = page.evaluate(RUN, {**options, "maxSeconds": 30})
    assert headless["reached"] is True, headless["exactMatch"]
    assert (int(percent), int(step.replace(",", ""))) == (
        round(100 * options["target"]),
        headless["steps"],
    ), stats
