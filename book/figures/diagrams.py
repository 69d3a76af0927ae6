"""Architecture diagrams of the book, drawn with matplotlib patches, arrows and text only.

Writes three PNG files next to this script:

- transformer.png: the encoder-decoder of the paper's figure 1 with the package's class names,
  the mask of every attention, and the one token table E shared with the output projection;
- decoder_layer.png: one post-LN DecoderLayer with tensor shapes and where the KV cache sits;
- decoding_step.png: one step of greedy decoding or beam search with the KV cache
  (transformer.decoding).

Re-run from the repository root after changing the code they describe (a folder argument
writes them there instead; tests/test_book.py does so and compares the files byte for byte):

    .venv/bin/python book/figures/diagrams.py

Coordinates are inches on a 7-inch page saved at 200 dpi (1400 px wide), so 9-pt text stays
readable in a 700-px column. One colour (Paul Tol's colour-blind-safe "light" scheme) means one
kind of box in all three figures.
"""

import sys
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Polygon
from matplotlib.path import Path as Polyline

OUT = Path(__file__).resolve().parent
WIDTH, DPI, FONT, LEAD = 7.0, 200, 9, 0.165  # inches, dots per inch, points, inches per line
FILL = {  # one colour per kind of box
    "tensor": "white",
    "embed": "#44BB99",  # the token table E: the embeddings and the tied generator
    "attn": "#EE8866",
    "ffn": "#77AADD",
    "norm": "#EEDD88",  # Add & Norm (Residual)
    "choice": "#BBCC33",  # softmax and the choice of the next token
    "cache": "#FFAABB",
    "stack": "#DDDDDD",  # a whole stack of layers
}
INK, SKIP, MASK, MEMORY, TIE = "#222222", "#666666", "#882255", "#004488", "#117733"
STYLE = {"*": {"weight": "bold"}, "`": {"family": "DejaVu Sans Mono"}, "!": {"color": MASK}}


def page(height):
    """A 7-inch-wide figure whose data coordinates are inches from the lower left corner."""
    fig = plt.figure(figsize=(WIDTH, height), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1), xlim=(0, WIDTH), ylim=(0, height))
    ax.axis("off")
    return fig, ax


def write(ax, x, y, lines):
    """Lines centred on (x, y), top to bottom. A leading * sets a line in bold, ` in code type,
    ! in the mask colour; "" leaves a blank line."""
    for i, line in enumerate(lines):
        style = STYLE.get(line[:1], {})
        text = line[1:] if style else line
        dy = ((len(lines) - 1) / 2 - i) * LEAD
        ax.text(x, y + dy, text, ha="center", va="center", fontsize=FONT, zorder=3, **style)


def box(ax, x, y, w, h, kind, *lines, edge=INK):
    """A rounded box of colour FILL[kind] centred at (x, y), with lines as in write()."""
    shape = "round,pad=0,rounding_size=0.06"
    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - h / 2), w, h, shape, fc=FILL[kind], ec=edge, zorder=2)
    )
    write(ax, x, y, lines)


def diamond(ax, x, y, w, h, kind, *lines):
    """A decision: a rhombus centred at (x, y), with lines as in write()."""
    corners = [(x - w / 2, y), (x, y + h / 2), (x + w / 2, y), (x, y - h / 2)]
    ax.add_patch(Polygon(corners, fc=FILL[kind], ec=INK, zorder=2))
    write(ax, x, y, lines)


def arrow(ax, *points, color=INK, ls="-", head="-|>", lw=1.1):
    """A polyline through points (x, y), with an arrowhead at the last one (head="-": none)."""
    path = Polyline(points)
    style = dict(color=color, lw=lw, ls=ls, shrinkA=0, shrinkB=0, zorder=1, joinstyle="miter")
    ax.add_patch(FancyArrowPatch(path=path, arrowstyle=head, mutation_scale=10, **style))


def link(ax, x, y0, y1, shape=None):
    """A vertical arrow from y0 to y1, with a tensor shape beside it."""
    arrow(ax, (x, y0), (x, y1))
    if shape:
        label(ax, x + 0.08, (y0 + y1) / 2, shape, color="#444444")


def residual(ax, x, y0, side, y1, x1):
    """The skip of a Residual: leaves the stream at (x, y0), runs at `side`, enters at (x1, y1)."""
    ax.plot([x], [y0], "o", ms=3.5, color=SKIP, zorder=3)
    arrow(ax, (x, y0), (side, y0), (side, y1), (x1, y1), color=SKIP)


def label(ax, x, y, text, ha="left", color=INK, size=FONT, **kw):
    """A free text: a tensor shape, a note, a name."""
    ax.text(x, y, text, ha=ha, va="center", fontsize=size, color=color, zorder=3, **kw)


def group(ax, x0, y0, x1, y1, lines, x, ha):
    """A dashed frame around a stack or a loop; its two-line title (bold, then code) sits in the
    top band at x, aligned by ha, beside any stream that leaves through the top."""
    shape = "round,pad=0,rounding_size=0.1"
    frame = dict(fc="#F4F4F4", ec="#999999", ls="--", zorder=0)
    ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, shape, **frame))
    label(ax, x, y1 - 0.15, lines[0], ha=ha, size=FONT + 1, weight="bold")
    label(ax, x, y1 - 0.15 - LEAD, lines[1], ha=ha, **STYLE["`"])


def save(fig, path: Path):
    fig.savefig(path, dpi=DPI, facecolor="white", metadata={"Software": None})
    plt.close(fig)


# --------------------------------------------------------------------------------------------
def draw_transformer():
    """Paper figure 1 in our style: the encoder on the left, the decoder on the right."""
    fig, ax = page(8.9)
    enc, dec, w = 1.95, 5.05, 2.4  # column centres, box width
    embed = ("*Embedding + positions", r"$\sqrt{d_{model}}\,E[\mathrm{ids}]$ + PE, dropout")
    embed += ("`TransformerEmbedding  (ch. 2)",)
    add_norm = ("*Add & Norm", "`Residual  (ch. 6)")
    ffn = ("*Feed-forward", "`FeedForward  (ch. 7)")

    # encoder: ids -> embedding -> N x (self-attention, Add & Norm, FFN, Add & Norm) -> memory
    box(ax, enc, 0.35, w, 0.5, "tensor", r"*source ids  $x_1 \ldots x_S$", "(batch, S), ch. 1")
    box(ax, enc, 1.2, w, 0.72, "embed", *embed)
    group(ax, 0.3, 1.75, 3.25, 5.3, ("Encoder  (ch. 8)", "N × EncoderLayer"), enc - 0.12, "right")
    self_attn = ("*Self-attention", "`MultiHeadAttention  (ch. 5)", "!mask: source padding (ch. 4)")
    box(ax, enc, 2.5, w, 0.7, "attn", *self_attn)
    box(ax, enc, 3.25, w, 0.45, "norm", *add_norm)
    box(ax, enc, 3.95, w, 0.45, "ffn", *ffn)
    box(ax, enc, 4.65, w, 0.45, "norm", *add_norm)
    memory = ("*memory M", "(batch, S, d_model)")
    box(ax, enc, 5.75, w, 0.5, "tensor", *memory, edge=MEMORY)
    for y0, y1 in [(0.6, 0.84), (1.56, 2.15), (2.85, 3.02), (3.47, 3.72), (4.17, 4.42)]:
        link(ax, enc, y0, y1)
    link(ax, enc, 4.87, 5.5)
    residual(ax, enc, 1.95, 0.55, 3.25, enc - w / 2)
    residual(ax, enc, 3.6, 0.55, 4.65, enc - w / 2)

    # decoder: shifted target -> embedding -> N x (masked self-attn, cross-attn, FFN) -> E^T
    target = (r"*target input  BOS $y_1 \ldots y_{T-1}$", "shifted right (ch. 11), (batch, T)")
    box(ax, dec, 0.35, w, 0.5, "tensor", *target)
    box(ax, dec, 1.2, w, 0.72, "embed", *embed)
    group(ax, 3.75, 1.75, 6.64, 7.0, ("Decoder  (ch. 9)", "N × DecoderLayer"), dec + 0.12, "left")
    masked = ("*Masked self-attention", "`MultiHeadAttention  (ch. 5)")
    box(ax, dec, 2.5, w, 0.7, "attn", *masked, "!mask: causal (ch. 4)")
    box(ax, dec, 3.25, w, 0.45, "norm", *add_norm)
    cross = ("*Cross-attention", "Q: decoder;  K, V: memory M", "`MultiHeadAttention  (ch. 5)")
    box(ax, dec, 4.15, w, 0.86, "attn", *cross, "!mask: source padding")
    box(ax, dec, 5.0, w, 0.45, "norm", *add_norm)
    box(ax, dec, 5.7, w, 0.45, "ffn", *ffn)
    box(ax, dec, 6.4, w, 0.45, "norm", *add_norm)
    generator = ("*Linear, weight E (tied)", "`generator  (ch. 10)", "logits h Eᵀ: (batch, T, V)")
    box(ax, dec, 7.5, w, 0.72, "embed", *generator)
    box(ax, dec, 8.45, w, 0.42, "choice", r"*softmax → $p(y_t \mid y_{<t}, x)$")
    for y0, y1 in [(0.6, 0.84), (1.56, 2.15), (2.85, 3.02), (3.47, 3.72), (4.58, 4.77)]:
        link(ax, dec, y0, y1)
    for y0, y1 in [(5.22, 5.47), (5.92, 6.17), (6.62, 7.14), (7.86, 8.24)]:
        link(ax, dec, y0, y1)
    label(ax, dec - 0.08, 3.6, "Q", ha="right")
    for y0, y1 in [(1.95, 3.25), (3.6, 5.0), (5.35, 6.4)]:
        residual(ax, dec, y0, 6.45, y1, dec + w / 2)

    # the memory feeds the keys and values of every cross-attention
    path = [(enc + w / 2, 5.75), (3.5, 5.75), (3.5, 4.15), (dec - w / 2, 4.15)]
    arrow(ax, *path, color=MEMORY, lw=1.6)
    label(ax, 3.5, 3.95, "K, V", ha="center", color=MEMORY)
    # one table E: source and target embeddings (share_embeddings=True) and the generator
    arrow(ax, (enc + w / 2, 1.2), (dec - w / 2, 1.2), color=TIE, ls="--", head="-", lw=1.6)
    label(ax, 3.5, 1.36, "same E", ha="center", color=TIE)
    tie = [(dec + w / 2, 1.2), (6.77, 1.2), (6.77, 7.5), (dec + w / 2, 7.5)]
    arrow(ax, *tie, color=TIE, ls="--", head="-", lw=1.6)
    label(ax, 6.9, 4.6, "tied: generator.weight is E", ha="center", color=TIE, rotation=90)

    # legend, in the free corner above the encoder
    kinds = [
        ("attn", "attention (MultiHeadAttention)"),
        ("ffn", "feed-forward"),
        ("norm", "Add & Norm: LayerNorm(x + Dropout(sublayer(x)))"),
        ("embed", "token table E"),
        ("choice", "output distribution"),
        ("tensor", "tensor"),
    ]
    for i, (kind, text) in enumerate(kinds):
        y = 8.65 - i * 0.27
        box(ax, 0.45, y, 0.3, 0.16, kind)
        label(ax, 0.7, y, text)
    lines = [
        (SKIP, "-", "residual connection"),
        (MEMORY, "-", "memory M"),
        (TIE, "--", "one table E, shared and tied"),
    ]
    for i, (color, ls, text) in enumerate(lines):
        y = 7.0 - i * 0.27
        arrow(ax, (0.3, y), (0.6, y), color=color, ls=ls, head="-", lw=1.6)
        label(ax, 0.7, y, text)
    return fig


# --------------------------------------------------------------------------------------------
C, R, CW, RW, SIDE = 2.45, 5.7, 3.3, 2.3, 0.45  # centre and right columns, widths, skip line
SHAPE_T, SHAPE_H = "(batch, T, d_model)", "(batch, T, h·d_head)"


def add_norm(ax, y, start, name):
    """The post-LN Residual around a sublayer whose input left the stream at height `start`."""
    lines = ("*Add & Norm (post-LN)", "LayerNorm(x + Dropout(sublayer(x)))", f"`{name}: Residual")
    box(ax, C, y, CW, 0.55, "norm", *lines)
    residual(ax, C, start, SIDE, y, C - CW / 2)


def attention(ax, y, cross):
    """One attention sublayer of a DecoderLayer, from the stream at height y; returns its top.

    Q comes from the stream; K and V from the stream (self) or the memory (cross), through the
    KV cache that decoding keeps between steps (chapter 13)."""
    ya, yb, yc, yn = y + 0.6, y + 1.42, y + 2.22, y + 2.945  # rows: Q/K/V, heads, W^O, norm
    kv = "M" if cross else "x"
    box(ax, C, ya, 2.0, 0.42, "attn", r"*$Q = x\,W^Q$", "`in_proj")
    box(ax, R, ya, RW, 0.42, "attn", rf"*$K = {kv}\,W^K,\ V = {kv}\,W^V$", "`in_proj")
    if cross:
        heads = ("*Cross-attention, h heads", "`cross_attn: MultiHeadAttention")
        mask = "!mask: source padding (keys)"
        cache = ("`cache['cross']", "k, v: (batch, S, h·d_head)", "projected once, then reused")
    else:
        heads = ("*Masked self-attention, h heads", "`self_attn: MultiHeadAttention")
        mask = "!mask: causal (no later positions)"
        cache = ("`cache['self']", "k, v: (batch, t, h·d_head)", "grows by 1 position a step")
    formula = r"softmax$(QK^{\top}/\sqrt{d_{head}}$ + mask$)\,V$"
    box(ax, C, yb, CW, 0.78, "attn", *heads, formula, mask)
    box(ax, R, yb, RW, 0.78, "cache", "*KV cache", *cache)
    box(ax, C, yc, CW, 0.42, "attn", r"*concat heads, $W^O$", "`out_proj")
    link(ax, C, y, ya - 0.21)
    link(ax, C, ya + 0.21, yb - 0.39, f"Q {SHAPE_H}")
    link(ax, C, yb + 0.39, yc - 0.21)
    link(ax, C, yc + 0.21, yn - 0.275, SHAPE_T)
    link(ax, R, ya + 0.21, yb - 0.39)
    label(ax, R - 0.08, (ya + yb) / 2 - 0.09, "first step only" if cross else "append", ha="right")
    arrow(ax, (R - RW / 2, yb), (C + CW / 2, yb))
    if cross:
        memory = ("*memory M (Encoder)", "(batch, S, d_model)")
        box(ax, R, y - 0.05, RW, 0.42, "tensor", *memory, edge=MEMORY)
        arrow(ax, (R, y + 0.16), (R, ya - 0.21), color=MEMORY, lw=1.6)
    else:  # keys and values of the stream itself
        ax.plot([C], [y + 0.24], "o", ms=3.5, color=INK, zorder=3)
        arrow(ax, (C, y + 0.24), (R, y + 0.24), (R, ya - 0.21))
    add_norm(ax, yn, y + 0.12, "cross_residual" if cross else "self_residual")
    return yn + 0.275


def draw_decoder_layer():
    """One DecoderLayer (post-LN, norm_first=False) with tensor shapes and the KV cache."""
    fig, ax = page(10.0)
    box(ax, C, 0.28, CW, 0.42, "tensor", "*x: embedded target, or the layer below", SHAPE_T)
    y = attention(ax, 0.49, cross=False)
    y = attention(ax, y, cross=True)
    box(ax, C, y + 0.6, CW, 0.42, "ffn", r"*ReLU$(x W_1 + b_1)$, dropout", "`feed_forward.linear1")
    box(ax, C, y + 1.27, CW, 0.42, "ffn", r"*$(\cdot)\,W_2 + b_2$", "`feed_forward.linear2")
    link(ax, C, y, y + 0.39)
    link(ax, C, y + 0.81, y + 1.06, "(batch, T, d_ff)")
    link(ax, C, y + 1.48, y + 1.72, SHAPE_T)
    add_norm(ax, y + 1.995, y + 0.12, "ff_residual")
    link(ax, C, y + 2.27, y + 2.5)
    box(ax, C, y + 2.71, CW, 0.42, "tensor", "*to the next layer, or the generator", SHAPE_T)
    label(ax, R, y + 2.6, "DecoderLayer", ha="center", size=FONT + 2, weight="bold")
    label(ax, R, y + 2.3, "post-LN (norm_first=False)", ha="center")
    notes = [
        "training: x holds all T target",
        "positions, and no cache is used",
        "",
        "decoding: T = 1 (the newest",
        "token); the self cache holds",
        "all t positions decoded so far",
    ]
    label(ax, R - RW / 2, y + 1.9 - 2.5 * LEAD, "\n".join(notes), linespacing=1.3)
    return fig


# --------------------------------------------------------------------------------------------
def draw_decoding_step():
    """One step t of greedy decoding (or beam search) with the KV cache: decoding.py."""
    fig, ax = page(6.7)
    L, A, K = 1.02, 3.35, 5.8  # columns: once per batch and the cache; the decoder; the choice

    # before the loop (DecoderState): the encoder runs once; the cache lives across steps
    group(ax, 0.1, 3.7, 1.95, 6.6, ("before the loop", "DecoderState"), L, "center")
    box(ax, L, 5.75, 1.7, 0.42, "tensor", "*source ids", "(rows, S)")
    box(ax, L, 4.95, 1.7, 0.6, "stack", "*Encoder", "`model.encode", "runs once")
    box(ax, L, 4.05, 1.7, 0.42, "tensor", "*memory M", "(rows, S, d_model)", edge=MEMORY)
    cache = (
        "per layer: self k, v",
        "+1 position a step;",
        "cross k, v from M",
        "at step 1, then reused",
    )
    box(ax, L, 2.8, 1.85, 1.25, "cache", "*KV cache", "`DecoderCache", *cache)
    link(ax, L, 5.54, 5.25)
    link(ax, L, 4.65, 4.26)
    arrow(ax, (L, 3.84), (L, 3.425), color=MEMORY, lw=1.6)
    label(ax, L + 0.08, 3.56, "step 1", color=MEMORY)

    # one step t: only the newest token goes through the decoder
    title = ("one step t = 1, 2, …", "greedy_decode · beam_search")
    group(ax, 2.15, 0.75, 6.95, 6.0, title, 4.55, "center")
    newest = (r"*newest token $y_{t-1}$", "`prefix[:, -1:]", "(rows, 1), BOS at t = 1")
    box(ax, A, 1.25, 2.1, 0.6, "tensor", *newest)
    embed = ("*Embedding + positions", "`TransformerEmbedding", "at position t − 1")
    box(ax, A, 2.15, 2.1, 0.6, "embed", *embed)
    decoder = ("*Decoder", "`N × DecoderLayer", "", "", "one query position")
    box(ax, A, 3.25, 2.1, 1.0, "stack", *decoder)
    for dx, kind, name in [(-0.65, "attn", "self"), (0, "attn", "cross"), (0.65, "ffn", "FFN")]:
        box(ax, A + dx, 3.25 - LEAD / 2, 0.58, 0.24, kind, name)
    box(ax, A, 4.35, 2.1, 0.6, "embed", "*Linear, weight E", "`generator", "logits (rows, 1, V)")
    last = ("*last position", "`state.log_probs", "PAD, BOS → −∞; log_softmax")
    box(ax, A, 5.25, 2.1, 0.6, "choice", *last)
    for y0, y1 in [(1.55, 1.85), (2.45, 2.75), (3.75, 4.05), (4.65, 4.95)]:
        link(ax, A, y0, y1)
    arrow(ax, (L + 0.925, 3.05), (A - 1.05, 3.05), head="<|-|>")

    # choose, append, then stop or loop back
    choose = [
        r"*choose $y_t$",
        "greedy: argmax",
        "beam: best 2k of k beams × V",
        r"by $\sum\log p$; a finished one",
        r"scores $\sum\log p\ /\ \mathrm{lp}(|Y|)$",
        r"$\mathrm{lp} = ((5 + |Y|)\,/\,6)^{0.6}$",
    ]
    box(ax, K, 4.85, 2.1, 1.15, "choice", *choose)
    append = (
        r"*append $y_t$",
        "`state.advance",
        "beam: reorder the rows",
        "of prefix, M and cache",
    )
    box(ax, K, 3.05, 2.1, 0.78, "tensor", *append)
    diamond(ax, K, 1.25, 1.9, 0.9, "choice", "*EOS, or", "*length limit?")
    box(ax, K, 0.3, 2.1, 0.42, "tensor", r"*ids $y_1 \ldots y_T$", "(rows, T), no BOS")
    arrow(ax, (A + 1.05, 5.25), (K - 1.05, 5.25))
    link(ax, K, 4.275, 3.44)
    link(ax, K, 2.66, 1.7)
    link(ax, K, 0.8, 0.51)
    label(ax, K + 0.08, 0.65, "yes")
    arrow(ax, (K - 0.95, 1.25), (A + 1.05, 1.25), lw=1.6)  # the loop back to the start
    label(ax, (A + K) / 2 + 0.05, 1.4, "no", ha="center")
    label(ax, (A + K) / 2 + 0.05, 1.1, "t + 1", ha="center")
    notes = [
        "rows: the sentences (greedy), or",
        "sentences × k beams (beam search)",
        "length limit: S + 50, at most max_len",
    ]
    label(ax, 0.1, 0.55 - LEAD, "\n".join(notes), linespacing=1.3)
    return fig


FIGURES = {
    "transformer.png": draw_transformer,
    "decoder_layer.png": draw_decoder_layer,
    "decoding_step.png": draw_decoding_step,
}


def main(out: Path = OUT) -> None:
    """Draw every figure into the folder `out` (by default, next to this script)."""
    for name, draw in FIGURES.items():
        save(draw(), out / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
