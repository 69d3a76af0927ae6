"""Hide the notebooks' tool markers on the rendered page.

`#| export` and `#| default_exp` (nbdev: this cell goes into the package) and `# NBVAL_...`
(nbval: how the tests compare this cell's output) matter to the tools, and to a learner who runs
the notebook in JupyterLab, but say nothing to a reader of the book. At build time they are
dropped from the displayed source of code cells; a cell that held nothing else, and shows no
output, is left out of the page. The notebooks themselves are not changed.
"""

import re

from docutils import nodes

MARKER = re.compile(r"^(#\| .*|# NBVAL_[A-Z_]+)$")


def is_cell_input(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and "cell_input" in node.get("classes", [])


def hide_markers(app, doctree) -> None:
    for block in list(doctree.findall(nodes.literal_block)):
        if not is_cell_input(block.parent):
            continue
        lines = block.astext().split("\n")
        kept = [line for line in lines if not MARKER.match(line)]
        if len(kept) == len(lines):
            continue
        while kept and not kept[0].strip():  # the blank line a marker stood above
            kept.pop(0)
        cell = block.parent.parent
        if not kept and len(cell.children) == 1:  # a marker-only cell with no output
            cell.parent.remove(cell)
            continue
        block.rawsource = "\n".join(kept)
        block.children = [nodes.Text(block.rawsource)]


def setup(app):
    app.connect("doctree-read", hide_markers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
