"""Serve MathJax from the build itself, so the book renders math with no network.

The MathJax 3 bundle comes from the `django-static-mathjax` wheel (pure static files, pinned in
requirements.txt). `tex-svg-full.js` carries its fonts and every TeX extension in one file, so
nothing else is fetched at view time.
"""

import shutil
from pathlib import Path

import mathjax  # the django-static-mathjax package

BUNDLE = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg-full.js"
TARGET = "mathjax/tex-svg-full.js"  # relative to the built _static folder


def copy_bundle(app, exception):
    if exception is None and app.builder.format == "html":
        target = Path(app.outdir) / "_static" / TARGET
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(BUNDLE, target)


def setup(app):
    if not BUNDLE.is_file():
        raise FileNotFoundError(
            f"MathJax bundle missing at {BUNDLE}; pip install -r requirements.txt"
        )
    app.config.mathjax_path = TARGET
    app.connect("build-finished", copy_bundle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
