import json
import os
import subprocess
import sys

import pytest

from transformer.cli import build_parser, main


def error_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--max-steps", "0"], "--max-steps: must be >= 1, got 0"),
        (["train", "--max-steps", "x"], "'x' is not an integer"),
        (["train", "--epochs", "2", "--token-budget", "-5"], "--token-budget: must be >= 1"),
        (["train", "--max-steps", "5", "--preset", "huge"], "invalid choice: 'huge'"),
        (["train", "--max-steps", "5", "--src", "de", "--tgt", "de"], "src and tgt are both 'de'"),
        (["train", "--max-steps", "5", "--tgt", "ja"], "invalid choice: 'ja'"),
        (["train", "--max-steps", "5", "--label-smoothing", "1.5"], "must be >= 0 and < 1"),
        (["train", "--max-steps", "5", "--lr-factor", "0"], "must be > 0"),
        (["train"], "set max_steps or epochs"),
        (["train", "--max-steps", "5", "--device", "gpu"], "'gpu' is not a device"),
        (["fly"], "invalid choice: 'fly'"),
        ([], "required: COMMAND"),
    ],
)
def test_bad_arguments_are_argparse_errors(argv, message, capsys):
    assert message in error_of(argv, capsys)


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--src", "--tgt", "--preset", "--max-steps", "--epochs", "--seed", "--out",
                 "--resume", "--device", "--token-budget", "--warmup", "--lr-factor",
                 "--label-smoothing", "--dropout", "--clip", "--log-every", "--eval-every",
                 "--save-every", "--keep", "--no-amp"):  # fmt: skip
        assert flag in text
    assert "train" in build_parser().format_help()


def test_missing_corpus_gets_the_loaders_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    status = main(["train", "--max-steps", "2", "--out", str(tmp_path / "run")])
    assert status == 1
    assert "MULTI30K_DIR" in capsys.readouterr().err


def test_torchrun_two_cpu_processes_with_gloo(tmp_path):
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "transformer", "train", "--preset", "tiny", "--max-steps", "6", "--device"]
    command += ["cpu", "--token-budget", "300", "--log-every", "2", "--eval-every", "6"]
    command += ["--save-every", "3", "--out", str(out)]
    env = os.environ | {"TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4, 6]  # one writer: rank 0
    assert "val_loss" in records[-1]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and summaries[0]["step"] == 6  # printed by rank 0 only
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest.pt",
        "step_0000003.pt",
        "step_0000006.pt",
    ]
