"""The package's shape: imports flow one way, from earlier chapters to later ones, and
ARCHITECTURE.md names every module with the chapter that exports it."""

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "transformer"


def chapter_of(module: Path) -> int | None:
    """The chapter a generated module is exported from (its first line names the notebook)."""
    found = re.search(r"notebooks/(\d\d)_", module.read_text().splitlines()[0])
    return int(found.group(1)) if found else None


def package_imports(module: Path) -> set[str]:
    """The package modules `module` imports (`from .x import y` and `from . import x`)."""
    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names |= {node.module} if node.module else {alias.name for alias in node.names}
    return names


MODULES = {p.stem: p for p in PACKAGE.glob("*.py") if chapter_of(p) is not None}


def test_every_exported_module_is_found():
    assert len(MODULES) >= 20 and {"model", "training_loop", "cli"} <= set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_come_from_earlier_or_the_same_chapter(name):
    chapter = chapter_of(MODULES[name])
    later = {m: chapter_of(MODULES[m]) for m in package_imports(MODULES[name])}
    assert all(c <= chapter for c in later.values()), f"{name} (ch. {chapter}) imports {later}"


def test_imports_have_no_cycle():
    graph = {name: package_imports(path) for name, path in MODULES.items()}
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        pytest.fail(f"import cycle: {cycle.args[1]}")


def test_architecture_names_every_module_and_its_chapter():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for name, path in MODULES.items():
        row = re.search(rf"^\| `{name}` \| (\d+) \|", text, re.MULTILINE)
        assert row, f"ARCHITECTURE.md has no row for {name}"
        assert int(row.group(1)) == chapter_of(path), name


def layer_table() -> dict[str, tuple[list[str], set[str]]]:
    """ARCHITECTURE.md's layer table, in its order: layer -> (its modules, the layers it
    imports from)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text[text.index("## The direction of imports") : text.index("## Where a change goes")]
    layers = {}
    for name, modules, sources in re.findall(r"^\| (\w+) \| (`.*`) \| (.*) \|$", section, re.M):
        imported = {s.strip() for s in sources.split(",")} - {"–"}
        layers[name] = (re.findall(r"`(\w+)`", modules), imported)
    return layers


def test_every_module_is_in_one_layer():
    placed = [m for modules, _ in layer_table().values() for m in modules]
    assert sorted(placed) == sorted(MODULES), "ARCHITECTURE.md's layers and the package differ"


def test_the_layer_arrows_are_the_imports_the_code_has():
    """Each layer imports from exactly the layers the table lists, all of them above it."""
    layers = layer_table()
    layer_of = {m: name for name, (modules, _) in layers.items() for m in modules}
    real = {name: set() for name in layers}
    for module, path in MODULES.items():
        real[layer_of[module]] |= {layer_of[m] for m in package_imports(path)} - {layer_of[module]}
    order = list(layers)
    for name, (_, documented) in layers.items():
        assert real[name] == documented, (
            f"layer {name}: the code imports from {sorted(real[name])}, "
            f"ARCHITECTURE.md says {sorted(documented)}"
        )
        assert all(order.index(s) < order.index(name) for s in documented), name


def appendix_notebooks() -> set[str]:
    """The notebooks of the _toc.yml parts whose caption says Appendix."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p for p in toc["parts"] if "Appendix" in p["caption"]]
    return {Path(c["file"]).name for p in parts for c in p["chapters"]}


def test_the_engineering_is_exported_by_appendices():
    """No main-line chapter exports the command line, the records, the search, the
    checkpoints, a run's state or the page's fragment; ARCHITECTURE.md's appendix table names
    what each appendix exports."""
    engineering = {"cli", "arguments", "run_commands", "model_commands", "results", "scoring"}
    engineering |= {"search", "checkpoints", "run_state", "translator_page"}
    appendices = appendix_notebooks()
    for name in engineering:
        notebook = re.search(r"notebooks/(\w+)\.ipynb", MODULES[name].read_text()).group(1)
        assert notebook in appendices, f"{name} is exported by the main-line {notebook}"
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for number, modules in re.findall(r"^\| (\d+), [^|]+ \| (`.*`) \|$", text, re.M):
        for name in re.findall(r"`(\w+)`", modules):
            assert chapter_of(MODULES[name]) == int(number), f"{name} is not appendix {number}'s"


NESTING = (ast.For, ast.While, ast.If, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)


def nesting(node: ast.AST) -> int:
    """How deep blocks (for, while, if, with, try) nest inside a function's body."""
    deepest = 0
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue  # measured on its own
        deepest = max(deepest, nesting(child) + isinstance(child, NESTING))
    return deepest


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_reads_in_one_sitting(name):
    """At most 250 lines a module, 60 a function, and blocks at most 4 deep."""
    text = MODULES[name].read_text()
    assert len(text.splitlines()) <= 250, f"{name} has {len(text.splitlines())} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= 60, f"{name}.{node.name} has {lines} lines"
            assert nesting(node) <= 4, f"{name}.{node.name} nests {nesting(node)} deep"


def test_an_exported_cell_is_at_most_60_lines():
    import json

    long = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            lines = "".join(cell["source"]).splitlines()
            if cell["cell_type"] == "code" and lines and lines[0].startswith("#| export"):
                if len(lines) - 1 > 60:  # the #| export line aside
                    long.append(f"{notebook.name}: {lines[1][:50]} ({len(lines) - 1} lines)")
    assert not long, long
