"""Pages that show the recorded results, read from `results/` when the book is built.

The landing page and the results page quote BLEU scores, a translation and benchmark figures.
Typed by hand they would go stale at the next run, so these directives write them from the
files the runs wrote, through `transformer.results` and `transformer.reports` (the same tables
chapter 14 shows):

- `{recorded-headline}`: one paragraph: what the shipped translators of each kind of machine
  reach, the box's first, and one of its test translations;
- `{recorded-bleu}`: the BLEU table of every complete recorded run (smoke runs left out);
- `{recorded-benchmarks}`: the training-loop benchmarks of `results/benchmarks.json`.

Each directive writes MyST Markdown and parses it in place, so roles and tables render as in
any page. A change to a file in `results/` rebuilds the pages that use them.
"""

import json
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

from transformer.pretrained import machine_kind, read_manifest, shipped_entry
from transformer.reports import bleu_table, machine_words, met_goal
from transformer.results import load_results

RESULTS = Path(__file__).resolve().parents[2] / "results"


def complete_runs() -> list[dict]:
    """The recorded runs that scored every sentence, English→German first."""
    runs = [r for r in load_results(RESULTS) if r["config"]["decoding"]["max_sentences"] is None]
    return sorted(runs, key=lambda r: (r["device"].startswith("cpu"), r["direction"] != "en-de"))


def headline() -> str:
    by_kind = {}  # kind of machine -> direction -> record, the kind the box uses first
    for r in complete_runs():
        by_kind.setdefault(machine_kind(r["device"]), {}).setdefault(r["direction"], r)
    manifest = read_manifest()
    (default,) = {machine_kind(shipped_entry(manifest, d)["trained_on"]) for d in manifest}
    by_kind = dict(sorted(by_kind.items(), key=lambda item: item[0] != default))

    def reach(runs: dict[str, dict], bold: bool) -> str:
        mark = "**" if bold else ""
        return " and ".join(
            f"{mark}{r['bleu']['test_2016_flickr']['sacrebleu_lc']:.1f} BLEU "
            f"{d.replace('-', '→')}{mark}"
            for d, r in runs.items()
        )

    def trained(runs: dict[str, dict]) -> str:
        minutes = max(r["train_wall_seconds"] for r in runs.values()) / 60
        (device,) = {r["device"] for r in runs.values()}
        return f"trained for at most {minutes:.1f} minutes on {machine_words(device)}"

    parts = [
        f"{trained(runs)}, the {'ones the box above uses' if kind == default else 'others'} "
        f"reach {reach(runs, kind == default)}"
        for kind, runs in by_kind.items()
    ]
    met = sum(met_goal(r) for runs in by_kind.values() for r in runs.values())
    goals = "None of them reaches" if met == 0 else f"{met} of them reach"
    sample = by_kind[default]["en-de"]["samples"][0]
    reached = "; ".join(parts)
    return (
        "The package ships two translators in each direction. "
        + reached[0].upper()
        + reached[1:]
        + " on Multi30k's test set (lowercased sacreBLEU). "
        f"{goals} the book's goal for its machine ({{ref}}`cpu-translator`). "
        "The first test sentence, as the box's model translates it:\n\n"
        f"> {sample['source']}\n>\n> → {sample['hypothesis']}\n"
    )


def precision(entry: dict) -> str:
    """bf16 or float32, and "emulated" where the CPU lacks bf16 instructions."""
    if not entry["amp"]:
        return "float32"
    return "bf16, emulated" if "emulated" in entry.get("amp_why", "") else "bf16"


def benchmarks() -> str:
    rows = [
        "| loop | device | steps/s | target tokens/s | MFU | loop/bare step |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for e in json.loads((RESULTS / "benchmarks.json").read_text()):
        if e["benchmark"] != "train_loop":
            continue
        changes = ", ".join(f"{k} {v}" for k, v in e.get("changes", {}).items())
        loop = f"{e['preset']}" + (f" ({changes})" if changes else "")
        loop += f", {precision(e)}" + (", compiled" if e["compile"] else "")
        cells = (
            loop,
            machine_words(e["provenance"]["device"]),
            f"{e['steps_per_s']:,.2f}",
            f"{e['target_tokens_per_s']:,.0f}",
            "" if e["mfu"] is None else f"{e['mfu']:.2%}",
            f"{e['loop_over_bare_step']:.2f}",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


class Recorded(SphinxDirective):
    """Parse the Markdown that `write` makes from `results/`."""

    write = staticmethod(lambda: "")

    def run(self) -> list[nodes.Node]:
        for path in RESULTS.glob("*.json*"):
            self.env.note_dependency(str(path))
        box = nodes.container()
        lines = StringList(self.write().splitlines(), source="results/")
        self.state.nested_parse(lines, self.content_offset, box)
        return box.children


def bleu() -> str:
    return bleu_table(complete_runs())


def directive(write) -> type:
    return type(write.__name__, (Recorded,), {"write": staticmethod(write)})


def setup(app):
    for write in (headline, bleu, benchmarks):
        app.add_directive(f"recorded-{write.__name__}", directive(write))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
