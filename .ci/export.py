"""Export every notebook's `#| export` cells into src/transformer (nbdev's exporter + ruff format).

    python .ci/export.py           # re-export the package from the notebooks
    python .ci/export.py --check   # export into a temporary copy; exit 1 if src/ differs

A notebook may write several modules (`#| default_exp data` plus `#| export tokenizer`).
nbdev's `nb_export` appends to a module that is not the notebook's default one, which would
grow the file on every run; here every module is written afresh, so export is idempotent.
The exported modules then have their imports sorted and are formatted by ruff, under the
package's settings.
"""

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nbdev.export import nb_export
from nbdev.maker import ModuleMaker

ROOT = Path(__file__).resolve().parents[1]
HAND_WRITTEN = {"__init__.py", "__main__.py"}  # not exported from a notebook


def fresh_module(**kwargs) -> ModuleMaker:
    """A ModuleMaker that always writes its module from scratch."""
    return ModuleMaker(**{**kwargs, "is_new": True})


def export(root: Path) -> None:
    """Export root/notebooks/*.ipynb into root/src/transformer."""
    lib = root / "src" / "transformer"
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        nb_export(str(nb), lib_path=str(lib), mod_maker=fresh_module)
    for module in lib.glob("*.py"):  # nbdev makes one-line imports relative, not wrapped ones
        text = module.read_text()
        module.write_text(
            re.sub(r"^from transformer\.(\w+) import \(", r"from .\1 import (", text, flags=re.M)
        )
    # the package's settings (100 columns), not the notebooks' (88): imports sorted, then formatted
    ruff = [sys.executable, "-m", "ruff"]
    config = ["--quiet", "--config", str(ROOT / "pyproject.toml")]
    subprocess.run([*ruff, "check", "--select", "I", "--fix", *config, str(lib)], check=True)
    subprocess.run([*ruff, "format", *config, str(lib)], check=True)


def exported_modules(lib: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(lib.glob("*.py")) if p.name not in HAND_WRITTEN}


def check() -> int:
    """Export into an empty copy of the tree and compare it with src/transformer."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        shutil.copytree(ROOT / "notebooks", copy / "notebooks")
        (copy / "src" / "transformer").mkdir(parents=True)
        export(copy)
        want = exported_modules(copy / "src" / "transformer")
    have = exported_modules(ROOT / "src" / "transformer")
    problems = [
        f"src/transformer/{n} is not exported by any notebook" for n in have.keys() - want.keys()
    ]
    problems += [
        f"src/transformer/{n} is missing: run python .ci/export.py"
        for n in want.keys() - have.keys()
    ]
    for name in sorted(want.keys() & have.keys()):
        if want[name] != have[name]:
            diff = difflib.unified_diff(
                have[name].splitlines(),
                want[name].splitlines(),
                f"src/transformer/{name}",
                "exported from notebooks",
                lineterm="",
                n=1,
            )
            problems.append("\n".join(diff))
    for problem in problems:
        print(problem)
    print("export drift: none" if not problems else "export drift: run python .ci/export.py")
    return 1 if problems else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check", action="store_true", help="fail if src/ differs from a fresh export"
    )
    if parser.parse_args().check:
        sys.exit(check())
    export(ROOT)
