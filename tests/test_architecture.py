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
