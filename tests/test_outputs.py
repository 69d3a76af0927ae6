import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
WIDTH = 88


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_no_output_line_is_wider_than_the_code_column(notebook):
    """Stored text outputs fit the code column at 1280 px: about 88 monospace characters."""
    too_wide = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            for line in "".join(text).splitlines():
                if len(line) > WIDTH:
                    too_wide.append(f"{notebook.name}, cell {cell.get('id')}: {line}")
    if too_wide:
        pytest.fail(
            f"{len(too_wide)} output lines wider than {WIDTH}:\n" + "\n".join(too_wide),
            pytrace=False,
        )
