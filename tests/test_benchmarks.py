"""Every script under benchmarks/ imports, and answers --help, so that a GPU session cannot
fail on a name a refactor removed (a benchmark's measurements run on demand, never here)."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def load(script: Path):
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_is_found():
    assert {"train_loop", "train_step", "attention_kernels"} <= {s.stem for s in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_a_benchmark_imports_and_answers_help(script, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as when run as a script: its siblings
    module = load(script)
    assert module.__doc__, f"{script.name} has no docstring"
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as stop:
        if script.stem == "test_time":
            module.parse_args(sys.argv[1:])
        else:
            module.main()
    assert stop.value.code == 0
    assert "usage:" in capsys.readouterr().out
