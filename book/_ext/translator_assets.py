"""The browser translator's files in the built book: `_static/translator/`.

The page's translator (appendix 18) is scripts of src/transformer/static/ (SCRIPTS): the page
loads translator.js, its controls, which loads the scripts of its ENGINE list (common.js,
layers.js, transformer.js, shipped.js, sentencepiece.js, domain.js, pretrained.js) when a
translation is first asked for; chapter 11's trainer is transformer.trainer_page.SCRIPTS.
shipped.js and pretrained.js read the shipped files of src/transformer/weights/ as they are: the
manifest, each model's safetensors, its SentencePiece model and the words file of its in-domain
check (words.LANG.tsv). A page opened from disk (file://) may not `fetch` them, but it may run a
script, so each file F is written as F.js, one line that stores F's exact bytes in base64:

    window.__transformerAssets["en-de.safetensors"] = "...";

shipped.js adds such a <script> (by translator.js's loader) only when the reader first asks for
a translation, and checks the decoded bytes against the manifest's SHA-256 sums, so the check is
on the shipped bytes.
Nothing is downloaded at build time; the files come from the installed package.
"""

import base64
import json
import re
import shutil
from importlib.resources import files
from pathlib import Path

from transformer.trainer_page import SCRIPTS as TRAINER_SCRIPTS

PACKAGE = Path(files("transformer"))
WEIGHTS = PACKAGE / "weights"  # the shipped translators (appendix 17's `ship`)
STATIC = PACKAGE / "static"  # the translator's scripts beside explorer.js
# the translator's scripts (the page's, and those it loads, as translator.js's ENGINE lists
# them: one list) and chapter 11's trainer's
ENGINE = re.search(r"const ENGINE = \[([^\]]*)\]", (STATIC / "translator.js").read_text())
SCRIPTS = ("translator.js", *re.findall(r'"([\w.]+\.js)"', ENGINE.group(1)))
SCRIPTS += tuple(name for name in TRAINER_SCRIPTS if name not in SCRIPTS)
TARGET = "translator"  # relative to the built _static folder
GLOBAL = "window.__transformerAssets"  # where the asset scripts leave their bytes


def asset_script(name: str, data: bytes) -> str:
    """The script that stores `data`, the bytes of the shipped file `name`, under that name."""
    encoded = base64.b64encode(data).decode("ascii")
    return f'{GLOBAL} = {GLOBAL} || {{}};\n{GLOBAL}[{json.dumps(name)}] = "{encoded}";\n'


def write_assets(out_dir: str | Path, weights: str | Path = WEIGHTS) -> list[Path]:
    """Write the translator's SCRIPTS and one NAME.js per shipped file (manifest.json, and the
    safetensors, tokenizer and words file of every model of every direction) into `out_dir`;
    returns the paths written."""
    out_dir, weights = Path(out_dir), Path(weights)
    manifest = json.loads((weights / "manifest.json").read_text())  # direction -> kind -> entry
    names = ["manifest.json"]
    for entry in (e for models in manifest.values() for e in models.values()):
        words = [entry["domain"]["words"]] if "domain" in entry else []
        names += [n for n in (entry["weights"], entry["tokenizer"], *words) if n not in names]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        target = out_dir / f"{name}.js"
        target.write_text(asset_script(name, (weights / name).read_bytes()))
        written.append(target)
    for script in SCRIPTS:
        written.append(Path(shutil.copyfile(STATIC / script, out_dir / script)))
    return written


def build_assets(app, exception):
    if exception is None and app.builder.format == "html":
        write_assets(Path(app.outdir) / "_static" / TARGET)


def setup(app):
    if not (WEIGHTS / "manifest.json").is_file():
        raise FileNotFoundError(f"no shipped translators at {WEIGHTS}; pip install -e .")
    app.connect("build-finished", build_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
