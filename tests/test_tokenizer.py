import pytest

from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, multi30k_tokenizer


@pytest.fixture(scope="module")
def small(tmp_path_factory, train_sentences) -> Tokenizer:
    """A 1000-piece model: fast to train, same code path as the real one."""
    return Tokenizer.train(train_sentences, 1000, tmp_path_factory.mktemp("tok") / "small.model")


def test_special_ids(small):
    assert (small.pad_id, small.unk_id, small.bos_id, small.eos_id) == (0, 1, 2, 3)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert [small.sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert small.vocab_size == 1000


def test_round_trip_single_and_batch(small):
    sentences = ["Manuscripts don't burn.", "Manuskripte brennen nicht."]
    ids = small.encode(sentences[0], add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and UNK_ID not in ids
    assert small.decode(ids) == sentences[0]
    batch = small.encode(sentences)
    assert batch == [small.encode(s) for s in sentences]
    assert small.decode(batch) == sentences


def test_decode_accepts_tensors_and_drops_padding(small):
    torch = pytest.importorskip("torch")
    ids = small.encode("A dog runs.", add_bos=True, add_eos=True)
    padded = torch.tensor([ids + [PAD_ID] * 3])
    assert small.decode(padded) == ["A dog runs."]


def test_empty_and_whitespace(small):
    assert small.encode("") == [] and small.encode("  \t ") == []
    assert small.encode("", add_bos=True, add_eos=True) == [BOS_ID, EOS_ID]
    assert small.decode([]) == ""


def test_unseen_characters_map_to_unk(small):
    ids = small.encode("Ein Hund 🐕 läuft")
    assert UNK_ID in ids
    assert "⁇" in small.decode(ids)


def test_long_text_round_trips(small):
    text = " ".join(["A dog runs through the tall grass."] * 300)
    assert small.decode(small.encode(text)) == text


def test_bad_input(small, tmp_path):
    with pytest.raises(TypeError, match="str or a sequence of str"):
        small.encode(["fine", 3])
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 1000\)"):
        small.decode([5, 1000])
    with pytest.raises(FileNotFoundError, match="train one with Tokenizer.train"):
        Tokenizer(tmp_path / "missing.model")


def test_training_is_deterministic(small, train_sentences, tmp_path):
    again = Tokenizer.train(train_sentences, 1000, tmp_path / "again.model")
    assert again.model_file.read_bytes() == small.model_file.read_bytes()


def test_multi30k_tokenizer_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path))
    first = multi30k_tokenizer(vocab_size=1000)
    stamp = first.model_file.stat().st_mtime_ns
    second = multi30k_tokenizer(vocab_size=1000)
    assert second.model_file == first.model_file and second.model_file.stat().st_mtime_ns == stamp
    assert first.model_file.parent == tmp_path / "tokenizers"
    assert multi30k_tokenizer(vocab_size=1200).model_file != first.model_file  # recipe in the name
