"""The book's sources keep the conventions a reader relies on, and its workflows stay valid.

- Every chapter notebook starts with the install cell that makes it run on Colab, pointing at
  the repository that `_config.yml` names (the launch buttons open notebooks from there).
- Every figure is a numbered figure with a caption and a name, and the text refers to it.
- Every labelled equation is referred to somewhere, and no text says "see above".
- The deploy and test workflows are valid YAML with the permissions and actions they need.
- The architecture diagrams are what their script draws (so they stay in sync with it).

The rendered side (math, images, offline, launch links) is checked in tests/test_browser.py.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY = CONFIG["repository"]["url"]


def cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def book_text() -> str:
    """All markdown of the book: the notebooks' markdown cells, the sentences their code cells
    write (Markdown outputs), figure captions and book/*.md."""
    parts = [page.read_text() for page in sorted((ROOT / "book").glob("*.md"))]
    for notebook in NOTEBOOKS:
        for cell in cells(notebook):
            if cell["cell_type"] == "markdown":
                parts.append(source(cell))
                continue
            if figure := figure_options(cell):
                parts.append(figure.get("caption", ""))
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("data", {}).get("text/markdown", "")))
    return "\n".join(parts)


def figure_options(cell: dict) -> dict | None:
    return cell.get("metadata", {}).get("mystnb", {}).get("figure")


def is_figure(cell: dict) -> bool:
    outputs = cell.get("outputs", []) if cell["cell_type"] == "code" else []
    return any("image/png" in output.get("data", {}) for output in outputs)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_starts_with_the_install_cell(notebook):
    first_code = next(cell for cell in cells(notebook) if cell["cell_type"] == "code")
    text = source(first_code)
    assert "import transformer" in text and "except ModuleNotFoundError:" in text, text
    # IPython expands $REPO in the magic; the line stays within the page's 88 columns
    assert (
        f'REPO = "{REPOSITORY}"' in text
        and '%pip install --quiet "transformer @ git+$REPO"' in text
    ), f"the install cell must install from the repository of _config.yml ({REPOSITORY})"
    assert "hide-cell" in first_code["metadata"].get("tags", []), "fold the install cell away"
    assert not first_code["outputs"], "with the package installed the install cell prints nothing"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_figure_is_numbered_captioned_and_referred_to(notebook):
    text = book_text()
    chapter = notebook.stem[:2]
    for index, cell in enumerate(cells(notebook)):
        if not is_figure(cell):
            continue
        figure = figure_options(cell) or {}
        where = f"{notebook.name}, cell {index}"
        assert figure.get("caption", "").strip(), f"{where}: a figure without a caption"
        name = figure.get("name", "")
        assert name.startswith(f"fig-{chapter}-"), f"{where}: name {name!r} is not fig-{chapter}-…"
        assert f"<{name}>`" in text or f"{{numref}}`{name}`" in text, f"nothing refers to {name}"


def main_line() -> list[Path]:
    """The chapters of the _toc.yml parts that are neither appendices nor back matter."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p for p in toc["parts"] if not re.search("Appendix|Back matter", p["caption"])]
    files = [ROOT / f"{c['file']}.ipynb" for p in parts for c in p["chapters"]]
    return [f for f in files if f.exists()]


def test_main_line_chapters_end_with_two_to_four_exercises():
    """BOOK.md's shape of a chapter: it ends with two to four exercises."""
    assert len(main_line()) >= 15
    for notebook in main_line():
        (exercises,) = [source(c) for c in cells(notebook) if source(c).startswith("## Exercises")]
        count = len(re.findall(r"^\d+\. ", exercises, re.M))
        assert 2 <= count <= 4, f"{notebook.stem}: {count} exercises"


def test_figure_names_are_unique():
    names = [
        figure_options(cell)["name"]
        for notebook in NOTEBOOKS
        for cell in cells(notebook)
        if is_figure(cell) and figure_options(cell)
    ]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_labelled_equation_is_referred_to():
    text = book_text()
    labels = re.findall(r"^\$\$\s*\(([\w-]+)\)\s*$", text, flags=re.MULTILINE)
    assert labels, "the book has no labelled equations"
    unreferenced = [label for label in labels if f"{{eq}}`{label}`" not in text]
    assert not unreferenced, f"labelled equations nothing refers to: {unreferenced}"


def test_no_see_above():
    found = re.findall(r".{0,40}\bsee (?:above|below)\b.{0,20}", book_text(), flags=re.IGNORECASE)
    assert not found, f"refer with a label ({{ref}}, {{numref}}, {{eq}}) instead: {found}"


def workflow(name: str) -> dict:
    loaded = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    loaded["on"] = loaded.pop(True, loaded.get("on"))  # YAML 1.1 reads the key `on` as True
    return loaded


def steps_using(flow: dict) -> list[str]:
    return [step.get("uses", "") for job in flow["jobs"].values() for step in job["steps"]]


def test_book_workflow_deploys_to_pages():
    flow = workflow("book.yml")
    assert flow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    uses = steps_using(flow)
    assert "actions/upload-pages-artifact@v3" in uses and "actions/deploy-pages@v4" in uses
    runs = " ".join(step.get("run", "") for job in flow["jobs"].values() for step in job["steps"])
    assert "jupyter-book build . -W" in runs
    assert flow["jobs"]["deploy"]["needs"] == "build"
    assert flow["jobs"]["deploy"]["environment"]["name"] == "github-pages"


def test_tests_workflow_runs_on_pull_requests():
    flow = workflow("tests.yml")
    assert "pull_request" in flow["on"]
    runs = " ".join(step.get("run", "") for step in flow["jobs"]["test"]["steps"])
    assert ".venv/bin/python -m pytest" in runs, "the README's test command"


def test_diagrams_are_drawn_by_their_script(tmp_path):
    """The architecture diagrams in book/figures are what book/figures/diagrams.py draws now."""
    script = ROOT / "book" / "figures" / "diagrams.py"
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True)
    drawn = sorted(p.name for p in tmp_path.glob("*.png"))
    assert drawn == ["decoder_layer.png", "decoding_step.png", "transformer.png"]
    stale = [n for n in drawn if (tmp_path / n).read_bytes() != (script.parent / n).read_bytes()]
    assert not stale, f"re-run {script.relative_to(ROOT)}: {stale} differ from what it draws"


def test_recorded_pages_show_every_complete_run():
    """The landing and results pages are written from results/ at build time
    (book/_ext/recorded_results.py): every complete run's test BLEU is in them."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import recorded_results

    runs = recorded_results.complete_runs()
    assert {r["device"].startswith("cpu") for r in runs} == {True, False}, "a GPU and a CPU run"
    table, headline = recorded_results.bleu(), recorded_results.headline()
    for r in runs:
        for split in ("test_2016_flickr", "val"):
            lc, cased = r["bleu"][split]["sacrebleu_lc"], r["bleu"][split]["sacrebleu_cased"]
            assert f"| {lc:.2f} / {cased:.2f} |" in table, (r["file"], split)
        assert f"{r['bleu']['test_2016_flickr']['sacrebleu_lc']:.1f} BLEU" in headline
    assert "train_loop" not in recorded_results.benchmarks()  # a table, not raw records
    gpu = [
        e
        for e in json.loads((ROOT / "results" / "benchmarks.json").read_text())
        if not e["provenance"]["device"].startswith("cpu")
    ]
    assert gpu and all(f"{e['mfu']:.2%}" in recorded_results.benchmarks() for e in gpu)


def test_the_readme_shows_the_recorded_table():
    """README.md cannot compute, so it holds a copy of the BLEU table of every complete run:
    it must be the one the records make."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import recorded_results

    table = recorded_results.bleu()
    readme = (ROOT / "README.md").read_text()
    assert table in readme, f"README.md's results table is stale; it should read:\n{table}"


def test_appendices_are_named_and_speak_as_appendices():
    """A notebook in the table of contents' Appendix part is titled "Appendix: ..." and never
    calls itself a chapter; every other notebook is a chapter, never titled so."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    appendices = {
        chapter["file"]
        for part in toc["parts"]
        if "Appendix" in part["caption"]
        for chapter in part["chapters"]
    }
    assert appendices, "_toc.yml has no Appendix part"
    for notebook in NOTEBOOKS:
        title = source(cells(notebook)[0]).splitlines()[0]
        name = f"notebooks/{notebook.stem}"
        assert title.startswith("# Appendix: ") == (name in appendices), (name, title)
        if name in appendices:
            prose = "\n".join(source(c) for c in cells(notebook) if c["cell_type"] == "markdown")
            assert not re.search(r"\b[Tt]his chapter\b", prose), f"{name} calls itself a chapter"


# at 1280 px the chapter's text column is 672 px wide; matplotlib's inline figures have 100
# pixels per inch, and a figure wider than the column is shown shrunk to it
COLUMN_PX, FIGURE_DPI, DEFAULT_POINTS = 672, 100, 10


def test_figure_text_reads_at_11_px_at_1280():
    """Every figure a notebook draws: its smallest text (a `fontsize=`/`labelsize=` its cell
    sets, else matplotlib's 10 pt) at the size the figure is shown (its `figsize` width in the
    column, shrunk if wider) is at least 11 px. A static reading of the cell, so a figure
    drawn by a helper defined elsewhere counts at its caller's settings."""
    small = []
    for notebook in NOTEBOOKS:
        for cell in cells(notebook):
            if not is_figure(cell):
                continue
            code = source(cell)
            widths = [float(w) for w in re.findall(r"figsize=\(\s*([\d.]+)", code)] or [6.4]
            sizes = re.findall(r"(?:fontsize|labelsize)=([\d.]+)", code)
            points = min([DEFAULT_POINTS, *map(float, sizes)])
            shown = min(1.0, COLUMN_PX / (max(widths) * FIGURE_DPI))
            px = points * FIGURE_DPI / 72 * shown
            if px < 11:
                small.append(f"{notebook.stem} {cell.get('id')}: {points} pt at {px:.1f} px")
    assert not small, small
