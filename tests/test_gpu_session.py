"""The GPU session's choices (benchmarks/gpu_plan.py, benchmarks/recipe.py) and its shell
script at toy size on the CPU, with an option forced to fail: a GPU call is rare, so what it
will do with each second is checked here first."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.data import cache_dir
from transformer.decoding import Decoding
from transformer.devices import describe_device
from transformer.search import read_grid

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their siblings so

import gpu_plan  # noqa: E402
import recipe  # noqa: E402
import train_loop  # noqa: E402
from train_step import record  # noqa: E402


def probed(option: str, steps_per_s: float, at_once: int = 1) -> dict:
    """A train_loop entry of the probe, as train_loop.py writes it (the fields read here)."""
    entry = {"benchmark": "train_loop", **gpu_plan.OPTIONS[option], "steps_per_s": steps_per_s}
    return entry | ({"processes_at_once": at_once} if at_once > 1 else {})


def failed(option: str, at_once: int = 1) -> dict:
    return probed(option, 1e9, at_once) | {"failed": "exit 1: a reason"}


def test_the_fastest_option_alone_is_chosen_and_a_failure_never_is():
    entries = [probed("eager", 30.0), probed("compiled", 66.0), failed("graphs")]
    entries.append(probed("compiled", 500.0, at_once=2))  # a pair's rate is not a lone one's
    option, why = gpu_plan.fastest(entries)
    assert option == "compiled"
    assert why == "compiled: the most steps/s alone (eager 30.0, compiled 66.0)"
    # measured instead of failed, the faster option wins
    assert gpu_plan.fastest(entries[:2] + [probed("graphs", 210.0)])[0] == "graphs"


def test_with_no_option_measured_the_session_trains_eager():
    option, why = gpu_plan.fastest([failed("eager"), failed("compiled"), failed("graphs")])
    assert option == "eager" and "no option ran alone" in why


@pytest.mark.parametrize(
    "alone, pair, seconds_left, expected",
    [
        (66.0, 29.0, 400, "one-after-other"),  # each direction gets 66 steps/s, not 29
        (66.0, 29.0, 300, "at-once"),  # 2 x (110 + 60) = 340 s do not fit in 300
        (30.0, 30.0, 400, "at-once"),  # the device had room for both: no gain in turn
        (66.0, None, 400, "one-after-other"),  # the pair failed: not risked again
        (66.0, None, 300, "at-once"),
        (None, 29.0, 400, "at-once"),
        (66.0, "one failed", 400, "one-after-other"),  # the other's rate is not a pair's
    ],
)
def test_the_directions_train_at_once_unless_one_after_the_other_gives_more_steps(
    alone, pair, seconds_left, expected
):
    entries = [failed("graphs"), failed("graphs", 2), probed("eager", 500.0, 2)]  # not read
    entries += [probed("compiled", alone)] if alone else []
    if pair == "one failed":
        entries += [probed("compiled", 70.0, 2), failed("compiled", 2)]
    elif pair:
        entries += [probed("compiled", pair, 2), probed("compiled", pair + 1, 2)]
    schedule, why = gpu_plan.schedule(entries, "compiled", 110, 60, seconds_left)
    assert schedule == expected, why


def test_each_direction_decodes_with_its_best_setting_on_val():
    def trial(run: str, average: int, alpha: float, bleu: float) -> dict:
        decoding = {"average": average, "beam_size": 4, "alpha": alpha, "max_sentences": None}
        return {"trial": run, "decoding": decoding, "val": {"sacrebleu_lc": bleu}}

    trials = [trial("en-de", 5, 1.0, 37.5), trial("en-de", 1, 0.6, 37.9)]
    trials += [trial("de-en", 5, 1.0, 40.7), trial("de-en", 1, 0.6, 40.1)]
    best, why = gpu_plan.best_decoding(trials, "runs/en-de")
    assert best == Decoding(average=1, beam_size=4, alpha=0.6)
    assert why == "val BLEU (average/beam/alpha: lc) 5/4/1.0: 37.5, 1/4/0.6: 37.9"
    assert gpu_plan.best_decoding(trials, "runs/de-en")[0] == Decoding(5, 4, 1.0)
    with pytest.raises(SystemExit, match="no val scores of runs/fr-en"):
        gpu_plan.best_decoding(trials, "runs/fr-en")


def test_a_failed_probe_is_recorded_in_both_lists(tmp_path):
    lists = [tmp_path / "benchmarks.json", tmp_path / "probe.json"]
    gpu_plan.record_failure(lists, "graphs", 1, "skipped: no CUDA device", "cuda:7")
    gpu_plan.record_failure(lists, "compiled", 2, "exit 1: out of memory", "cpu")
    for path in lists:
        entries = json.loads(path.read_text())
        assert [
            (gpu_plan.option_of(e), e.get("processes_at_once"), e["failed"]) for e in entries
        ] == [
            ("graphs", None, "skipped: no CUDA device"),
            ("compiled", 2, "exit 1: out of memory"),
        ]
        assert [e["provenance"]["device"] for e in entries] == ["cuda:7", describe_device("cpu")]


def test_processes_that_record_at_the_same_time_lose_no_entry(tmp_path):
    """The probe's pair ends together and both write benchmarks.json: the lock keeps both."""
    path = tmp_path / "benchmarks.json"
    write = (
        "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path\n"
        "from train_step import record\n"
        "for i in range(30):\n"
        "    record(Path(sys.argv[1]), {'benchmark': sys.argv[2], 'batch': i,"
        " 'provenance': {'device': 'cpu'}})\n"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", write, str(path), name], cwd=ROOT)
        for name in ("first", "second")
    ]
    assert [w.wait() for w in writers] == [0, 0]
    entries = json.loads(path.read_text())
    assert sorted((e["benchmark"], e["batch"]) for e in entries) == sorted(
        (name, i) for name in ("first", "second") for i in range(30)
    )
    record(path, {"benchmark": "first", "batch": 3, "provenance": {"device": "cpu"}, "new": 1})
    assert len(json.loads(path.read_text())) == 60  # the same setting is replaced, not added


def test_the_probe_times_the_recipes_shape_and_the_session_scores_its_choices(tmp_path):
    configs, _, decodings = read_grid(ROOT / "benchmarks/grids/gpu.json", tmp_path)
    shape = recipe.shape_argv(configs["en-de"])
    assert shape == shlex.split("--preset small --set vocab_size=4000 --set token_budget=8000") + [
        "--set",
        "dropout=0.3",
    ]
    changes = train_loop.overrides(shape[3::2])  # what train_loop.py makes of them
    assert changes == {"vocab_size": 4000, "token_budget": 8000, "dropout": 0.3}
    choices = recipe.choices_argv(decodings)
    assert choices == shlex.split("--average 1 3 5 --beam-size 4 --alpha 0.6 1.0")


def test_a_switch_is_set_by_true_or_false_and_nothing_else():
    assert train_loop.overrides(["compile=true", "cuda_graphs=0"]) == {
        "compile": True,
        "cuda_graphs": False,
    }
    with pytest.raises(SystemExit, match="--set compile=maybe: 'maybe' is not true or false"):
        train_loop.overrides(["compile=maybe"])


def test_the_session_runs_every_stage_at_toy_size_and_survives_a_failed_probe(tmp_path):
    """TOY=1 gpu_session.sh all on the CPU, the compiled probe forced to fail: the session
    records the failure and the skipped CUDA-graph probe, trains with the fastest option
    that ran, and brings back at most 8 files, the records naming that option."""
    out, runs = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    env = os.environ | {
        "TOY": "1",
        "PROBE_FAIL": "compiled",
        "OUT": str(out),
        "RUNS": str(runs),
        "PYTHON": sys.executable,
        "TRANSFORMER_CACHE": str(cache_dir()),  # the tokenizers the tests trained, not .gpu's
    }
    env.pop("TOY_RESULTS", None)
    done = subprocess.run(
        ["bash", "benchmarks/gpu_session.sh", "all"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    back = sorted(p.name for p in out.iterdir())
    assert len(back) <= 8, back
    assert {"en-de.json", "de-en.json", "manifest.json", "benchmarks.json"} <= set(back)
    assert {"trials.jsonl", "gpu-session.log"} <= set(back)
    probe = json.loads((runs / "probe.json").read_text())
    at = {
        (gpu_plan.option_of(e), e.get("processes_at_once", 1), e.get("process", 1)): e
        for e in probe
    }
    assert at.keys() == {
        ("eager", 1, 1),
        ("compiled", 1, 1),
        ("graphs", 1, 1),
        ("eager", 2, 1),
        ("eager", 2, 2),
    }
    assert at[("compiled", 1, 1)]["failed"].startswith("exit 1: --set probe_forced_to_fail=1")
    assert "needs a CUDA device" in at[("graphs", 1, 1)]["failed"]
    assert not any("failed" in at[("eager", *process)] for process in [(1, 1), (2, 1), (2, 2)])
    profiled = at[("eager", 1, 1)]["profile"]  # on a CPU: the host's ops only
    assert profiled["steps"] == 2 and profiled["ms_per_step"] > 0 and profiled["top_host_ms"]
    assert profiled["kernels_per_step"] is None and profiled["top_device_ms"] is None
    for direction in ("en-de", "de-en"):
        config = json.loads((out / f"{direction}.json").read_text())["config"]["train"]
        assert (config["compile"], config["cuda_graphs"]) == (False, False)
    log = (out / "gpu-session.log").read_text()
    assert "option: eager: the most steps/s alone (eager" in log
    assert "train with eager," in log
