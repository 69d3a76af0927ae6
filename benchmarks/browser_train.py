"""Chapter 11's reversal Transformer trained in the page (trainer.js, trainer_page.js) against the
package's `train_step` on one PyTorch thread, in one run.

A standalone page holding the widget with its default settings is opened from disk in headless
Chromium (the system's, or $CHROMIUM_PATH), with every request off the machine blocked. Then:

- steps per second: `trainReversal({steps})` (the Web Worker, the widget's defaults: d_model 32,
  2 heads, 1 layer, batch 64, seed 0) beside `transformer.training.train_step` on the same
  configuration and the same batches (`reversal_batches(0, 64)`) with torch.set_num_threads(1),
  in --rounds alternating rounds of --steps steps each (after a warm-up), so that a change in
  the machine's load falls on both alike; the medians and their ratio (the goal: at most 3);
- time to 99%: `trainReversal({target: 0.99})`, from scratch with the defaults until the exact
  match on 1,000 held-out sequences reaches 99% (the goal: within 60 s of page time);
- input latency while the widget trains: the time from an `input` event in the sequence box to
  the model's answer in the output paragraph, over --typed sequences (the goal: at most 100 ms),
  and the longest gap between two animation frames meanwhile.

It prints the figures; --record adds the entry to results/benchmarks.json (replacing one of this
benchmark on this device), with the CPU model, the load average before and after, and the
provenance the other entries have.

    python benchmarks/browser_train.py             # measure and print
    python benchmarks/browser_train.py --record    # and keep the figures
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from browser_translate import (  # the sibling benchmark
    FLAGS,
    Offline,
    chromium,
    cpu_model,
    finish,
    where_it_ran,
)
from playwright.sync_api import sync_playwright

from transformer.model import Transformer, TransformerConfig
from transformer.reversal import reversal_batches
from transformer.trainer_page import write_trainer_page
from transformer.training import make_optimizer, train_step

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "benchmarks.json"
ID = "trainer"


class TorchRun:
    """The package's model and train_step on the widget's configuration and stream."""

    def __init__(self, defaults: dict):
        d = defaults["d_model"]
        torch.manual_seed(defaults["seed"])
        config = TransformerConfig(
            20,
            20,
            d_model=d,
            n_heads=defaults["n_heads"],
            d_ff=2 * d,
            n_layers=defaults["n_layers"],
            dropout=0.0,
            max_len=16,
        )
        self.model = Transformer(config)
        self.optimizer, self.scheduler = make_optimizer(
            self.model, d, defaults["warmup"], defaults["factor"]
        )
        self.batches = reversal_batches(defaults["seed"], defaults["batchSize"])

    def steps_per_second(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = train_step(self.model, next(self.batches), self.optimizer, self.scheduler)
        loss.item()
        return steps / (time.perf_counter() - start)


TYPE = """async ([id, text, expected]) => {
  const root = document.getElementById(id), box = root.querySelector("input[name=typed]");
  const out = root.querySelector(".rt-output"), start = performance.now();
  const shown = new Promise(resolve => {
    const watch = new MutationObserver(() => {
      if (out.textContent.startsWith(expected)) { watch.disconnect(); resolve(); }
    });
    watch.observe(out, {childList: true, subtree: true, characterData: true});
  });
  box.value = text;
  box.dispatchEvent(new Event("input", {bubbles: true}));
  await shown;
  return performance.now() - start;
}"""

FRAMES = """ms => new Promise(resolve => {
  let last = performance.now(), worst = 0;
  const end = last + ms;
  const frame = t => {
    worst = Math.max(worst, t - last);
    last = t;
    if (t < end) requestAnimationFrame(frame); else resolve(worst);
  };
  requestAnimationFrame(frame);
})"""


def input_latency(page, count: int) -> tuple[list[float], float]:
    """ms from `input` to the answer shown, `count` sequences, while the widget trains; and the
    longest gap between frames over 2 s of training."""
    page.wait_for_selector(f"#{ID}[data-state=ready]")
    page.click(f"#{ID} button[name=start]")
    page.wait_for_function(f"() => Number(document.getElementById('{ID}').dataset.step) >= 20")
    letters = "abcdefghijklmnop"
    latencies = []
    for k in range(count):
        text = "".join(letters[(k * 7 + 3 * i) % 16] for i in range(4 + k % 7))
        latencies.append(page.evaluate(TYPE, [ID, text, " ".join(text) + " →"]))
        page.wait_for_timeout(50)
    worst_frame = page.evaluate(FRAMES, 2000)
    page.click(f"#{ID} button[name=start]")  # pause
    return latencies, worst_frame


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=100, help="steps a round, each side")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timed rounds")
    parser.add_argument("--target", type=float, default=0.99, help="held-out exact match")
    parser.add_argument("--typed", type=int, default=20, help="typed sequences timed")
    parser.add_argument("--record", action="store_true", help=f"add the entry to {RESULTS.name}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        page_path = write_trainer_page(tmp, element_id=ID)  # the defaults a reader gets
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True, args=FLAGS)
        print(f"Chromium {browser.version}, torch {torch.__version__} on 1 thread, {cpu_model()}")
        page = Offline(browser, page_path, ready=f"#{ID}[data-state=ready]")
        defaults = page.page.evaluate("() => window.reversalTrainer.DEFAULTS")
        run = "options => window.trainReversal(options)"
        theirs = TorchRun(defaults)
        page.page.evaluate(run, {"steps": 20}), theirs.steps_per_second(20)  # warm up
        ours, torch_rates = [], []
        for _ in range(args.rounds):
            ours.append(page.page.evaluate(run, {"steps": args.steps})["stepsPerSecond"])
            torch_rates.append(theirs.steps_per_second(args.steps))
        page_rate, torch_rate = statistics.median(ours), statistics.median(torch_rates)
        print(
            f"steps/s with the defaults {defaults}: page {page_rate:.1f} (rounds "
            f"{[round(r, 1) for r in ours]}), PyTorch train_step on 1 thread {torch_rate:.1f} "
            f"({[round(r, 1) for r in torch_rates]}); a page step takes "
            f"{torch_rate / page_rate:.2f}x PyTorch's (goal <= 3)"
        )
        learned = page.page.evaluate(run, {"target": args.target, "maxSeconds": 120})
        print(
            f"to {100 * args.target:.0f}% exact match on {learned['heldOut']} held-out "
            f"sequences: {learned['seconds']:.1f} s, {learned['steps']} steps "
            f"({100 * learned['exactMatch']:.1f}%, reached: {learned['reached']}; goal <= 60 s)"
        )
        latencies, worst_frame = input_latency(page.page, args.typed)
        print(
            f"input latency while training: median {statistics.median(latencies):.0f} ms, "
            f"worst {max(latencies):.0f} ms of {len(latencies)} (goal <= 100 ms); longest gap "
            f"between frames {worst_frame:.0f} ms"
        )
        blocked = page.blocked
        browser.close()
    load_after = os.getloadavg()
    entry = {
        "benchmark": "browser_train",
        "config": {
            k: defaults[k]
            for k in (
                "d_model",
                "n_heads",
                "n_layers",
                "batchSize",
                "warmup",
                "factor",
                "labelSmoothing",
                "seed",
            )
        },
        "page_steps_per_s": round(page_rate, 1),
        "torch_steps_per_s": round(torch_rate, 1),
        "ratio": round(torch_rate / page_rate, 2),
        "target": args.target,
        "time_to_target_s": round(learned["seconds"], 1),
        "steps_to_target": learned["steps"],
        "exact_match": learned["exactMatch"],
        "reached": learned["reached"],
        "held_out": learned["heldOut"],
        "input_latency_ms": {
            "median": round(statistics.median(latencies)),
            "max": round(max(latencies)),
            "n": len(latencies),
        },
        "longest_frame_gap_ms": round(worst_frame),
        **where_it_ran(browser.version, load_before, load_after),
    }
    print(
        f"requests blocked: {len(blocked)}; load average {entry['load_average']} "
        f"on {os.cpu_count()} cores"
    )
    finish(entry, blocked, args.record)


if __name__ == "__main__":
    main()
