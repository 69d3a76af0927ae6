import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from random_data import random_pairs
from torch import nn

from transformer import devices, run_state, training, training_loop
from transformer.batching import collate
from transformer.buckets import Buckets
from transformer.checkpoints import (
    RunFolderBusy,
    check_config,
    load_checkpoint,
    lock_run_folder,
    save_checkpoint,
    step_checkpoints,
)
from transformer.cli import main
from transformer.config import TrainConfig, train_argv
from transformer.data import read_sentences
from transformer.devices import host_reads
from transformer.evaluation import load_model, tokenizer_of
from transformer.model import Transformer, TransformerConfig
from transformer.tokenizer import PAD_ID, UNK_ID
from transformer.training import (
    PRESETS,
    evaluate_loss,
    label_smoothed_loss,
    make_optimizer,
    noam_lr,
    train_step,
)
from transformer.training_loop import train


def test_label_smoothing_matches_its_definition_and_torch():
    torch.manual_seed(0)
    V, eps = 30, 0.1
    logits = torch.randn(3, 6, V, dtype=torch.float64)
    target = torch.randint(4, V, (3, 6))
    target[0, 4:] = PAD_ID
    log_p = logits.log_softmax(-1)
    q = torch.full_like(log_p, eps / V)
    q.scatter_(-1, target[..., None], 1 - eps + eps / V)  # (1 - eps) one-hot + eps / V
    real = target != PAD_ID
    by_hand = -(q * log_p).sum(-1)[real].mean()
    ours = label_smoothed_loss(logits, target, eps)
    assert ours.item() == pytest.approx(by_hand.item(), abs=1e-6)  # ours computes in float32
    ref = F.cross_entropy(
        logits.flatten(0, 1), target.flatten(), ignore_index=PAD_ID, label_smoothing=eps
    )
    assert ref.item() == pytest.approx(by_hand.item(), abs=1e-12)
    # padding is ignored: changing the logits at padded positions changes nothing
    logits2 = logits.clone()
    logits2[0, 4:] = 100.0
    assert label_smoothed_loss(logits2, target, eps).item() == pytest.approx(ours.item(), abs=1e-6)
    # eps = 0 is the plain negative log-likelihood
    nll = -log_p.gather(-1, target[..., None])[..., 0][real].mean()
    assert label_smoothed_loss(logits, target, 0.0).item() == pytest.approx(nll.item(), abs=1e-6)
    with pytest.raises(ValueError, match="do not match"):
        label_smoothed_loss(logits, target[:, :3])


def test_noam_values_and_scheduler():
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(4000, 512, 4000) == pytest.approx((512 * 4000) ** -0.5)
    assert noam_lr(16000, 512, 4000) == pytest.approx(512**-0.5 * 16000**-0.5)
    assert noam_lr(100, 64, 10, factor=2.0) == pytest.approx(2 * 64**-0.5 * 100**-0.5)
    with pytest.raises(ValueError, match="count from 1"):
        noam_lr(0, 512, 4000)
    optimizer, scheduler = make_optimizer(nn.Linear(2, 2), 64, 20, 0.5)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for step in range(1, 60):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(noam_lr(step, 64, 20, 0.5))
        optimizer.step()
        scheduler.step()


def test_nan_loss_skips_the_update_on_the_device():
    model = nn.Module()
    model.lin = nn.Embedding(10, 10)
    scale = torch.ones(())
    model.forward = lambda src, tgt_in: model.lin(tgt_in) * scale
    optimizer, scheduler = make_optimizer(model, 8, 4)
    batch = collate([([4, 5], [6, 7])])
    train_step(model, batch, optimizer, scheduler)  # a good step: the weights move
    before = model.lin.weight.detach().clone()
    moments = {k: v.clone() for k, v in optimizer.state[model.lin.weight].items()}
    scale.fill_(math.nan)
    loss = train_step(model, batch, optimizer, scheduler)
    assert loss.dim() == 0 and not torch.isfinite(loss)  # returned unread, for the loop to check
    assert torch.equal(model.lin.weight, before)
    for k, v in optimizer.state[model.lin.weight].items():
        assert torch.equal(v, moments[k]), k  # the step count and both moments are kept too
    scale.fill_(1.0)
    train_step(model, batch, optimizer, scheduler)
    assert not torch.equal(model.lin.weight, before)


def tiny_model(seed: int = 0, dropout: float = 0.0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(40, 40, d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=dropout)
    return Transformer(config)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_train_step_uses_its_label_smoothing_in_the_update(eps):
    batch = collate(random_pairs(6, vocab_size=40, max_len=11))
    ours, ref = tiny_model(), tiny_model()
    opt_ours, sched_ours = make_optimizer(ours, 16, 4)
    opt_ref, sched_ref = make_optimizer(ref, 16, 4)
    loss = train_step(ours, batch, opt_ours, sched_ours, label_smoothing=eps, clip=0.0)
    # the same update written out: smoothed cross-entropy over the real target tokens
    logits = ref(batch.src, batch.tgt_in)
    expected = F.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID, label_smoothing=eps
    )
    expected.backward()
    opt_ref.step()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-7), name


def test_validation_loss_averages_over_real_target_tokens_only():
    pairs = random_pairs(30, seed=1, vocab_size=40, max_len=11)
    model = tiny_model(1).eval()
    data = Buckets(pairs, 64, "cpu", 40, shuffle=False)
    ours = evaluate_loss(model, data.epoch_batches(0), label_smoothing=0.2)
    # each pair alone, unpadded: the loss summed over its tokens, then one division in all
    total = n_tokens = 0
    with torch.no_grad():
        for pair in pairs:
            b = collate([pair])
            logits = model(b.src, b.tgt_in)
            total += label_smoothed_loss(logits, b.tgt_out, 0.2, reduction="sum").item()
            n_tokens += b.tgt_out.numel()
    assert ours == pytest.approx(total / n_tokens, rel=1e-5)


@pytest.mark.parametrize("clip", [0.5, 0.0])
def test_train_step_clips_the_gradient(clip):
    torch.manual_seed(0)
    model = nn.Module()
    model.lin = nn.Embedding(10, 10)
    model.forward = lambda src, tgt_in: model.lin(tgt_in) * 1000
    optimizer, scheduler = make_optimizer(model, 8, 4)
    train_step(model, collate([([4, 5], [6, 7])]), optimizer, scheduler, clip=clip)
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    if clip:
        assert norm.item() == pytest.approx(0.5, rel=1e-5)
    else:  # 0 turns clipping off
        assert norm.item() > 10


def test_atomic_save_leaves_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "ckpt" / "a.pt"
    save_checkpoint({"w": torch.arange(3), "cfg": {"d_model": 4}}, path)
    assert load_checkpoint(path)["cfg"] == {"d_model": 4}

    def broken_save(obj, f):
        with open(f, "wb") as fh:
            fh.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"w": torch.zeros(3)}, path)
    assert torch.equal(load_checkpoint(path)["w"], torch.arange(3))  # the old one is intact
    assert [p.name for p in path.parent.iterdir()] == ["a.pt"]
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")


def test_config_checks():
    with pytest.raises(
        ValueError, match=r"d_model: checkpoint 64, now 128; n_heads: checkpoint 4, now 8"
    ):
        check_config(
            {"d_model": 64, "n_heads": 4, "n_layers": 2},
            {"d_model": 128, "n_heads": 8, "n_layers": 2},
        )
    check_config({"a": 1}, {"a": 1})
    with pytest.raises(ValueError, match="preset .huge. is not one of.*max_steps must be >= 1.*"):
        TrainConfig(preset="huge", src="en", tgt="en", max_steps=0)
    with pytest.raises(ValueError, match="src and tgt are both 'en'"):
        TrainConfig(src="en", tgt="en", max_steps=1)
    with pytest.raises(ValueError, match="set max_steps, epochs or max_seconds"):
        TrainConfig()
    with pytest.raises(ValueError, match="max_seconds must be > 0.*attention_dropout must be"):
        TrainConfig(max_seconds=0, attention_dropout=1.0)


@pytest.mark.parametrize(
    ("flags", "amp", "dtype", "why"),
    [
        ({"avx2", "avx512f"}, "auto", None, "the CPU has no bf16 instructions"),
        ({"avx2", "avx512_bf16"}, "auto", torch.bfloat16, "the CPU has avx512_bf16"),
        ({"amx_bf16", "avx512_bf16"}, "auto", torch.bfloat16, "has amx_bf16 and avx512_bf16"),
        ({"avx2"}, "on", torch.bfloat16, "amp is on: bf16 emulated"),
        ({"avx512_bf16"}, "off", None, "amp is off"),
        (set(), "auto", None, "the CPU has no bf16 instructions"),  # not Linux: no flags
    ],
)
def test_auto_autocast_takes_bf16_on_a_cpu_with_bf16_instructions(
    monkeypatch, flags, amp, dtype, why
):
    monkeypatch.setattr(devices, "cpu_flags", lambda: flags)
    chosen, reason = devices.choose_autocast(torch.device("cpu"), amp)
    assert chosen == dtype and why in reason


def test_this_cpus_flags_are_read_and_amp_was_a_switch_before():
    if Path("/proc/cpuinfo").exists():  # Linux: every x86 or Arm CPU lists fpu or fp
        assert devices.cpu_flags() & {"fpu", "fp"}
    assert TrainConfig(max_steps=1, amp=True).amp == "auto"  # older checkpoints, records
    assert TrainConfig(max_steps=1, amp=False).amp == "off"
    legacy = dataclasses.asdict(TrainConfig(max_steps=1)) | {"amp": False}
    assert "--amp off" in " ".join(train_argv(legacy))
    with pytest.raises(ValueError, match="amp 'fast' is not one of auto, on, off"):
        TrainConfig(max_steps=1, amp="fast")


BY_PRESET = ("d_model", "n_heads", "d_ff", "n_layers", "token_budget", "warmup")


def test_resolved_fills_in_the_presets_values_and_keeps_the_ones_set():
    small = PRESETS["small"]
    cfg = TrainConfig(preset="small", epochs=1, n_layers=4, d_ff=512, warmup=50)
    resolved = cfg.resolved()
    assert {k: getattr(resolved, k) for k in small.sizes} == small.sizes | {
        "n_layers": 4,
        "d_ff": 512,
    }
    assert (resolved.token_budget, resolved.warmup) == (small.token_budget, 50)
    assert resolved.resolved() == resolved and cfg.d_model is None  # a copy, made once
    assert resolved.attention_dropout is None  # None that means dropout, not a preset's value
    assert dataclasses.replace(cfg, preset="base").resolved().d_model == 512
    assert "--d-model 256" in " ".join(train_argv(resolved))


REAL_LOAD_PAIRS, LOADED = run_state.load_pairs, {}


@pytest.fixture(autouse=True)
def corpus_loaded_once(monkeypatch):
    """The runs trained in this process share the tokenized corpus (its loading is tested in
    test_batching, and every run through the command line here loads it afresh)."""

    def load_pairs(split, src, tgt, max_len, tokenizer):
        key = (split, src, tgt, max_len, tokenizer.vocab_size)
        if key not in LOADED:
            LOADED[key] = REAL_LOAD_PAIRS(split, src, tgt, max_len, tokenizer)
        return LOADED[key]

    monkeypatch.setattr(run_state, "load_pairs", load_pairs)


def tiny(tmp_path, name: str, **kw) -> TrainConfig:
    base = dict(
        preset="tiny",
        token_budget=300,
        log_every=1,
        eval_every=1000,
        save_every=2,
        out=str(tmp_path / name),
    )
    return TrainConfig(**(base | kw))


def records(out) -> list[dict]:
    """The metrics.jsonl records of the run in folder `out`."""
    with open(f"{out}/metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def test_nan_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    calls = []

    def poisoned(*args, **kwargs):
        calls.append(1)
        loss = label_smoothed_loss(*args, **kwargs)
        return loss * math.nan if len(calls) >= 6 else loss

    monkeypatch.setattr(training, "label_smoothed_loss", poisoned)
    cfg = tiny(tmp_path, "nan", max_steps=10, keep=5)
    with pytest.raises(FloatingPointError, match=r"step 6: the loss is nan.*last good checkpoint"):
        train(cfg)
    assert [p.name for p in step_checkpoints(cfg.out)] == ["step_0000002.pt", "step_0000004.pt"]
    assert load_checkpoint(f"{cfg.out}/checkpoints/latest.pt")["step"] == 4
    assert [r["step"] for r in records(cfg.out)] == [1, 2, 3, 4, 5]
    assert not list(tmp_path.rglob("*.tmp"))


def test_resume_checks_config_keeps_last_k_and_refuses_to_overwrite(tmp_path):
    cfg = tiny(tmp_path, "run", max_steps=4, save_every=1, keep=2)
    summary = train(cfg)
    assert summary["step"] == 4 and summary["val_loss"] is not None
    assert [p.name for p in step_checkpoints(cfg.out)] == ["step_0000003.pt", "step_0000004.pt"]
    ckpt = load_checkpoint(f"{cfg.out}/checkpoints/latest.pt")
    assert {
        "model",
        "optimizer",
        "scheduler",
        "rng",
        "sampler",
        "step",
        "train_config",
        "model_config",
    } <= set(ckpt)
    assert not list(tmp_path.rglob("*.tmp"))
    with pytest.raises(FileExistsError, match="already holds a run"):
        train(cfg)
    with pytest.raises(ValueError, match=r"model config .*dropout: checkpoint 0.1, now 0.2"):
        train(tiny(tmp_path, "run", max_steps=6, resume=True, dropout=0.2))
    with pytest.raises(ValueError, match=r"data config .*seed: checkpoint 0, now 1"):
        train(tiny(tmp_path, "run", max_steps=6, resume=True, seed=1))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(tiny(tmp_path, "fresh", max_steps=6, resume=True))


def test_a_french_run_trains_and_reloads_with_a_french_vocabulary(tmp_path):
    """train builds the vocabulary of the run's own pair, and tokenizer_of finds it again from
    the checkpoint: French validation captions encode without an unknown piece."""
    out = tmp_path / "fr-en"
    cfg = TrainConfig(preset="tiny", src="fr", tgt="en", vocab_size=1000, max_steps=1)
    train(dataclasses.replace(cfg, out=str(out), token_budget=400, eval_every=1000))
    _, ckpt = load_model(out / "checkpoints" / "latest.pt")
    tokenizer = tokenizer_of(ckpt)
    assert tokenizer.vocab_size == 1000
    french = read_sentences("val", "fr")
    assert "ç" in "".join(french)  # a letter that English and German captions lack
    unknown = sum(ids.count(UNK_ID) for ids in tokenizer.encode(french))
    assert unknown == 0, f"{unknown} unknown pieces in the French val captions"


def train_command(out, steps: int, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "transformer", "train", "--src", "en", "--tgt", "de"]
    command += ["--preset", "tiny", "--max-steps", str(steps), "--seed", "0", "--out", str(out)]
    return command + ["--token-budget", "400", *extra]


# the processes started here: no progress bars (and one thread, from conftest.py)
ENV = os.environ | {"TQDM_DISABLE": "1"}
FLAGS = ("--log-every", "5", "--eval-every", "10", "--save-every", "1000")  # the CLI runs'


def cli_train(out, steps: int, *extra: str) -> None:
    """The train command with FLAGS, through the command line's parser, in this process (a
    process of its own would spend seconds importing torch and loading the corpus)."""
    assert main(train_command(out, steps, *FLAGS, *extra)[3:]) == 0


def workers(launcher: subprocess.Popen) -> dict[int, int]:
    """{rank: PID} of the worker processes that torchrun `launcher` started (Linux's /proc:
    each worker's parent, and its RANK variable)."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):  # a process that has just ended
            continue
        rank = [v.removeprefix(b"RANK=") for v in environ if v.startswith(b"RANK=")]
        if parent == launcher.pid and rank:
            found[int(rank[0])] = int(proc.name)
    return found


def stopped_by(
    command: list[str], out, signum: int, times: int = 1, rank: int | None = None
) -> subprocess.CompletedProcess:
    """Run `command`, and once its run has logged a record send `signum` (`times` times in a
    row) to it, or with `rank` to torchrun's worker of that rank alone; wait for its end."""
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    process = subprocess.Popen(command, **pipes)
    try:
        metrics = out / "metrics.jsonl"
        while process.poll() is None and not (metrics.is_file() and metrics.read_text()):
            time.sleep(0.02)
        pid = process.pid if rank is None else workers(process)[rank]
        for _ in range(times):  # apart, so that each is handled on its own
            os.kill(pid, signum)
            time.sleep(0.3)
        try:
            stdout, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # killed below
            pytest.fail(
                "the run went on for 120 s after the signal (under torchrun: ranks that"
                " disagree about stopping wait for each other)"
            )
    finally:
        if process.poll() is None:  # end it, and torchrun's workers (in sessions of their own)
            for pid in [*workers(process).values(), process.pid]:
                os.kill(pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def assert_resumed_exactly(straight, stopped, log_every: int) -> None:
    """`stopped` (a run stopped by a signal, then resumed) logged what `straight` did, but for the
    stop's own record and the one window it cut; the final weights are equal."""
    a, b = (records(run) for run in (straight, stopped))
    stop = next(r["step"] for r in b if "stopped_by" in r)
    cut = stop + (-stop) % log_every if stop % log_every else None  # the window the stop cut
    b_logged = [r for r in b if r["step"] % log_every == 0 and "loss" in r]
    assert [r["step"] for r in b_logged] == [r["step"] for r in a if "loss" in r]
    assert [r["loss"] for r in a if r["step"] != cut] == [
        r["loss"] for r in b_logged if r["step"] != cut
    ]
    weights = [
        load_checkpoint(run / "checkpoints/latest.pt")["model"] for run in (straight, stopped)
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """20 steps of the tiny preset, uninterrupted, through the command line (FLAGS)."""
    out = tmp_path_factory.mktemp("straight") / "run"
    cli_train(out, 20)
    return out


@pytest.mark.parametrize(
    ("signum", "status", "times"), [(signal.SIGTERM, 143, 1), (signal.SIGINT, 130, 2)]
)
def test_a_signal_saves_the_step_it_stopped_at_and_the_resume_is_exact(
    tmp_path, straight_run, signum, status, times
):
    """SIGTERM once; SIGINT twice, as an impatient Ctrl-C: the second is noted and ignored."""
    out = tmp_path / "stopped"
    done = stopped_by(train_command(out, 20, *FLAGS), out, signum, times=times)
    assert done.returncode == status, done.stderr[-3000:]
    last, ckpt = records(out)[-1], load_checkpoint(out / "checkpoints/latest.pt")
    name = signal.Signals(signum).name
    assert last["stopped_by"] == name and "val_loss" in last
    assert ckpt["step"] == last["step"] < 20  # only the stop saved (save_every is 1000)
    assert f"stopped by {name} at step {last['step']}" in done.stderr and "--resume" in done.stderr
    assert ("again: already stopping" in done.stderr) == (times > 1)
    cli_train(out, 20, "--resume")
    assert_resumed_exactly(straight_run, out, 5)


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
DDP_FLAGS = ("--device", "cpu", "--log-every", "4", "--eval-every", "12", "--save-every", "12")


def ddp_train(out, *extra: str) -> subprocess.CompletedProcess:
    """24 steps of two CPU processes under torchrun (gloo), DDP_FLAGS; it must succeed."""
    command = TORCHRUN + train_command(out, 24, *DDP_FLAGS, *extra)[1:]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def ddp_straight(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """An uninterrupted torchrun run (ddp_train), and how its launcher ended."""
    out = tmp_path_factory.mktemp("ddp") / "straight"
    return out, ddp_train(out)


def test_torchrun_two_cpu_processes_with_gloo(ddp_straight):
    """Rank 0 alone writes the records and checkpoints and prints the summary."""
    out, done = ddp_straight
    steps = [r["step"] for r in records(out)]
    assert steps == list(range(4, 25, 4)) and "val_loss" in records(out)[-1]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and summaries[0]["step"] == 24
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest.pt",
        "step_0000012.pt",
        "step_0000024.pt",
    ]


def test_torchrun_ranks_stop_together_when_one_of_them_gets_a_signal(tmp_path, ddp_straight):
    """SIGTERM reaches rank 1 alone (torchrun would pass its own on to both): rank 0 learns of it
    only through the ranks' agreement at the next log point, and stops at the same step; rank 0
    saves that step, and the resumed run equals an uninterrupted one."""
    stopped = tmp_path / "stopped"
    command = TORCHRUN + train_command(stopped, 24, *DDP_FLAGS)[1:]
    done = stopped_by(command, stopped, signal.SIGTERM, rank=1)
    assert "stopped by SIGTERM" in done.stderr, done.stderr[-3000:]  # rank 0 prints it
    last, ckpt = records(stopped)[-1], load_checkpoint(stopped / "checkpoints/latest.pt")
    assert ckpt["step"] == last["step"] < 24 and last["step"] % 4 == 0
    assert last["stopped_by"] == "SIGTERM" and ckpt["world_size"] == 2
    ddp_train(stopped, "--resume")
    assert_resumed_exactly(ddp_straight[0], stopped, 4)


def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_readable_one(tmp_path):
    cfg = tiny(tmp_path, "run", max_steps=6, save_every=2, log_every=2)
    train(cfg)
    latest = tmp_path / "run/checkpoints/latest.pt"
    os.truncate(latest, latest.stat().st_size // 2)  # latest.pt is step 6 (a hard link): both cut
    with pytest.warns(UserWarning, match=r"latest.pt cannot be read; resuming from .*step_0000004"):
        summary = train(tiny(tmp_path, "run", max_steps=8, save_every=2, log_every=2, resume=True))
    assert summary["step"] == 8 and [r["step"] for r in records(cfg.out)] == [2, 4, 6, 8]
    straight = tiny(tmp_path, "straight", max_steps=8, save_every=2, log_every=2)
    train(straight)
    assert [r["loss"] for r in records(cfg.out)] == [r["loss"] for r in records(straight.out)]
    for path in (tmp_path / "run/checkpoints").iterdir():
        path.write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match=r"no checkpoint in .* can be read: latest.pt"):
        train(tiny(tmp_path, "run", max_steps=10, resume=True))


def test_exact_resume_through_the_cli(tmp_path, straight_run):
    """15 steps, stop, resume to 20 == 20 steps straight: every logged loss, every validation
    loss and the final weights, bit for bit (the same machine, the same process count)."""
    cli_train(tmp_path / "B", 15)
    cli_train(tmp_path / "B", 20, "--resume")
    a, b = records(straight_run), records(tmp_path / "B")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [5, 10, 15, 20]
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    val = [{r["step"]: r["val_loss"] for r in run if "val_loss" in r} for run in (a, b)]
    assert val[0] == {k: val[1][k] for k in (10, 20)} and 15 in val[1]  # B scored its stop too
    weights = [
        load_checkpoint(run / "checkpoints/latest.pt")["model"]
        for run in (straight_run, tmp_path / "B")
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert b[-1]["loss"] < b[0]["loss"]
    wall = [r["wall_s"] for r in b]  # the resumed session carries on counting the first one's time
    assert wall == sorted(wall) and wall[3] > wall[2] > 0


HOLD_THE_LOCK = """
import sys, time
from transformer.checkpoints import lock_run_folder
with lock_run_folder(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(300)
"""


def test_a_run_folder_has_one_writer_and_a_killed_one_leaves_no_lock(tmp_path):
    folder = tmp_path / "runs" / "a"  # the lock makes it
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(folder)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        busy = rf"{re.escape(str(folder))} is being written by another process \(PID {holder.pid}\)"
        with pytest.raises(RunFolderBusy, match=busy), lock_run_folder(folder):
            pass
    finally:
        holder.kill()  # SIGKILL: nothing of the holder's own runs
        holder.communicate()
    with lock_run_folder(folder):  # the system dropped the dead holder's lock
        assert (folder / "writer.lock").read_text() == f"{os.getpid()}\n"
    with lock_run_folder(folder):  # and the block's end releases it
        assert isinstance(RunFolderBusy(""), OSError)  # the command line reports it in one line


@pytest.fixture(scope="module")
def raced(tmp_path_factory) -> tuple[Path, list[subprocess.Popen], list[str], list[float]]:
    """Two `train` commands started together on one folder, the tiny preset as it is (its
    token budget; 4 steps, a checkpoint every 2): the folder, both processes, their stderr
    and the seconds each took."""
    out = tmp_path_factory.mktemp("raced") / "run"
    command = [sys.executable, "-m", "transformer", "train", "--preset", "tiny", "--out", str(out)]
    command += ["--max-steps", "4", "--log-every", "1", "--eval-every", "1000", "--save-every", "2"]
    started = time.perf_counter()
    pipes = dict(stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    processes = [subprocess.Popen(command, **pipes) for _ in range(2)]
    stderr, seconds = [None, None], [0.0, 0.0]
    while None in stderr:
        for i, process in enumerate(processes):
            if stderr[i] is None and process.poll() is not None:
                seconds[i] = time.perf_counter() - started
                stderr[i] = process.communicate()[1]
        time.sleep(0.05)
    return out, processes, stderr, seconds


def test_two_trains_started_together_on_one_folder_only_one_writes(raced):
    out, processes, stderr, seconds = raced
    codes = [p.returncode for p in processes]
    assert sorted(codes) == [0, 1], stderr
    winner, loser = codes.index(0), codes.index(1)
    assert seconds[loser] < seconds[winner]  # refused at once, not after the other's run
    holder = f"{out} is being written by another process (PID {processes[winner].pid})"
    assert holder in stderr[loser] and "Traceback" not in stderr[loser], stderr[loser]
    assert [r["step"] for r in records(out)] == [1, 2, 3, 4]  # each step once
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest.pt",
        "step_0000002.pt",
        "step_0000004.pt",
    ]


def test_a_checkpoint_that_holds_the_presets_nones_resumes_exactly(raced, tmp_path):
    """Checkpoints stored None for a preset's values before TrainConfig.resolved, so a resume
    resolves the checkpoint's configuration too. Here step 2 of the raced run, made old, is
    resumed to step 4 in this process: the same records and weights."""
    out = tmp_path / "old"
    shutil.copytree(raced[0], out)
    old = load_checkpoint(out / "checkpoints/step_0000002.pt")
    assert old["train_config"]["token_budget"] == PRESETS["tiny"].token_budget  # resolved
    old["train_config"] |= dict.fromkeys(BY_PRESET)  # as older versions wrote it
    (out / "checkpoints/step_0000004.pt").unlink()
    save_checkpoint(old, out / "checkpoints/latest.pt")
    cfg = TrainConfig(
        preset="tiny", max_steps=4, log_every=1, eval_every=1000, save_every=2, out=str(out)
    )
    assert train(dataclasses.replace(cfg, resume=True))["step"] == 4
    new = load_checkpoint(out / "checkpoints/latest.pt")
    assert new["train_config"] == dataclasses.asdict(cfg.resolved()) | {"resume": True}
    a, b = records(raced[0]), records(out)
    assert [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b]
    weights = load_checkpoint(raced[0] / "checkpoints/latest.pt")["model"]
    assert all(torch.equal(weights[k], new["model"][k]) for k in weights)


def test_the_loop_reads_device_values_only_at_log_points(tmp_path):
    cfg = tiny(tmp_path, "quiet", max_steps=40, log_every=20, eval_every=40, save_every=40)
    with host_reads() as reads:
        train(cfg)
    per_site = dict(reads)
    # at steps 20 and 40 the loop reads its LogSums once; evaluation reads its sums once;
    # building the batches checks the ids once per bucket; nothing else, whatever the step count
    loop = {k: v for k, v in per_site.items() if not k.startswith("check_token_ids")}
    assert loop == {"read: tolist": 2, "evaluate_loss: tolist": 1}, per_site


def fake_clock(monkeypatch, seconds_per_step: float) -> None:
    """loop's time.perf_counter advances by `seconds_per_step` at each train_step, else not."""
    now, real_step = [0.0], training_loop.train_step

    def step(*args, **kwargs):
        now[0] += seconds_per_step
        return real_step(*args, **kwargs)

    monkeypatch.setattr(training_loop.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(training_loop, "train_step", step)


def test_max_seconds_stops_at_the_first_log_point_past_it(tmp_path, monkeypatch):
    fake_clock(monkeypatch, 0.5)
    cfg = tiny(tmp_path, "boxed", max_steps=1000, max_seconds=3.2, log_every=2, save_every=1000)
    summary = train(cfg)
    assert summary["step"] == 8 and summary["wall_s"] == 4.0  # 3.0 s at step 6, 4.0 s at 8
    assert [r["step"] for r in records(cfg.out)] == [2, 4, 6, 8]
    assert "val_loss" in records(cfg.out)[-1]  # the end of a run: validated and saved
    assert load_checkpoint(f"{cfg.out}/checkpoints/latest.pt")["step"] == 8


def test_the_wall_clock_counts_from_the_process_start_given(tmp_path, monkeypatch):
    fake_clock(monkeypatch, 0.5)
    cfg = tiny(tmp_path, "late", max_steps=1000, max_seconds=50, log_every=2, save_every=1000)
    summary = train(cfg, started=-100.0)  # the process started 100 s before the clock's 0
    assert summary["step"] == 2 and summary["wall_s"] == 101.0


def test_tokens_per_second_counts_the_steps_of_the_window_only(tmp_path, monkeypatch):
    """A fake clock: each training step takes 0.5 s, each evaluation 100 s. The rate must be the
    window's target tokens over its steps' time, with evaluation and saving left out."""
    now = [0.0]
    real_step, real_eval = training_loop.train_step, training_loop.evaluate_loss

    def step(*args, **kwargs):
        now[0] += 0.5
        return real_step(*args, **kwargs)

    def evaluate(*args, **kwargs):
        now[0] += 100.0
        return real_eval(*args, **kwargs)

    monkeypatch.setattr(training_loop.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(training_loop, "train_step", step)
    monkeypatch.setattr(training_loop, "evaluate_loss", evaluate)
    cfg = tiny(tmp_path, "clock", max_steps=12, log_every=4, eval_every=6, save_every=3)
    train(cfg)
    logged = [r for r in records(cfg.out) if "loss" in r]
    assert [r["step"] for r in logged] == [4, 8, 12]
    for r in logged:
        assert 0 < r["target_tokens"] <= 4 * 300
        assert r["tokens_per_s"] == pytest.approx(r["target_tokens"] / 2.0, abs=0.1)
    assert [r["step"] for r in records(cfg.out) if "val_loss" in r] == [6, 12]
