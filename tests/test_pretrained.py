"""The translators shipped in the package (transformer/weights, written by `ship`): they load
from their checked files, translate deterministically, keep the BLEU that ship measured, refuse
damaged files, and travel with a pip install."""

import json
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from transformer.explorer import explore
from transformer.model import Transformer, TransformerConfig
from transformer.pretrained import (
    MANIFEST,
    WEIGHTS,
    load_pretrained,
    pack_weights,
    read_manifest,
    shipped_entry,
    unpack_weights,
)
from transformer.results import load_results
from transformer.scoring import attention_record, runaways

DIRECTIONS = ("de-en", "en-de")


@pytest.fixture(scope="module", params=DIRECTIONS)
def shipped(request):
    return load_pretrained(request.param)


def test_every_direction_is_shipped_small_with_its_files():
    manifest = read_manifest()
    assert sorted(manifest) == sorted(DIRECTIONS)
    for direction, models in manifest.items():
        assert "cpu" in models, direction  # the CPU translator stays beside any GPU one
        for kind, entry in models.items():
            files = [WEIGHTS / entry["weights"], WEIGHTS / entry["tokenizer"]]
            assert sum(f.stat().st_size for f in files) <= 8_000_000, direction
            assert entry["trained_on"].startswith("cpu") == (kind == "cpu")


def test_the_default_model_of_a_direction_has_the_best_check_bleu(tmp_path):
    """Two models of one direction: by default the better on val's check; either by name."""
    entry = read_manifest()[DIRECTIONS[0]]["cpu"]
    better = entry | {"trained_on": "NVIDIA H100", "check": entry["check"] | {"bleu_lc": 99.0}}
    manifest = {DIRECTIONS[0]: {"cpu": entry, "gpu": better}}
    assert shipped_entry(manifest, DIRECTIONS[0]) is better
    assert shipped_entry(manifest, DIRECTIONS[0], "cpu") is entry
    manifest[DIRECTIONS[0]]["gpu"] = better | {"check": entry["check"]}  # a tie: the first
    assert shipped_entry(manifest, DIRECTIONS[0]) is entry
    with pytest.raises(ValueError, match="no gpu-trained model shipped for 'en-de'; shipped: cpu"):
        shipped_entry(read_manifest(), "en-de", "gpu")
    # a manifest of an earlier version: one entry in each direction's place
    (tmp_path / MANIFEST).write_text(json.dumps({DIRECTIONS[0]: better}))
    assert read_manifest(tmp_path) == {DIRECTIONS[0]: {"gpu": better}}


def test_shipped_models_translate_deterministically_and_keep_their_bleu(shipped):
    sentences = ["A man is riding a bike.", "Zwei Hunde spielen im Schnee."]
    first, again = shipped.translate(sentences), shipped.translate(sentences)
    assert first == again and all(first)
    check = shipped_entry(read_manifest(), shipped.direction)["check"]
    assert check["split"] == "val" and check["sentences"] == 200
    # the number ship stored, recomputed from the shipped files; float noise may move a word
    assert shipped.check_bleu() == pytest.approx(check["bleu_lc"], abs=0.5)
    recorded = {r["direction"]: r for r in load_results() if r["device"].startswith("cpu")}
    full_val = recorded[shipped.direction]["bleu"]["val"]["sacrebleu_lc"]
    assert check["bleu_lc"] > full_val - 5  # int8 storage costs little


def test_runaways_finds_a_piece_three_times_running_and_an_overlong_output(shipped):
    """runs_away on the tokenizer's pieces: the record's runaway share counts these."""
    outputs = [
        "Ein Hund läuft.",
        "Ein Hund Hund Hund läuft.",  # one piece three times in a row
        "Ein Hund läuft über eine große grüne Wiese vor einem weißen Haus.",  # > 2x long
        "Ein Hund Hund läuft.",  # twice is not a loop
    ]
    assert runaways(shipped.tokenizer, ["A dog runs."] * 4, outputs) == [1, 2]


def test_explore_computes_the_attention_of_the_shipped_model(shipped):
    """explore's live records (float64) are the float32 model's attention to rounding, on the
    same translation; a direction without sentences is refused by name."""
    sentences = ["A dog runs through the snow.", "Ein Mann fährt Fahrrad."]
    shown = explore([shipped], {shipped.direction: sentences}, "live")
    plain = attention_record(shipped.model, shipped.tokenizer, sentences, shipped.decoding)
    for live, float32 in zip(shown.directions[shipped.direction], plain, strict=True):
        assert (live["source"], live["output"]) == (float32["source"], float32["output"])
        for kind in ("encoder", "decoder", "cross"):
            assert np.abs(np.subtract(live[kind], float32[kind])).max() <= 0.0011, kind
    assert explore([shipped], {shipped.direction: sentences}, "live").html == shown.html
    with pytest.raises(ValueError, match=f"no sentences for '{shipped.direction}'; given: xx-yy"):
        explore([shipped], {"xx-yy": sentences})


def test_int8_rows_keep_each_rows_largest_weight():
    """eq. int8-rows: a row's largest |w| packs to the code +-127 (the scale is max |w| / 127)
    and every weight unpacks within half a step of its row; a scale of max |w| / 128 would
    make that code 128, which wraps to -128 in int8. Vectors are kept as float16."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(40, 40, d_model=16, n_heads=2, d_ff=32, n_layers=1))
    with torch.no_grad():  # rows whose largest weight is negative, positive, or both at once
        weight = model.encoder.layers[0].feed_forward.linear1.weight  # (32, 16)
        weight[0], weight[1], weight[2] = -3.0 * weight[0].abs(), weight[1].abs(), 0.5
    packed, restored = pack_weights(model), unpack_weights(pack_weights(model))
    for name, w in model.named_parameters():
        if w.dim() == 1:
            assert packed[name].dtype == torch.float16
            continue
        codes, step = packed[name], packed[f"{name}:scale"].float()  # (rows, cols), (rows, 1)
        largest = w.abs().argmax(dim=1, keepdim=True)  # (rows, 1)
        assert codes.dtype == torch.int8
        assert torch.equal(codes.gather(1, largest).int(), 127 * w.gather(1, largest).sign().int())
        assert ((restored[name] - w).abs() <= step * 0.5001).all(), name
        assert torch.allclose(step, w.abs().amax(dim=1, keepdim=True) / 127, rtol=1e-3)


@pytest.fixture
def copy_of_weights(tmp_path):
    root = tmp_path / "weights"
    shutil.copytree(WEIGHTS, root)
    return root, read_manifest(root)[DIRECTIONS[0]]["cpu"]


def test_a_missing_truncated_or_altered_file_is_refused(copy_of_weights):
    root, entry = copy_of_weights
    weights, expected = root / entry["weights"], entry["weights_sha256"]
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=rf"{weights.name} is damaged or altered.*{expected}"):
        load_pretrained(DIRECTIONS[0], root=root)
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match=rf"damaged or altered.*expected {expected}"):
        load_pretrained(DIRECTIONS[0], root=root)
    weights.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{weights.name} is missing.*{expected}"):
        load_pretrained(DIRECTIONS[0], root=root)
    (root / entry["tokenizer"]).write_text("not a SentencePiece model")
    weights.write_bytes(data)
    with pytest.raises(ValueError, match=rf"{entry['tokenizer']} is damaged or altered"):
        load_pretrained(DIRECTIONS[0], root=root)
    with pytest.raises(ValueError, match="no model shipped for 'en-fr'; shipped: "):
        load_pretrained("en-fr", root=root)


def test_weights_of_another_configuration_are_refused(copy_of_weights):
    root, entry = copy_of_weights
    manifest = read_manifest(root)
    manifest[DIRECTIONS[0]]["cpu"]["model_config"]["d_ff"] *= 2
    (root / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(
        ValueError,
        match=rf"{entry['weights']} \(SHA-256 {entry['weights_sha256']}\) does not fit",
    ):
        load_pretrained(DIRECTIONS[0], root=root)


def test_the_command_line_translates_with_a_shipped_model():
    done = subprocess.run(
        [sys.executable, "-m", "transformer", "translate", "--model", "de-en", "Ein Hund rennt."],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == load_pretrained("de-en").translate(["Ein Hund rennt."])[0]


def test_a_pip_install_brings_the_weights(tmp_path):
    """A wheel built from the repository holds the weights; installed on its own, it loads."""
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*build, "-w", str(tmp_path), str(WEIGHTS.parents[2])], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("transformer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for entry in (e for models in read_manifest().values() for e in models.values()):
        assert f"transformer/weights/{entry['weights']}" in names
        assert f"transformer/weights/{entry['tokenizer']}" in names
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = "from transformer.pretrained import load_pretrained, WEIGHTS; print(WEIGHTS); "
    code += "print(load_pretrained('de-en').translate(['Ein Hund rennt.'])[0])"
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); {code}",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(tmp_path / "site")) and done.stdout.split("\n")[1]


def test_the_cpu_records_of_the_shipped_models_are_complete():
    """results/cpu-*.json, written by record: every required key (load_results checks them),
    the CPU as device, whole splits scored, ten samples and twelve attention sentences."""
    records = {r["direction"]: r for r in load_results() if r["file"].startswith("cpu-")}
    assert sorted(records) == sorted(DIRECTIONS)
    for r in records.values():
        assert r["device"].startswith("cpu") and r["config"]["decoding"]["max_sentences"] is None
        assert len(r["samples"]) == 10 and len(r["attention"]) == 12
        assert r["steps"] == read_manifest()[r["direction"]]["cpu"]["steps"]  # the shipped run
