"""`{translator-box}`: the trained translator on a page that is not a notebook (the landing page).

It writes the same fragment as chapter 14's cell, `transformer.translator_page.translator_html`,
so the landing page and the chapter show one widget. Its example captions are the test
sentences that the shipped translators' records keep (`results/`), from FIRST_EXAMPLE on as in
chapter 14, so the build needs no corpus.
"""

from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from transformer.results import load_results
from transformer.translator_page import FIRST_EXAMPLE, translator_html

RESULTS = Path(__file__).resolve().parents[2] / "results"
SOURCE_LANGUAGE = {"en-de": "en", "de-en": "de"}


def recorded_examples(n: int = 6) -> dict[str, list[str]]:
    """language -> n of the first test sources that the complete records keep, from
    FIRST_EXAMPLE on (every record of a direction keeps the same ones)."""
    examples = {}
    for r in load_results(RESULTS):
        if r["config"]["decoding"]["max_sentences"] is None:
            samples = r["samples"][FIRST_EXAMPLE : FIRST_EXAMPLE + n]
            examples[SOURCE_LANGUAGE[r["direction"]]] = [s["source"] for s in samples]
    return dict(sorted(examples.items(), key=lambda item: item[0] != "en"))


class TranslatorBox(SphinxDirective):
    """The translator fragment, with an id of its own on the page."""

    def run(self) -> list[nodes.Node]:
        for path in RESULTS.glob("*.json"):
            self.env.note_dependency(str(path))
        fragment = translator_html(recorded_examples(), element_id="landing-translator")
        return [nodes.raw("", fragment, format="html")]


def setup(app):
    app.add_directive("translator-box", TranslatorBox)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
