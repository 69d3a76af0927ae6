"""`{translator-box}`: the trained translator on a page that is not a notebook (the landing page).

It writes the same fragment as chapter 14's cell, `transformer.translator_page.translator_html`,
so the landing page and the chapter show one widget. Its example captions are the test
sentences that the shipped translators' records keep (`results/`), so the build needs no corpus.
"""

from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from transformer.results import load_results
from transformer.translator_page import translator_html

RESULTS = Path(__file__).resolve().parents[2] / "results"
SOURCE_LANGUAGE = {"en-de": "en", "de-en": "de"}


def recorded_examples(n: int = 6) -> dict[str, list[str]]:
    """language -> the first n test sources that the complete CPU records keep."""
    examples = {}
    for r in load_results(RESULTS):
        if r["device"].startswith("cpu") and r["config"]["decoding"]["max_sentences"] is None:
            language = SOURCE_LANGUAGE[r["direction"]]
            examples[language] = [s["source"] for s in r["samples"][:n]]
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
