"""The translator in the page (translator.js) against PyTorch on one thread, in one run.

A standalone page is built as the book's build lays it out (book/_ext/translator_assets.py's
write_assets, and transformer.translator_page's fragment) and opened from disk in headless
Chromium (the system's, or $CHROMIUM_PATH), with every request off the machine blocked. Then:

- the first translation: a fresh page, Translate clicked, until the translation shows (the
  scripts of the weights, vocabulary and in-domain words loaded, decoded, checked against the
  manifest's SHA-256, unpacked, the caption checked and translated, its attention drawn); the
  median of --first fresh pages;
- per sentence, the first --sentences test2016 captions of each direction, after a warm-up,
  with the model the page loads by default (the entry names it; --kind cpu or gpu: that kind's):
  `transformerTranslate(direction, s, {attention: false})`'s own seconds (encoding, beam search,
  decoding; the weights already loaded) beside `load_pretrained(d).translate([s])` with
  torch.set_num_threads(1), sentence by sentence in turn, so that a change in the machine's load
  falls on both alike.

It prints the median and 90th percentile seconds a sentence in the page, PyTorch's median, their
ratio (the goal: at most 1), and the first translation (the goal: at most 1 s). --record adds the
entry to results/benchmarks.json (replacing one of this benchmark on this device), with the CPU
model, the load average before and after, and the provenance the other entries have.

    python benchmarks/browser_translate.py             # 30 captions a direction
    python benchmarks/browser_translate.py --record    # and keep the figures
"""

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import torch
from playwright.sync_api import sync_playwright
from train_step import record  # the sibling benchmark's JSON writer

from transformer.data import read_sentences
from transformer.devices import BF16_CPU_FLAGS, cpu_flags, describe_device
from transformer.pretrained import load_pretrained, read_manifest, shipped_entry
from transformer.results import provenance
from transformer.translator_page import translator_html

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "benchmarks.json"
DIRECTIONS = ("en-de", "de-en")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ID = "translator"


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_page(root: Path, kind: str | None = None) -> Path:
    """The page in root/notebooks/, its assets in root/_static/translator/, as in the book;
    with `kind`, a manifest that keeps only the models trained on that kind of machine."""
    assets = load_module("translator_assets", ROOT / "book" / "_ext" / "translator_assets.py")
    weights = assets.WEIGHTS
    if kind:
        weights = Path(shutil.copytree(assets.WEIGHTS, root / "weights"))
        only = {d: {kind: models[kind]} for d, models in read_manifest().items()}
        (weights / "manifest.json").write_text(json.dumps(only))
    assets.write_assets(root / "_static" / "translator", weights)
    examples = {lang: read_sentences("test_2016_flickr", lang)[:5] for lang in ("en", "de")}
    page = root / "notebooks" / "translator.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>translator</title></head><body>'
        f"{translator_html(examples, ID)}</body></html>"
    )
    return page


def chromium() -> str:
    for found in (os.environ.get("CHROMIUM_PATH"), shutil.which("chromium")):
        if found:
            return found
    sys.exit("no Chromium: install Debian's chromium, or set CHROMIUM_PATH")


def cpu_model() -> str:
    """The CPU's name and its widest vector instructions: the same code can run 10x
    faster or slower between two machines of one name that differ in those."""
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    flags = cpu_flags()
    vectors = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    if bf16 := sorted(BF16_CPU_FLAGS & flags):
        vectors += f" with {' and '.join(bf16)}"
    return f"{names[0] if names else platform.processor() or platform.machine()}, {vectors}"


class Offline:
    """A fresh page from disk, ready once `ready` (a CSS selector) shows; any request off
    the machine is blocked and counted (a worker's blob: URL is local)."""

    def __init__(self, browser, page: Path, ready: str = f"#{ID} textarea"):
        self.blocked = []
        self.context = browser.new_context()
        self.context.route("**/*", self.route)
        self.page = self.context.new_page()
        self.page.goto(page.as_uri())
        self.page.wait_for_selector(ready)

    def route(self, route):
        if urlparse(route.request.url).scheme in ("file", "data", "about", "blob"):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()


FIRST = """async (id) => {
  const root = document.getElementById(id), start = performance.now();
  root.querySelector("button[name=translate]").click();
  await new Promise(resolve => {
    const watch = new MutationObserver(() => {
      if (["done", "error"].includes(root.dataset.state)) { watch.disconnect(); resolve(); }
    });
    watch.observe(root, {attributes: true});
  });
  return {seconds: (performance.now() - start) / 1000, state: root.dataset.state};
}"""

TRANSLATE = """async ([direction, text]) => {
  const r = await transformerTranslate(direction, text, {attention: false});
  return {translation: r.translation, seconds: r.seconds};
}"""


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=30, help="test2016 captions a direction")
    parser.add_argument("--warmup", type=int, default=3, help="untimed captions a direction")
    parser.add_argument(
        "--first", type=int, default=3, help="fresh pages for the first translation"
    )
    parser.add_argument(
        "--kind",
        choices=("gpu", "cpu"),
        help="the models trained on this kind of machine "
        "(default: the ones the page loads by default)",
    )
    parser.add_argument("--record", action="store_true", help=f"add the entry to {RESULTS.name}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        page_path = build_page(Path(tmp), args.kind)
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True, args=FLAGS)
        print(f"Chromium {browser.version}, torch {torch.__version__} on 1 thread, {cpu_model()}")
        firsts, blocked = [], []
        for _ in range(args.first):
            fresh = Offline(browser, page_path)
            first = fresh.page.evaluate(FIRST, ID)
            assert first["state"] == "done", first
            firsts.append(first["seconds"])
            blocked += fresh.blocked
            fresh.context.close()
        print(
            f"first translation after the click (load, check, unpack, translate): "
            f"median {statistics.median(firsts):.2f} s of {firsts}"
        )
        page = Offline(browser, page_path)
        per_direction, same = {}, 0
        for direction in DIRECTIONS:
            shipped = load_pretrained(direction, trained_on=args.kind)
            sentences = read_sentences("test_2016_flickr", direction.split("-")[0])
            for s in sentences[: args.warmup]:
                shipped.translate([s]), page.page.evaluate(TRANSLATE, [direction, s])
            ours, theirs = [], []
            for s in sentences[: args.sentences]:
                start = time.perf_counter()
                want = shipped.translate([s])[0]
                theirs.append(time.perf_counter() - start)
                got = page.page.evaluate(TRANSLATE, [direction, s])
                ours.append(got["seconds"])
                same += got["translation"] == want
            per_direction[direction] = {
                "trained_on": shipped_entry(read_manifest(), direction)["trained_on"],
                "d_ff": shipped.model.config.d_ff,
                "median_s": round(statistics.median(ours), 3),
                "p90_s": round(percentile(ours, 90), 3),
                "torch_median_s": round(statistics.median(theirs), 3),
                "ratio": round(statistics.median(ours) / statistics.median(theirs), 2),
            }
            print(
                f"{direction}: page median {statistics.median(ours):.3f} s, 90th percentile "
                f"{percentile(ours, 90):.3f} s; PyTorch (1 thread) median "
                f"{statistics.median(theirs):.3f} s; ratio {per_direction[direction]['ratio']:.2f}"
            )
        blocked += page.blocked
        browser.close()
    load_after = os.getloadavg()
    medians = [v["median_s"] for v in per_direction.values()]
    torch_medians = [v["torch_median_s"] for v in per_direction.values()]
    entry = {
        "benchmark": "browser_translate",
        "split": "test_2016_flickr",
        "sentences": args.sentences,
        "same_translations": f"{same}/{args.sentences * len(DIRECTIONS)}",
        "directions": per_direction,
        "median_s": round(statistics.mean(medians), 3),  # the directions' medians, averaged
        "p90_s": round(statistics.mean(v["p90_s"] for v in per_direction.values()), 3),
        "torch_median_s": round(statistics.mean(torch_medians), 3),
        "ratio": round(statistics.mean(medians) / statistics.mean(torch_medians), 2),
        "first_s": round(statistics.median(firsts), 2),
        **where_it_ran(browser.version, load_before, load_after),
    }
    print(
        f"same translations: {entry['same_translations']}; requests blocked: {len(blocked)}; "
        f"load average {entry['load_average']} on {os.cpu_count()} cores"
    )
    print(
        f"page / PyTorch one thread: {entry['ratio']:.2f}x (goal <= 1); "
        f"first translation {entry['first_s']:.2f} s (goal <= 1)"
    )
    finish(entry, blocked, args.record)


def where_it_ran(chromium: str, load_before: tuple, load_after: tuple) -> dict:
    """A browser benchmark's record of where it ran: Chromium's version, the CPU with its
    vector instructions, its cores, the 1-minute load average before and after, and the
    provenance of results/."""
    return {
        "chromium": chromium,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average": [round(load_before[0], 1), round(load_after[0], 1)],
        "provenance": {"device": describe_device("cpu"), **provenance(sys.argv)},
    }


def finish(entry: dict, blocked: list[str], record_it: bool) -> None:
    """Fail if a request left the machine; else append `entry` to RESULTS if asked."""
    if blocked:
        sys.exit(f"requests left the machine: {blocked[:5]}")
    if record_it:
        record(RESULTS, entry)
        print(f"recorded in {RESULTS}")


if __name__ == "__main__":
    main()
