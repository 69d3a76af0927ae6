"""Pages that show the recorded results, read from `results/` when the book is built.

The landing page and the results page quote BLEU scores, a translation and benchmark figures.
Typed by hand they would go stale at the next run, so these directives write them from the
files the runs wrote, through `transformer.results` (the same tables chapter 14 shows):

- `{recorded-headline}`: one paragraph: what the shipped translators reach, and one of their
  test translations;
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

from transformer.results import bleu_table, load_results

RESULTS = Path(__file__).resolve().parents[2] / "results"


def complete_runs() -> list[dict]:
    """The recorded runs that scored every sentence, English→German first."""
    runs = [r for r in load_results(RESULTS) if r["config"]["decoding"]["max_sentences"] is None]
    return sorted(runs, key=lambda r: (r["device"].startswith("cpu"), r["direction"] != "en-de"))


def headline() -> str:
    runs = {r["direction"]: r for r in reversed(complete_runs())}  # the first of each wins
    scores = " and ".join(
        f"**{r['bleu']['test_2016_flickr']['sacrebleu_lc']:.1f} BLEU {d.replace('-', '→')}**"
        for d, r in runs.items()
    )
    devices = sorted({r["device"] for r in runs.values()})
    hours = max(r["train_wall_seconds"] for r in runs.values()) / 3600
    sample = runs["en-de"]["samples"][0]
    return (
        f"The translators that ship with the package reach {scores} on Multi30k's test set "
        f"(lowercased sacreBLEU), trained for at most {hours:.1f} hours each on "
        f"{', '.join(devices)}. One of their test sentences:\n\n"
        f"> {sample['source']}\n>\n> → {sample['hypothesis']}\n"
    )


def benchmarks() -> str:
    rows = [
        "| loop | preset | changes | compiled | device | target tokens/s | loop/bare step |",
        "|---|---|---|---|---|--:|--:|",
    ]
    for e in json.loads((RESULTS / "benchmarks.json").read_text()):
        if e["benchmark"] != "train_loop":
            continue
        changes = ", ".join(f"{k} {v}" for k, v in e.get("changes", {}).items()) or "none"
        cells = (
            "bf16" if e["amp"] else "float32",
            e["preset"],
            changes,
            "yes" if e["compile"] else "no",
            e["provenance"]["device"],
            f"{e['target_tokens_per_s']:,.0f}",
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
