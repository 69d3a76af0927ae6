"""The Transformer, built step by step.

Every module but this one and ``__main__`` (a few hand-written lines each) is exported
from a chapter notebook under ``notebooks/``; edit the notebook, then run
``python .ci/export.py``.
"""

__version__ = "0.1.0"
