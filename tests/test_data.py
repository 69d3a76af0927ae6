import gzip
import shutil
from pathlib import Path

import pytest

from transformer import data
from transformer.data import SPLIT_SIZES, load_multi30k, multi30k_file
from transformer.files import atomic_write


@pytest.mark.parametrize("split", list(SPLIT_SIZES))
def test_splits_have_known_sizes_and_align(split):
    pairs = load_multi30k(split, "en", "de")
    assert len(pairs) == SPLIT_SIZES[split]
    assert all(isinstance(en, str) and isinstance(de, str) and en and de for en, de in pairs)
    assert not any(en.endswith("\n") or de.endswith("\n") for en, de in pairs)


def test_first_training_pair():
    en, de = load_multi30k("train", "en", "de")[0]
    assert en == "Two young, White males are outside near many bushes."
    assert de == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."


def test_direction_swaps_the_pair():
    assert load_multi30k("val", "de", "en")[5] == load_multi30k("val", "en", "de")[5][::-1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(split="dev"), "valid splits are: train, val, test_2016_flickr"),
        (dict(src_lang="xx"), "valid languages are: en, de, fr, cs"),
        (dict(src_lang="de", tgt_lang="de"), "pick two different ones"),
    ],
)
def test_bad_arguments_name_the_valid_choices(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_multi30k(**kwargs)


def copy_split(folder: Path, split: str = "val") -> None:
    for lang in ("en", "de"):
        shutil.copy(multi30k_file(split, lang), folder / f"{split}.{lang}.gz")


def test_corrupted_file_fails_its_checksum(tmp_path, monkeypatch):
    copy_split(tmp_path)
    corrupt = tmp_path / "val.de.gz"
    raw = bytearray(corrupt.read_bytes())
    raw[100] ^= 0xFF
    corrupt.write_bytes(raw)
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    with pytest.raises(ValueError) as err:
        load_multi30k("val", "en", "de")
    message = str(err.value)
    assert str(corrupt) in message
    assert data.SHA256["val.de.gz"] in message  # the expected hash
    assert data._sha256(corrupt) in message  # and the actual one


def test_wrong_line_count_is_reported(tmp_path, monkeypatch):
    copy_split(tmp_path)
    short = tmp_path / "val.en.gz"
    lines = gzip.decompress(short.read_bytes()).splitlines(keepends=True)
    short.write_bytes(gzip.compress(b"".join(lines[:-1])))
    monkeypatch.setitem(data.SHA256, "val.en.gz", data._sha256(short))  # pass the checksum
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="has 1013 lines; the val split has 1014"):
        load_multi30k("val", "en", "de")


def test_missing_file_in_multi30k_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"val\.en\.gz.*MULTI30K_DIR"):
        load_multi30k("val", "en", "de")


def test_no_network_and_no_copy_names_url_and_env_var(tmp_path, monkeypatch):
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path))
    monkeypatch.setattr(data, "MULTI30K_URL", "http://127.0.0.1:9/{name}")  # nothing listens there
    with pytest.raises(ConnectionError) as err:
        load_multi30k("val", "en", "de")
    assert "http://127.0.0.1:9/val.en.gz" in str(err.value)
    assert "MULTI30K_DIR" in str(err.value)
    assert not any(tmp_path.rglob("*.gz*"))  # no partial file left behind


def test_download_goes_to_the_cache_and_is_verified(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    copy_split(mirror)
    files = {lang: (mirror / f"val.{lang}.gz").read_bytes() for lang in ("en", "de")}
    lines = {lang: gzip.decompress(raw).decode().splitlines() for lang, raw in files.items()}
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "MULTI30K_URL", mirror.as_uri() + "/{name}")
    assert load_multi30k("val", "en", "de") == list(zip(lines["en"], lines["de"], strict=True))
    for lang, raw in files.items():
        assert (tmp_path / "cache" / "multi30k" / f"val.{lang}.gz").read_bytes() == raw
    # a mirror that serves another file: the download fails its checksum
    (mirror / "val.fr.gz").write_bytes(files["de"])
    with pytest.raises(ValueError, match=f"val.fr.gz: expected sha256 {data.SHA256['val.fr.gz']}"):
        load_multi30k("val", "en", "fr")


def test_atomic_write_gives_the_file_the_mode_of_a_new_file(tmp_path):
    """safetensors writes its files 0600; atomic_write gives every file the mode that a new
    file gets here (0666 less the umask), so that shipped weights are readable like the rest."""
    new = tmp_path / "new"
    new.touch()

    def private(tmp):
        tmp.write_bytes(b"weights")
        tmp.chmod(0o600)

    path = atomic_write(tmp_path / "w.safetensors", private)
    assert path.read_bytes() == b"weights"
    assert oct(path.stat().st_mode) == oct(new.stat().st_mode)
