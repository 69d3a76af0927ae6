import io
import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import asdict, fields, replace
from pathlib import Path

import pytest
import torch

from transformer import evaluation, reports, results
from transformer.arguments import decoding_of
from transformer.checkpoints import lock_run_folder
from transformer.cli import build_parser, main
from transformer.config import TrainConfig, train_argv
from transformer.decoding import Decoding
from transformer.devices import choose_autocast
from transformer.pretrained import load_pretrained, read_manifest
from transformer.results import load_results, missing_keys, train_command
from transformer.search import read_grid, read_trials


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
        (["train"], "set max_steps, epochs or max_seconds"),
        (["train", "--max-seconds", "0"], "--max-seconds: must be > 0, got 0.0"),
        (["train", "--epochs", "1", "--attention-dropout", "1"], "must be >= 0 and < 1"),
        (["train", "--epochs", "1", "--vocab-size", "10"], "--vocab-size: must be >= 100"),
        (["search"], "the following arguments are required: grid, --out"),
        (["train", "--max-steps", "5", "--device", "gpu"], "'gpu' is not a device"),
        (["train", "--max-steps", "5", "--cuda-graphs"], "cuda_graphs works through torch.compile"),
        (["translate", "--checkpoint", "x", "--beam-size", "0"], "--beam-size: must be >= 1"),
        (["evaluate", "--checkpoint", "x", "--split", "dev"], "invalid choice: 'dev'"),
        (["record", "run"], "the following arguments are required: --out"),
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
                 "--save-every", "--keep", "--amp", "--compile", "--cuda-graphs"):  # fmt: skip
        assert flag in text
    for f in fields(TrainConfig):  # a new TrainConfig field gets its flag and its help
        flag = f"--{f.name.replace('_', '-')}"
        assert flag in text and f.metadata["help"].split()[0] in text, f.name
    assert "train" in build_parser().format_help()


def test_a_run_without_its_corpus_stops_in_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys
):
    """MULTI30K_DIR is an empty folder: train stops with the loader's error, in one line, and
    leaves no run folder, no folder above it that it made, and no lock; a folder that was there
    keeps what it held, and gets nothing more."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("MULTI30K_DIR", str(empty))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for out in (tmp_path / "runs" / "run", mine):
        assert main(["train", "--max-steps", "2", "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert err == (
            f"python -m transformer train: error: {empty / 'train.en.gz'} does not exist; "
            f"MULTI30K_DIR={empty} must hold train.en.gz\n"
        )
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert left == ["empty", "mine", "mine/notes.txt"]


# every TrainConfig field away from its default, and valid together
EVERY_FIELD_CHANGED = dict(
    src="fr", tgt="cs", preset="small", d_model=96, n_heads=3, d_ff=200, n_layers=5,
    vocab_size=4000, max_steps=7, epochs=3, max_seconds=110.5, seed=11, out="elsewhere",
    resume=True, device="cpu", token_budget=700, warmup=30, lr_factor=0.35,
    label_smoothing=0.2, dropout=0.3, attention_dropout=0.0, activation_dropout=0.15, clip=0.5,
    amp="off", compile=True, cuda_graphs=True, log_every=3, eval_every=9, save_every=4, keep=2,
)  # fmt: skip


@pytest.mark.parametrize("name", [f.name for f in fields(TrainConfig)])
def test_train_argv_and_the_parser_round_trip_every_field(name):
    """train_argv writes a field changed on its own as flags that the train parser reads back
    into the same TrainConfig; and every field is changed by some case here."""
    assert set(EVERY_FIELD_CHANGED) == {f.name for f in fields(TrainConfig)}
    default = TrainConfig(max_steps=1)
    changes = {name: EVERY_FIELD_CHANGED[name]}
    changes |= {"compile": True} if name == "cuda_graphs" else {}  # cuda_graphs needs compile
    changes |= {"tgt": "en"} if name == "src" else {"src": "de"} if name == "tgt" else {}
    cfg = replace(default, **changes)
    assert getattr(cfg, name) != getattr(default, name)
    for config in (cfg, TrainConfig(**EVERY_FIELD_CHANGED)):
        args = build_parser().parse_args(["train", *train_argv(config)])
        assert (
            TrainConfig(**{f.name: getattr(args, f.name, f.default) for f in fields(TrainConfig)})
            == config
        )


def test_a_records_train_command_starts_the_run_afresh():
    cfg = asdict(TrainConfig(**EVERY_FIELD_CHANGED))
    command = train_command(cfg)
    assert command.startswith("python -m transformer train --src fr --tgt cs --preset small")
    assert "--resume" not in command and "--amp off --compile --cuda-graphs" in command


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny run of 10 steps with a checkpoint every 2 (5 kept), through the real command."""
    run = tmp_path_factory.mktemp("tiny") / "run"
    argv = ["train", "--max-steps", "10", "--save-every", "2", "--eval-every", "10", "--out"]
    assert main([*argv, str(run)]) == 0
    return run


def test_translate_keeps_empty_lines_and_warns_on_long_input(
    tiny_run, capsys, monkeypatch, beam_alphas
):
    long_line = "a dog " * 200  # longer than max_len=256 pieces
    monkeypatch.setattr("sys.stdin", io.StringIO(f"A man rides a bike.\n\n{long_line}\n"))
    # the empty line has no sentence: two sentences are translated
    with pytest.warns(UserWarning, match="1 of 2 sentences are longer than the model's max_len"):
        assert main(["translate", "--checkpoint", str(tiny_run), "--beam-size", "2"]) == 0
    out, err = capsys.readouterr()
    lines = out.split("\n")
    assert len(lines) == 4 and lines[0] and lines[1] == "" and lines[3] == ""
    assert "does not look like an image caption" not in err  # a checkpoint has no check
    assert beam_alphas == [0.6]  # no --alpha: the paper's


def stdin_of(data: bytes) -> io.TextIOWrapper:
    """Standard input holding `data`, opened as Python opens it in a UTF-8 locale (strict)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


def test_translate_refuses_text_that_is_not_utf8_naming_its_line(monkeypatch, capsys):
    """A byte that is not UTF-8, on standard input or in an argument (which Python keeps as a
    lone surrogate), is a one-line error naming the line, the byte and the fix; nothing is
    translated."""
    fix = "convert the text first, e.g. with iconv -f latin1 -t utf-8"
    monkeypatch.setattr("sys.stdin", stdin_of(b"A dog runs.\n\ncaf\xe9 au lait\n"))
    assert main(["translate", "--model", "en-de"]) == 1
    assert capsys.readouterr() == (
        "",
        "python -m transformer translate: error: line 3 of standard input is not UTF-8 "
        f"(byte 0xe9 at character 4); {fix}\n",
    )
    assert main(["translate", "--model", "en-de", "A dog runs.", "caf\udce9"]) == 1
    assert capsys.readouterr() == (
        "",
        "python -m transformer translate: error: argument 2 is not UTF-8 (byte 0xe9 at "
        f"character 4); {fix}\n",
    )


def test_translate_from_a_shell_gets_bytes_that_are_not_utf8_without_a_traceback():
    """The command as a user types it: `printf 'caf\\xe9\\n' | python -m transformer ...`."""
    done = subprocess.run(
        [sys.executable, "-m", "transformer", "translate", "--model", "en-de"],
        input=b"caf\xe9\n",
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 1 and not done.stdout
    err = done.stderr.decode()
    assert err.startswith("python -m transformer translate: error: line 1 of standard input")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("blank", ["", "   ", "\t \n"])
def test_translate_says_there_is_nothing_to_translate(blank, monkeypatch, capsys):
    """A blank argument, or an input with no text, is an error on stderr with exit status 1,
    in the page's words; a blank line among others gives an empty line, keeping the lines
    aligned."""
    assert main(["translate", "--model", "en-de", "A dog runs.", blank]) == 1
    assert capsys.readouterr() == (
        "",
        "python -m transformer translate: error: there is nothing to translate: argument 2 "
        "is empty or only spaces\n",
    )
    monkeypatch.setattr("sys.stdin", stdin_of(blank.encode()))
    assert main(["translate", "--model", "en-de"]) == 1
    out, err = capsys.readouterr()
    assert not out and err.endswith(
        "there is nothing to translate: standard input is empty or only spaces\n"
    )
    monkeypatch.setattr("sys.stdin", stdin_of(f"A dog runs.\n{blank}\nA cat.\n".encode()))
    assert main(["translate", "--model", "en-de"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 + blank.count("\n") and out[0] and out[-1]
    assert not any(out[1:-1])


def test_translate_on_a_terminal_says_how_to_end_the_input(monkeypatch, capsys):
    """Without arguments translate reads standard input to its end: on a terminal it first
    says so on stderr (a pipe or a file gets no such line)."""

    class Terminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal(io.BytesIO(b"A dog runs.\n"), encoding="utf-8"))
    assert main(["translate", "--model", "en-de"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1
    assert err == "type the texts, one a line, then Ctrl-D to translate them\n"
    monkeypatch.setattr("sys.stdin", stdin_of(b"A dog runs.\n"))
    assert main(["translate", "--model", "en-de"]) == 0
    assert capsys.readouterr().err == ""


def test_trained_on_picks_a_shipped_model_and_refuses_one_not_shipped(capsys):
    """translate --model DIRECTION --trained-on KIND uses that kind's model; a kind not shipped,
    or --trained-on without --model, is an error that says so."""
    sentence = "A dog runs."
    shipped = read_manifest()["en-de"]
    for kind in ("cpu", "gpu"):
        status = main(["translate", "--model", "en-de", "--trained-on", kind, sentence])
        out, err = capsys.readouterr()
        if kind in shipped:
            assert status == 0, err
            assert out == load_pretrained("en-de", trained_on=kind).translate([sentence])[0] + "\n"
        else:
            assert status == 1
            assert f"no {kind}-trained model shipped for 'en-de'" in err
    assert main(["translate", "--checkpoint", "run", "--trained-on", "cpu", sentence]) == 1
    assert "--trained-on picks a shipped model: add --model" in capsys.readouterr().err
    assert "invalid choice: 'tpu'" in error_of(
        ["translate", "--model", "en-de", "--trained-on", "tpu"], capsys
    )


def test_evaluate_prints_both_bleu_and_writes_translations(tiny_run, tmp_path, capsys):
    hyps = tmp_path / "val.hyp.txt"
    argv = ["evaluate", "--checkpoint", str(tiny_run), "--split", "val", "--beam-size", "1"]
    assert main([*argv, "--average", "5", "--hypotheses", str(hyps)]) == 0
    out = capsys.readouterr().out
    assert "case:mixed|eff:no|tok:13a" in out and "case:lc|eff:no|tok:13a" in out
    assert len(hyps.read_text().splitlines()) == 1014


def test_the_decoding_flags_are_the_fields_of_decoding():
    """One value, one spelling: --average, --beam-size and --alpha fill a Decoding, field by
    field, for every command that decodes; a flag not given keeps the base decoding's value."""
    for command in (["translate", "--model", "en-de"], ["record", "run", "--out", "x"]):
        args = build_parser().parse_args([*command, "--average", "3", "--beam-size", "2"])
        assert decoding_of(args) == Decoding(average=3, beam_size=2)
    names = {f.name for f in fields(Decoding)}
    assert names == {"average", "beam_size", "alpha"}
    ship = build_parser().parse_args(["ship", "run", "--alpha", "1.5"])
    assert decoding_of(ship) == Decoding(alpha=1.5)
    shipped = Decoding(average=5, beam_size=4, alpha=1.0)
    assert decoding_of(ship, shipped) == replace(shipped, alpha=1.5)
    for command in (["record", "run", "--out", "x"], ["ship", "run"]):
        assert decoding_of(build_parser().parse_args(command)) == Decoding()
    for command in (["translate", "--model", "en-de"], ["evaluate", "--model", "de-en"]):
        assert decoding_of(build_parser().parse_args(command), shipped) == shipped


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
def test_translate_model_decodes_as_python_does(direction, monkeypatch, capsys):
    """translate --model decodes as the manifest says, as load_pretrained(d).translate does:
    200 test2016 sentences through standard input, compared line by line."""
    src, tgt = direction.split("-")
    sources = [s for s, _ in evaluation.load_multi30k("test_2016_flickr", src, tgt)[:200]]
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(s + "\n" for s in sources)))
    assert main(["translate", "--model", direction]) == 0
    out, err = capsys.readouterr()
    python = load_pretrained(direction).translate(sources)
    cli = out.splitlines()
    assert len(cli) == 200
    differ = [i for i, (a, b) in enumerate(zip(cli, python, strict=True)) if a != b]
    assert not differ, f"{len(differ)} of 200 differ, first: {cli[differ[0]]!r}"
    assert "decoding with" not in err


def test_an_explicit_decoding_flag_overrides_the_manifest_and_says_so(capsys, beam_alphas):
    shipped = load_pretrained("en-de").decoding
    assert main(["translate", "--model", "en-de", "--alpha", "0.2", "A dog runs."]) == 0
    err = capsys.readouterr().err
    assert beam_alphas == [0.2]
    assert f"decoding with {replace(shipped, alpha=0.2)}, not the shipped model's" in err
    assert main(["translate", "--model", "en-de", "--average", "2", "A dog."]) == 1
    assert "--average needs --checkpoint" in capsys.readouterr().err


def test_translate_model_warns_on_stderr_of_each_line_unlike_the_captions(monkeypatch, capsys):
    """One warning line per flagged input line, naming the line, its caption cost and the
    manifest's threshold; captions and empty lines pass, and stdout keeps a line per input."""
    lines = ["A dog runs in the snow.", "How do I reset my password?", "", "Ich liebe dich."]
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(s + "\n" for s in lines)))
    assert main(["translate", "--model", "en-de"]) == 0
    out, err = capsys.readouterr()
    assert len(out.split("\n")) == 5 and out.split("\n")[2] == ""
    shipped = load_pretrained("en-de")
    check = shipped.domain
    assert check.threshold == read_manifest()["en-de"]["cpu"]["domain"]["threshold"]
    expected = [
        f"python -m transformer translate: warning: line {n} does not look like an image "
        f"caption (caption cost {check.cost(lines[n - 1]):.2f} > {check.threshold:.2f}): "
        "expect a poor translation"
        for n in (2, 4)
    ]
    assert err.splitlines() == expected
    assert shipped.out_of_domain(lines) == [False, True, False, True]


def test_translate_model_names_the_other_direction_for_a_caption_in_the_target_language(
    monkeypatch, capsys
):
    """German captions given to the English→German model: the warning names the model to use,
    --model de-en, instead of calling them unlike captions; English captions pass."""
    lines = ["Zwei Hunde spielen im Schnee.", "A dog runs in the snow.", "Ein Mann fährt Fahrrad."]
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(s + "\n" for s in lines)))
    assert main(["translate", "--model", "en-de"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert err.splitlines() == [
        f"python -m transformer translate: warning: line {n} looks like German: translate it "
        "with --model de-en"
        for n in (1, 3)
    ]


def test_translate_model_gives_one_line_for_a_paragraph_of_300_words(monkeypatch, capsys):
    """The 300-word paragraph of test_pretrained: its 27 sentences translated in one call, one
    output line, their translations joined by spaces in order."""
    from test_pretrained import PARAGRAPH

    from transformer import pretrained
    from transformer.sentences import split_sentences

    calls, real = [], pretrained.translate

    def spy(model, tokenizer, sentences, decoding):
        calls.append((list(sentences), real(model, tokenizer, sentences, decoding)))
        return calls[-1][1]

    monkeypatch.setattr(pretrained, "translate", spy)
    monkeypatch.setattr("sys.stdin", io.StringIO(PARAGRAPH + "\nA dog runs.\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no sentence is truncated
        assert main(["translate", "--model", "en-de"]) == 0
    out, err = capsys.readouterr()
    (sentences, translations), *_ = calls
    assert len(calls) == 1 and sentences == [*split_sentences(PARAGRAPH), "A dog runs."]
    assert out.splitlines() == [" ".join(translations[:27]), translations[27]]
    assert all(translations) and not err  # the paragraph reads like captions


@pytest.mark.parametrize("device", ["cuda", "cuda:3", "mps"])
def test_a_device_this_machine_lacks_is_a_one_line_error(device, tmp_path, capsys):
    """--device names a device the machine does not have: argparse refuses it, naming the
    devices there are, before anything is loaded or written (no run folder, no lock)."""
    from transformer.devices import available_devices

    if device in available_devices():
        pytest.skip(f"this machine has {device}")
    run = tmp_path / "run"
    for argv in (
        ["train", "--max-steps", "2", "--out", str(run), "--device", device],
        ["translate", "--model", "en-de", "--device", device, "A dog."],
    ):
        err = error_of(argv, capsys)
        *usage, line = err.strip().splitlines()
        assert f"--device: no {device} device on this machine; it has " in line
        assert str(available_devices()) in line and "Traceback" not in err
    assert not run.exists()


def test_alpha_reaches_beam_search(tiny_run, tmp_path, monkeypatch, beam_alphas):
    """--alpha is the length penalty of the beam searches that translate and evaluate run."""
    load = evaluation.load_multi30k
    monkeypatch.setattr(evaluation, "load_multi30k", lambda *args: load(*args)[:4])  # quick
    argv = ["--checkpoint", str(tiny_run), "--beam-size", "2", "--alpha"]
    assert main(["translate", *argv, "1.3", "A dog runs."]) == 0
    hyps = tmp_path / "val.hyp.txt"
    assert main(["evaluate", *argv, "0", "--split", "val", "--hypotheses", str(hyps)]) == 0
    assert beam_alphas == [1.3, 0.0]
    assert len(hyps.read_text().splitlines()) == 4


def test_record_writes_a_complete_result(tiny_run, tmp_path, capsys, beam_alphas):
    out = tmp_path / "results" / "en-de.json"
    argv = ["record", str(tiny_run), "--out", str(out), "--max-sentences", "8", "--beam-size", "2"]
    assert main([*argv, "--alpha", "0.9"]) == 0
    assert beam_alphas == [0.9, 0.9]  # val, then test_2016_flickr
    (result,) = load_results(out.parent)
    assert not missing_keys(result)
    assert result["direction"] == "en-de" and result["steps"] == 10
    dtype, why = choose_autocast(torch.device("cpu"), "auto")  # the run's choice, kept
    assert result["autocast"] == {"dtype": "bfloat16" if dtype else "float32", "why": why}
    assert result["config"]["decoding"] == {
        "average": 5,
        "beam_size": 2,
        "alpha": 0.9,
        "max_sentences": 8,
    }
    assert result["curves"]["val_step"] == [10]
    assert set(result["runaway"]) == {"val", "test_2016_flickr"}
    for split in result["runaway"].values():
        assert 0 <= split["share"] <= 1 and len(split["examples"]) <= 4
        assert all(set(e) == {"source", "hypothesis"} for e in split["examples"])
    assert result["command"].startswith("python -m transformer train --src en --tgt de")
    assert "&& python -m transformer record" in result["command"]
    assert len(result["samples"]) == 8  # ten asked for, but only eight sentences were scored
    assert len(result["attention"]) == 12  # scoring.ATTENTION_SENTENCES
    assert [a["source"][:3] for a in result["attention"][:3]] == [
        ["▁A", "▁guy", "▁works"],  # short
        ["▁A", "▁little", "▁girl"],  # "her" must find the girl
        ["▁A", "▁woman", "▁in"],  # the longest
    ]
    for a in result["attention"]:  # the tiny preset: 2 layers of 4 heads
        S, T = len(a["source"]), len(a["output"])
        assert torch.tensor(a["encoder"]).shape == (2, 4, S, S)
        assert torch.tensor(a["decoder"]).shape == (2, 4, T, T)
        assert torch.tensor(a["cross"]).shape == (2, 4, T, S)


def test_record_refuses_too_few_checkpoints_and_bad_results(tiny_run, tmp_path, capsys):
    assert main(["record", str(tiny_run), "--out", str(tmp_path / "r.json"), "--average", "6"]) == 1
    assert "keeps 5 step checkpoints, fewer than the 6" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps({"direction": "en-de"}))
    with pytest.raises(ValueError, match="bad.json is not a recorded run: it lacks device"):
        load_results(tmp_path)


def test_ship_stores_a_translator_beside_the_other_kind_and_drops_files_no_model_names(
    tiny_run, tmp_path, capsys
):
    """The tiny run (a CPU run) ships into a folder whose manifest holds a GPU-trained en-de
    model: both stay, the GPU one's files too, and both get the English words file of the
    in-domain check; files that no model names go."""
    out = tmp_path / "weights"
    out.mkdir()
    gpu_files = {"weights": "en-de-gpu.safetensors", "tokenizer": "gpu-bpe8000.model"}
    gpu = gpu_files | {"trained_on": "NVIDIA H100 80GB HBM3", "check": {"bleu_lc": -1.0}}
    (out / "manifest.json").write_text(json.dumps({"en-de": {"gpu": gpu}}))
    earlier = {"de-en.safetensors", "old-bpe8000.model", "words.de.tsv", "notes.txt"}
    earlier |= set(gpu_files.values())
    for name in earlier:
        (out / name).write_text("an earlier ship's file")
    argv = ["ship", str(tiny_run), "--out", str(out), "--average", "3", "--beam-size", "1"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("en-de-cpu.safetensors: ")
    models = read_manifest(out)["en-de"]
    entry = models["cpu"]
    assert entry["domain"]["words"] == "words.en.tsv"
    assert sorted(models) == ["cpu", "gpu"] and models["gpu"] == gpu | {"domain": entry["domain"]}
    assert entry["decoding"] == asdict(Decoding(average=3, beam_size=1))
    assert entry["domain"] == read_manifest()["en-de"]["cpu"]["domain"]  # as the package's
    written = {entry["weights"], entry["tokenizer"], "words.en.tsv", "manifest.json"}
    # the old weights and vocabulary are gone; the GPU model's files and other files stay
    assert {p.name for p in out.iterdir()} == written | {"notes.txt", *gpu_files.values()}
    new_file = tmp_path / "new"
    new_file.touch()
    assert {(out / name).stat().st_mode for name in written} == {new_file.stat().st_mode}
    shipped = load_pretrained("en-de", root=out)  # the better check: the CPU model here
    assert shipped.decoding == Decoding(average=3, beam_size=1)
    assert shipped.check_bleu() == entry["check"]["bleu_lc"]
    assert shipped.out_of_domain(["A dog runs.", "How do I reset my password?"]) == [False, True]


# python -m transformer as __main__ runs it, then the names of the threads the process has left
MAIN_THEN_THREADS = """
import os, sys, time
STARTED = time.perf_counter()
from transformer.cli import main
status = main(sys.argv[1:], started=STARTED)
tasks = "/proc/self/task"
names = [open(f"{tasks}/{t}/comm").read().strip() for t in sorted(os.listdir(tasks))]
print("threads left:", *names)
sys.exit(status)
"""


def test_torchrun_ranks_stop_together_at_max_seconds(tmp_path):
    """Rank 0's clock decides: both processes stop at the first log point past max_seconds
    (here the first, as loading alone takes longer than 0.5 s) and rank 0 saves. When main
    returns, neither process has a thread of the process group left (gloo's), which could
    still be freeing a tensor while the interpreter shuts down: once, in CI, rank 1 aborted
    so ("terminate called without an active exception")."""
    out = tmp_path / "ddp-boxed"
    script = tmp_path / "main.py"
    script.write_text(MAIN_THEN_THREADS)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(script), "train", "--preset", "tiny", "--max-steps", "1000"]
    command += ["--max-seconds", "0.5", "--device", "cpu", "--token-budget", "300"]
    command += ["--log-every", "3", "--out", str(out)]
    env = os.environ | {"TQDM_DISABLE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and summaries[0]["step"] == 3 and summaries[0]["wall_s"] >= 0.5
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest.pt",
        "step_0000003.pt",
    ]
    left = [line for line in done.stdout.splitlines() if line.startswith("threads left:")]
    assert len(left) == 2 and not any("gloo" in line for line in left), left


def write_grid(path, trials: dict, decoding: list[dict], **base) -> str:
    base = {"preset": "tiny", "max_steps": 4, "save_every": 2, "eval_every": 4} | base
    path.write_text(json.dumps({"base": base, "trials": trials, "decoding": decoding}))
    return str(path)


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"trials": {"a": {"lr": 1}}}, "trial 'a': .*unexpected keyword argument 'lr'"),
        ({"trials": {"b": {"dropout": 2}}}, "trial 'b': invalid TrainConfig: dropout must be"),
        ({"trials": {}, "decoding": [{"beam_size": 0}]}, "beam_size must be a positive integer"),
        (
            {"trials": {}, "decoding": [{"beam": 4}]},
            "decoding .*unexpected keyword argument 'beam'",
        ),
        ({"trials": {}, "decoding": [{"alpha": -1}]}, "alpha, the length penalty exponent, must"),
        ({"trial": {}}, "a grid is an object with trials"),
    ],
)
def test_a_bad_grid_is_refused_before_anything_trains(tmp_path, grid, message):
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"base": {"max_steps": 4}} | grid))
    with pytest.raises(ValueError, match=message):
        read_grid(path, tmp_path / "runs")


def test_the_grids_are_valid(tmp_path):
    grids = sorted((Path(__file__).parents[1] / "benchmarks/grids").glob("*.json"))
    # gpu.json (the GPU session's recipe), search.json (GPU trials), toy.json, cpu.json
    assert len(grids) >= 4
    for path in grids:
        configs, changes, decodings = read_grid(path, tmp_path)
        assert configs and set(configs) == set(changes) and decodings


def test_the_gpu_recipe_trains_both_directions_within_the_goal(tmp_path):
    """gpu_session.sh all trains the trials en-de and de-en of gpu.json, each stopped early
    enough for the last validation and checkpoint to end within the goal's seconds (GOALS),
    and decodes each with the best on val of the grid's settings, which recipe.py --choices
    gives choose_decoding.py as a product: so they must be one."""
    root = Path(__file__).parents[1]
    configs, _, decodings = read_grid(root / "benchmarks/grids/gpu.json", tmp_path)
    assert {name: (c.src, c.tgt) for name, c in configs.items()} == {
        "en-de": ("en", "de"),
        "de-en": ("de", "en"),
    }
    values = [{getattr(d, name) for d in decodings} for name in ("average", "beam_size", "alpha")]
    assert len(set(decodings)) == len(decodings) == math.prod(len(v) for v in values)
    _, seconds = reports.GOALS["gpu"]
    assert all(c.max_seconds <= seconds - 10 and c.device == "cuda" for c in configs.values())


def test_the_cpu_grid_names_what_its_records_ran(tmp_path):
    """Each trial of the CPU search, resolved, is the configuration that its records in
    results/ trained: the grid says what ran (all but the preset's name and the folder)."""
    root = Path(__file__).parents[1]
    configs, _, _ = read_grid(root / "benchmarks/grids/cpu.json", tmp_path)
    records = read_trials(root / "results/cpu-trials.jsonl")
    assert {r["trial"] for r in records} == set(configs)
    unnamed = {"preset": None, "out": None}
    for r in records:
        ran = asdict(TrainConfig(**r["train"]).resolved()) | unnamed
        assert asdict(configs[r["trial"]].resolved()) | unnamed == ran, r["trial"]


def test_search_records_every_trial_and_resumes(tmp_path, capsys, monkeypatch):
    grid = write_grid(
        tmp_path / "grid.json",
        trials={
            "tiny": {},
            "one-layer-1k": {"n_layers": 1, "vocab_size": 1000},
            "bad": {"token_budget": 5},
        },
        decoding=[{"average": 2, "beam_size": 1}, {"average": 3}],
    )
    out, runs = tmp_path / "trials.jsonl", tmp_path / "runs"
    argv = ["search", grid, "--out", str(out), "--runs", str(runs), "--max-sentences", "4"]
    load, asked = evaluation.load_multi30k, []  # the pairs that scoring translates
    monkeypatch.setattr(evaluation, "load_multi30k", lambda *a: asked.append(a) or load(*a))
    assert main(argv) == 0
    # the two trials that trained, scored on val only: the search tunes on it, never on a test set
    assert asked == [("val", "en", "de")] * 2
    trials = read_trials(out)
    assert [(t["trial"], "failed" in t) for t in trials] == [
        ("tiny", False),
        ("tiny", True),  # three checkpoints to average, two kept
        ("one-layer-1k", False),
        ("one-layer-1k", True),
        ("bad", True),
    ]
    tiny, _, small, _, bad = trials
    assert tiny["val"]["signature_lc"].startswith("nrefs:1|case:lc")
    assert tiny["steps"] == 4 and tiny["decoding"] == {"average": 2, "beam_size": 1, "alpha": 0.6}
    assert 0 < tiny["train_wall_seconds"] <= tiny["process_seconds"]
    assert small["model"]["n_layers"] == 1 and small["model"]["src_vocab_size"] == 1000
    assert small["changes"] == {"n_layers": 1, "vocab_size": 1000}
    assert "token_budget=5 is below the longest padded example" in bad["failed"]
    assert tiny["command"].startswith("python -m transformer search") and "commit" in tiny
    assert "fewer than the 3 to average" in capsys.readouterr().out
    assert main(argv) == 0  # every trial is in the file: nothing runs again
    assert read_trials(out) == trials


def test_a_second_search_into_one_runs_folder_is_refused_at_once(tmp_path, capsys):
    """A search holds its runs folder's lock: here this process holds it, through another
    open file, so the search must stop before it trains, removes or records anything."""
    grid = write_grid(tmp_path / "grid.json", trials={"tiny": {}}, decoding=[{}])
    out, runs = tmp_path / "trials.jsonl", tmp_path / "runs"
    (runs / "tiny").mkdir(parents=True)  # a trial folder the first search is training
    with lock_run_folder(runs):
        assert main(["search", grid, "--out", str(out), "--runs", str(runs)]) == 1
    busy = f"{runs} is being written by another process (PID {os.getpid()})"
    assert busy in capsys.readouterr().err
    assert (runs / "tiny").is_dir() and not out.exists()


def test_provenance_without_git_reads_what_pack_noted(monkeypatch):
    def no_git(*args, **kwargs):
        raise OSError("no git here")

    monkeypatch.setattr(results.subprocess, "run", no_git)
    monkeypatch.delenv("TRANSFORMER_COMMIT", raising=False)
    monkeypatch.delenv("TRANSFORMER_DIRTY", raising=False)
    unknown = results.provenance(["x"])
    assert unknown["commit"] == "unknown" and unknown["dirty"] is True
    monkeypatch.setenv("TRANSFORMER_COMMIT", "abc123")
    monkeypatch.setenv("TRANSFORMER_DIRTY", "0")
    noted = results.provenance(["python -m transformer", "record"])
    assert noted["commit"] == "abc123" and noted["dirty"] is False
    assert noted["command"] == "python -m transformer record"


def test_a_copy_inside_another_repository_records_the_packed_commit(tmp_path):
    """The first GPU run's tree sat inside another git repository, and its records named
    that repository's commit. A copy of the package there must record the commit that
    `pack` noted, and without one, "unknown": never the other repository's."""
    outer = tmp_path / "other-project"
    copy = outer / "copy" / "src"
    shutil.copytree(Path(results.__file__).parent, copy / "transformer")
    git = ["git", "-c", "user.name=x", "-c", "user.email=x@x", "-C", str(outer)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "another project"], check=True)
    show = "from transformer.results import provenance as p; print(*p([]).values())"

    def provenance_there(**noted: str) -> list[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMER_")}
        env |= {"PYTHONPATH": str(copy), **noted}
        done = subprocess.run(
            [sys.executable, "-c", show], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.split()[1:]  # commit, dirty (after torch's version)

    packed = "375c48031204044246358195bbfb80bdc11e5aeb"
    assert provenance_there(TRANSFORMER_COMMIT=packed, TRANSFORMER_DIRTY="0") == [packed, "False"]
    assert provenance_there() == ["unknown", "True"]
