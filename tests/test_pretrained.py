"""The translators shipped in the package (transformer/weights, written by `ship`): they load
from their checked files, translate deterministically, keep the BLEU that ship measured, refuse
damaged files, and travel with a pip install. Their in-domain check (transformer.domain, words
files and thresholds in the manifest) flags text unlike the captions, and a text of several
sentences is translated sentence by sentence."""

import json
import math
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer import evaluation
from transformer.data import read_sentences
from transformer.domain import (
    CaptionCheck,
    caption_tokens,
    counts_text,
    other_language,
    read_counts,
    threshold_for,
    words_entry,
)
from transformer.explorer import explore
from transformer.model import Transformer, TransformerConfig
from transformer.pretrained import (
    MANIFEST,
    WEIGHTS,
    domain_of,
    load_pretrained,
    machine_kind,
    pack_weights,
    read_manifest,
    shipped_entry,
    unpack_weights,
)
from transformer.results import load_results
from transformer.scoring import attention_record, runaways
from transformer.sentences import split_sentences, translate_texts

DIRECTIONS = ("de-en", "en-de")
OTHER_TEXT = Path(__file__).parents[1] / "benchmarks" / "domain"  # off_domain.LANG.txt


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
        shipped_entry({"en-de": {"cpu": entry}}, "en-de", "gpu")
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
    kind = machine_kind(shipped_entry(read_manifest(), shipped.direction)["trained_on"])
    recorded = {r["direction"]: r for r in load_results() if machine_kind(r["device"]) == kind}
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
    return root, shipped_entry(read_manifest(root), DIRECTIONS[0])  # the one loaded


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
    shipped_entry(manifest, DIRECTIONS[0])["model_config"]["d_ff"] *= 2
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
        assert f"transformer/weights/{entry['domain']['words']}" in names
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


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_the_records_of_the_shipped_models_are_complete(kind):
    """The records of the shipped models of each kind of machine (results/cpu-*.json, and
    results/en-de.json and de-en.json from the GPU), written by record: every required key
    (load_results checks them), whole splits scored, ten samples and twelve attention
    sentences, the steps and the model of the shipped run."""
    records = {
        r["direction"]: r
        for r in load_results()
        if machine_kind(r["device"]) == kind and r["config"]["decoding"]["max_sentences"] is None
    }
    assert sorted(records) == sorted(DIRECTIONS)
    for r in records.values():
        assert len(r["samples"]) == 10 and len(r["attention"]) == 12
        entry = read_manifest()[r["direction"]][kind]
        assert r["steps"] == entry["steps"] and r["config"]["model"] == entry["model_config"]


def test_every_commit_the_results_name_is_this_projects():
    """The first GPU run's records named the commit of a repository the tree had been copied
    into: every commit that a file of results/ names must be one of this project's."""
    root = Path(__file__).resolve().parents[1]
    ours = subprocess.run(
        ["git", "-C", str(root), "rev-list", "--all"], capture_output=True, text=True
    ).stdout.split()
    if not ours:
        pytest.skip("not a git checkout")
    named = {}  # commit -> the files that name it
    for path in (root / "results").rglob("*.json*"):
        for commit in re.findall(r'"commit":\s*"([0-9a-f]{7,40})"', path.read_text()):
            named.setdefault(commit, []).append(path.name)
    assert named, "no commit found in results/"
    foreign = {c: files for c, files in named.items() if c not in ours}
    assert not foreign, f"commits that are not this project's: {foreign}"


# ------------------------------------------------------------------ the in-domain check

CAPTIONS = {
    "en": [
        "A man is riding a bike.",
        "Two dogs are playing in the snow.",
        "A girl in a red dress.",
    ],
    "de": ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau lacht."],
}
OTHER = {
    "en": [
        "You should subscribe to my Substack.",
        "How do I reset my password?",
        "The parliament voted on the new budget yesterday.",
        "Manuscripts don't burn.",
    ],
    "de": [
        "Manuskripte brennen nicht.",
        "Wie setze ich mein Passwort zurück?",
        "Das Parlament hat gestern über den Haushalt abgestimmt.",
        "Ich liebe dich.",
    ],
}


def held_out(lang: str) -> list[str]:
    """The held-out half of benchmarks/domain/off_domain.LANG.txt: its even lines."""
    return (OTHER_TEXT / f"off_domain.{lang}.txt").read_text(encoding="utf-8").splitlines()[1::2]


def test_every_shipped_model_has_the_in_domain_check_of_its_source_language(tmp_path):
    """Each manifest entry names its source language's words file (shared by the models of
    that language), its SHA-256, the threshold and the rule; words_entry writes the same file
    and threshold again from the corpus."""
    for direction, models in read_manifest().items():
        lang = direction.split("-")[0]
        again = words_entry(lang, tmp_path)
        assert (tmp_path / again["words"]).read_bytes() == (WEIGHTS / again["words"]).read_bytes()
        for entry in models.values():
            assert entry["domain"] == again
            assert again == {
                "rule": "caption_cost",
                "words": f"words.{lang}.tsv",
                "sha256": again["sha256"],
                "threshold": again["threshold"],
            }


def test_the_words_file_format():
    """One "token<TAB>count" line a token seen at least twice, most frequent first, ties in
    code-point order; read_counts reads it back. Tokens: NFC, lowercase, letter runs, ? and !."""
    text = (WEIGHTS / "words.en.tsv").read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines()]
    assert all(len(row) == 2 and int(row[1]) >= 2 for row in rows)
    assert [(-int(n), t) for t, n in rows] == sorted((-int(n), t) for t, n in rows)
    assert counts_text(read_counts(text)) == text and rows[0][0] == "a"
    assert caption_tokens("Ein Café! Ist’s 2 Uhr? Cafe\u0301-Bar") == [
        "ein", "café", "!", "ist", "s", "uhr", "?", "café", "bar",
    ]  # fmt: skip


def test_out_of_domain_flags_other_text_and_passes_captions(shipped):
    lang = shipped.direction.split("-")[0]
    texts = CAPTIONS[lang] + OTHER[lang] + ["", "   "]
    assert shipped.out_of_domain(texts) == [False] * 3 + [True] * 4 + [False] * 2
    check = shipped.domain
    assert all(check.cost(t) > check.threshold for t in OTHER[lang])
    assert check.cost("12345") == float("inf") and shipped.out_of_domain(["12345"]) == [True]
    with pytest.raises(TypeError, match="a list of texts"):
        shipped.out_of_domain(OTHER[lang][0])


@pytest.mark.parametrize(("lang", "direction"), [("en", "en-de"), ("de", "de-en")])
def test_the_check_flags_held_out_other_text_and_few_test_captions(lang, direction):
    """The shipped rule and threshold (no model needed): at least 90% of the held-out other
    text, at most 5% of test2016 and at most 3% of val (where the threshold was chosen)."""
    check = domain_of(shipped_entry(read_manifest(), direction), WEIGHTS)
    other, test = held_out(lang), read_sentences("test_2016_flickr", lang)
    assert len(other) == 175
    assert sum(check.flags(other)) / len(other) >= 0.90
    assert sum(check.flags(test)) / len(test) <= 0.05
    val = read_sentences("val", lang)
    assert sum(check.flags(val)) <= 0.03 * len(val)
    assert threshold_for([check.cost(s) for s in val]) == check.threshold


def test_threshold_for_flags_at_most_the_share():
    costs = [float(c) for c in range(1, 101)]  # 1, 2, ..., 100
    assert threshold_for(costs, 0.03) == 97.0  # flags 98, 99, 100
    assert threshold_for([1.234, 5.001], 0.5) == 1.24  # rounded up to 0.01
    check = CaptionCheck({"a": 3, "man": 1})  # total 4: ln 4 - ln(count + 1)
    # a, a: 0; man, man: ln 2; "!": ln 4
    assert check.cost("A man, a MAN!") == pytest.approx((2 * math.log(2) + math.log(4)) / 5)


def test_a_damaged_or_missing_words_file_is_refused_with_its_sum(copy_of_weights):
    root, entry = copy_of_weights
    words, expected = root / entry["domain"]["words"], entry["domain"]["sha256"]
    words.write_text(words.read_text(encoding="utf-8") + "substack\t999\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"{words.name} is damaged or altered.*expected {expected}"
    ):
        load_pretrained(DIRECTIONS[0], root=root)
    words.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{words.name} is missing.*{expected}"):
        load_pretrained(DIRECTIONS[0], root=root)


def test_a_model_shipped_without_the_check_loads_and_says_so(copy_of_weights):
    root, _ = copy_of_weights
    manifest = read_manifest(root)
    del shipped_entry(manifest, DIRECTIONS[0])["domain"]
    (root / MANIFEST).write_text(json.dumps(manifest))
    old = load_pretrained(DIRECTIONS[0], root=root)
    assert old.domain is None
    with pytest.raises(ValueError, match="has no in-domain check"):
        old.out_of_domain(["Ein Hund rennt."])


def test_a_caption_in_the_other_language_is_named(shipped):
    """better_direction names the reverse direction for a caption of the target language,
    and nothing for a caption of the source language, for other text (flagged by both
    checks) or for a blank text; it takes a list."""
    src, tgt = shipped.direction.split("-")
    texts = CAPTIONS[tgt] + CAPTIONS[src] + OTHER[src] + ["", "  "]
    reverse = f"{tgt}-{src}"
    assert shipped.better_direction(texts) == [reverse] * 3 + [None] * 9
    with pytest.raises(TypeError, match="a list of texts"):
        shipped.better_direction(CAPTIONS[tgt][0])


@pytest.mark.parametrize(("src", "tgt"), [("en", "de"), ("de", "en")])
def test_other_language_seldom_names_the_wrong_language(src, tgt):
    """The rule of domain.other_language with the shipped checks (no model needed), as
    appendix 17 measures it: of the source language's val captions and off-domain sentences
    at most 1% are said to be the other language (0 of 1,014 and of 350 when written); of the
    other language's val captions at least 95% are (97.2% en-de, 97.0% de-en)."""
    manifest = read_manifest()
    own, other = (
        domain_of(shipped_entry(manifest, d), WEIGHTS) for d in (f"{src}-{tgt}", f"{tgt}-{src}")
    )
    written = (OTHER_TEXT / f"off_domain.{src}.txt").read_text(encoding="utf-8").splitlines()
    for texts in (read_sentences("val", src), written):
        assert sum(other_language(own, other, texts)) <= 0.01 * len(texts)
    theirs = read_sentences("val", tgt)
    assert sum(other_language(own, other, theirs)) >= 0.95 * len(theirs)


def test_without_the_reverse_model_no_direction_is_named(copy_of_weights):
    """A manifest that ships one direction: no check of the target language, so
    better_direction names nothing, even for a caption of that language."""
    root, _ = copy_of_weights
    manifest = read_manifest(root)
    (root / MANIFEST).write_text(json.dumps({DIRECTIONS[0]: manifest[DIRECTIONS[0]]}))
    alone = load_pretrained(DIRECTIONS[0], root=root)
    assert alone.target_domain is None and alone.domain is not None
    assert alone.better_direction(CAPTIONS["en"]) == [None] * 3


# ------------------------------------------------------------------ sentence by sentence

PARAGRAPH = (
    "On Saturday, Mr. Brown took his two dogs to the park near St. Mary's Church. The older "
    "dog, a Boston Terrier called Max, ran straight to the pond. The younger one stayed close, "
    "e.g. under the bench, and watched the ducks. At 10.30 a.m. a group of children arrived "
    "with a red ball. They played football on the grass for almost an hour. One girl, about 8 "
    "years old, scored three goals! Her father cheered so loudly that the ducks flew away. "
    '"Well done," he said. "Now let\'s get some ice cream." The children ran to the small shop '
    "at the corner of the square. Dr. Miller, who owns the shop, gave each of them a cone with "
    "2.5 scoops. It was a warm day in May, and the sun was bright. Meanwhile, Max had found a "
    "stick in the water... He brought it back and dropped it at Mr. Brown's feet. Was he "
    "tired? Not at all. He wanted to play again and again. A young man on a bicycle stopped to "
    "watch. He took a photo of the dog with his phone. Later, an old woman sat down on the "
    "bench and fed the birds with bread. Two men in orange vests were cutting the hedges "
    "behind her. A street musician played the guitar near the fountain, and people threw coins "
    "into his hat. In the afternoon, clouds came in from the west. The wind grew stronger, and "
    "the first drops of rain began to fall. Mr. Brown called his dogs, put on their leads and "
    "walked home along the river. At home, the dogs slept on the rug in front of the fire, "
    "and the children, tired and happy, told their parents about the goals, the ducks and the "
    "ice cream. It had been a long and happy day for everyone."
)


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("A dog runs.", ["A dog runs."]),
        ("  A dog runs.  Two cats sleep.\n", ["A dog runs.", "Two cats sleep."]),
        ("", []),
        (" \t ", []),
        # abbreviations, English and German, and initials
        ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
        ("Fruit, e.g. Apples, etc. Are sweet.", ["Fruit, e.g. Apples, etc. Are sweet."]),
        ("I.e. This one. That one.", ["I.e. This one.", "That one."]),
        ("Obst, z.B. Äpfel. Gemüse, z. B. Kohl.", ["Obst, z.B. Äpfel.", "Gemüse, z. B. Kohl."]),
        ("Äpfel, Birnen usw. Sind gesund. Ja.", ["Äpfel, Birnen usw. Sind gesund.", "Ja."]),
        (
            "Haus Nr. 5 ist rot. Ca. 3 Leute, bzw. Vier. Vgl. Kapitel 2.",
            ["Haus Nr. 5 ist rot.", "Ca. 3 Leute, bzw. Vier.", "Vgl. Kapitel 2."],
        ),
        (
            "J. R. R. Tolkien wrote it. He was British.",
            ["J. R. R. Tolkien wrote it.", "He was British."],
        ),
        ("She lives in the U.S. Today she works.", ["She lives in the U.S. Today she works."]),
        # numbers: decimals, German ordinals, a year
        ("It costs 3.5 euros. That is cheap.", ["It costs 3.5 euros.", "That is cheap."]),
        ("Am 3. Mai kam er. Am 21. Juni ging er.", ["Am 3. Mai kam er.", "Am 21. Juni ging er."]),
        (
            "Im 19. Jahrhundert. Dann 1990. Dann 2000.",
            ["Im 19. Jahrhundert.", "Dann 1990.", "Dann 2000."],
        ),
        ("Founded in 1990. It grew.", ["Founded in 1990.", "It grew."]),
        ("Two dogs. 3 cats sleep.", ["Two dogs.", "3 cats sleep."]),
        # quotes and brackets
        ('He said "Go." Then he left.', ['He said "Go."', "Then he left."]),
        ('She left. "Why?" he asked.', ["She left.", '"Why?" he asked.']),
        (
            "Er ging. „Warum?“ fragte sie. »Darum.« Ende.",
            ["Er ging.", "„Warum?“ fragte sie.", "»Darum.«", "Ende."],
        ),
        ("A dog (a big one.) A cat.", ["A dog (a big one.)", "A cat."]),
        # ellipses, and marks that do not end a sentence
        ("Wait... Then it rained.", ["Wait...", "Then it rained."]),
        ("Wait… Then it rained… or not.", ["Wait…", "Then it rained… or not."]),
        ("Really?! Yes. No!", ["Really?!", "Yes.", "No!"]),
        ("at 3 p.m. on Friday. the end.", ["at 3 p.m. on Friday. the end."]),
        ("A dog.Then a cat.", ["A dog.Then a cat."]),
    ],
)
def test_split_sentences(text, sentences):
    assert split_sentences(text) == sentences


def test_a_300_word_paragraph_splits_into_its_sentences():
    sentences = split_sentences(PARAGRAPH)
    assert len(PARAGRAPH.split()) >= 300 and len(sentences) == 27
    assert " ".join(sentences) == PARAGRAPH  # nothing lost, nothing added
    assert sentences[3] == "At 10.30 a.m. a group of children arrived with a red ball."
    assert sentences[7:9] == ['"Well done," he said.', '"Now let\'s get some ice cream."']
    assert all(s[-1] in '.!?"' for s in sentences)


def test_translate_texts_translates_every_sentence_in_one_call_and_keeps_the_order():
    calls = []

    def translate(sentences):
        calls.append(sentences)
        return [f"<{s}>" for s in sentences]

    texts = ["One. Two.", "", "Three!", "Mr. Four. Five? Six."]
    assert translate_texts(translate, texts) == [
        "<One.> <Two.>", "", "<Three!>", "<Mr. Four.> <Five?> <Six.>",
    ]  # fmt: skip
    assert calls == [["One.", "Two.", "Three!", "Mr. Four.", "Five?", "Six."]]
    assert translate_texts(translate, ["", " "]) == ["", ""] and len(calls) == 1
    with pytest.raises(TypeError, match="a list of texts"):
        translate_texts(translate, "One. Two.")


def test_pretrained_translate_splits_and_warns_only_of_a_long_sentence(monkeypatch):
    """Pretrained.translate hands chapter 13's translate the sentences of all texts at once;
    a text longer than max_len but made of short sentences is not truncated."""
    shipped = load_pretrained("en-de")
    seen = []

    def spy(model, tokenizer, sentences, decoding):
        seen.append(list(sentences))
        return [f"[{len(s)}]" for s in sentences]

    monkeypatch.setattr("transformer.pretrained.translate", spy)
    long_text = " ".join(["A dog runs in the park."] * 60)  # ~420 pieces, 60 sentences
    assert len(shipped.tokenizer.encode([long_text])[0]) > shipped.model.config.max_len
    out = shipped.translate(["Two dogs play.", long_text])
    assert seen == [["Two dogs play.", *["A dog runs in the park."] * 60]]
    assert out == ["[14]", " ".join(["[23]"] * 60)]
    monkeypatch.setattr("transformer.pretrained.translate", evaluation.translate)
    monkeypatch.setattr(evaluation, "beam_search", lambda m, src, *a: [[]] * len(src))  # quick
    with pytest.warns(UserWarning, match="1 of 2 sentences are longer than the model's max_len"):
        assert shipped.translate(["A dog runs. " + "A dog " * 300]) == [" "]
