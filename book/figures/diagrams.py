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

Coordinates are inches on a 7-inch page saved at 200 dpi (1400 px wide). The book shows a
page at most 684 px wide, so 11-pt text is about 15 px there (its capitals about 11 px). One
colour (Paul Tol's colour-blind-safe "light" scheme) means one kind of box in all three figures.
"""

import sys
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Polygon
from matplotlib.path import Path as Polyline

OUT = Path(__file__).resolve().parent
WIDTH, DPI, FONT, LEAD = 7.0, 200, 11, 0.2  # inches, dots per inch, points, inches per line
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


def tall(n):
    """The height of a box that holds n lines."""
    return n * LEAD + 0.14


def stack(ax, x, w, rows, y=0.0):
    """Boxes of width w centred on x, stacked upward from height y, with an arrow across every
    gap but the first. rows: (gap below, kind, *lines). Returns each box's (bottom, middle, top).
    """
    spans = []
    for gap, kind, *lines in rows:
        bottom, h = y + gap, tall(len(lines))
        box(ax, x, bottom + h / 2, w, h, kind, *lines)
        if spans:
            link(ax, x, y, bottom)
        spans.append((bottom, bottom + h / 2, bottom + h))
        y = bottom + h
    return spans


def trim(fig, ax, top):
    """End the page at height `top` (inches), so that every figure is as tall as it needs."""
    fig.set_size_inches(WIDTH, top)
    ax.set_ylim(0, top)
    return fig


# --------------------------------------------------------------------------------------------
def draw_transformer():
    """Paper figure 1 in our style: the encoder on the left, the decoder on the right."""
    fig, ax = page(10.0)
    enc, dec, w = 1.74, 4.95, 2.62  # column centres, box width
    gap = (enc + dec) / 2  # the lane between the columns, where the memory crosses
    embed = ("*Embedding + positions", r"$\sqrt{d_{model}}\,E[\mathrm{ids}]$ + PE, dropout")
    embed += ("`TransformerEmbedding", "(ch. 2)")
    add_norm = ("*Add & Norm", "`Residual (ch. 6)")
    ffn = ("*Feed-forward", "`FeedForward (ch. 7)")
    attention = "`MultiHeadAttention (ch. 5)"

    # encoder: ids -> embedding -> N x (self-attention, Add & Norm, FFN, Add & Norm) -> memory
    source = (r"*source ids  $x_1 \ldots x_S$", "(batch, S), ch. 1")
    self_attn = ("*Self-attention", attention, "!mask: source padding (ch. 4)")
    rows = [(0.05, "tensor", *source), (0.25, "embed", *embed), (0.54, "attn", *self_attn)]
    rows += [(0.22, "norm", *add_norm), (0.36, "ffn", *ffn), (0.22, "norm", *add_norm)]
    e = stack(ax, enc, w, rows)
    top = e[5][2] + 0.52  # the frame's top: room for its title
    title = ("Encoder  (ch. 8)", "N × EncoderLayer")
    group(ax, 0.06, e[1][2] + 0.12, enc + w / 2 + 0.14, top, title, enc - 0.07, "right")
    memory = ("*memory M", "(batch, S, d_model)")
    box(ax, enc, top + 0.25 + tall(2) / 2, w, tall(2), "tensor", *memory, edge=MEMORY)
    link(ax, enc, e[5][2], top + 0.25)
    residual(ax, enc, e[2][0] - 0.2, 0.22, e[3][1], enc - w / 2)
    residual(ax, enc, (e[3][2] + e[4][0]) / 2, 0.22, e[5][1], enc - w / 2)

    # decoder: shifted target -> embedding -> N x (masked self-attn, cross-attn, FFN) -> E^T
    target = (r"*target input  BOS $y_1 \ldots y_{T-1}$", "shifted right (ch. 11), (batch, T)")
    masked = ("*Masked self-attention", attention, "!mask: causal (ch. 4)")
    cross = ("*Cross-attention", "Q: decoder;  K, V: memory M", attention, "!mask: source padding")
    generator = ("*Linear, weight E (tied)", "`generator (ch. 10)", "logits h Eᵀ: (batch, T, V)")
    rows = [(0.05, "tensor", *target), (0.25, "embed", *embed), (0.54, "attn", *masked)]
    rows += [(0.22, "norm", *add_norm), (0.36, "attn", *cross), (0.22, "norm", *add_norm)]
    rows += [(0.36, "ffn", *ffn), (0.22, "norm", *add_norm), (0.77, "embed", *generator)]
    rows += [(0.22, "choice", r"*softmax → $p(y_t \mid y_{<t}, x)$")]
    d = stack(ax, dec, w, rows)
    title = ("Decoder  (ch. 9)", "N × DecoderLayer")
    group(ax, dec - w / 2 - 0.14, d[1][2] + 0.12, 6.6, d[7][2] + 0.52, title, dec + 0.07, "left")
    label(ax, dec - 0.08, (d[3][2] + d[4][0]) / 2, "Q", ha="right")
    for branch, (_, y1, _) in [(d[2][0] - 0.2, d[3]), ((d[3][2] + d[4][0]) / 2, d[5])]:
        residual(ax, dec, branch, 6.42, y1, dec + w / 2)
    residual(ax, dec, (d[5][2] + d[6][0]) / 2, 6.42, d[7][1], dec + w / 2)

    # the memory feeds the keys and values of every cross-attention (the box says so)
    y = top + 0.25 + tall(2) / 2
    path = [(enc + w / 2, y), (gap, y), (gap, d[4][1]), (dec - w / 2, d[4][1])]
    arrow(ax, *path, color=MEMORY, lw=1.6)
    # one table E: source and target embeddings (share_embeddings=True) and the generator
    arrow(ax, (enc + w / 2, e[1][1]), (dec - w / 2, e[1][1]), color=TIE, ls="--", head="-", lw=1.6)
    tie = [(dec + w / 2, e[1][1]), (6.76, e[1][1]), (6.76, d[8][1]), (dec + w / 2, d[8][1])]
    arrow(ax, *tie, color=TIE, ls="--", head="-", lw=1.6)
    tied = "tied: generator.weight is E"
    label(ax, 6.9, (e[1][1] + d[8][1]) / 2, tied, ha="center", color=TIE, rotation=90)

    # legend, in the free corner above the encoder
    kinds = [
        ("attn", "attention (MultiHeadAttention)"),
        ("ffn", "feed-forward"),
        ("norm", "Add & Norm:\nLayerNorm(x + Dropout(sublayer(x)))"),
        ("embed", "token table E"),
        ("choice", "output distribution"),
        ("tensor", "tensor"),
    ]
    y = d[-1][2] - 0.1
    for kind, text in kinds:
        y -= LEAD * text.count("\n") / 2  # a two-line entry is centred on its lines
        box(ax, 0.3, y, 0.3, 0.17, kind)
        label(ax, 0.55, y, text, linespacing=1.5)
        y -= 0.3 + LEAD * text.count("\n") / 2
    lines = [
        (SKIP, "-", "residual connection"),
        (MEMORY, "-", "memory M"),
        (TIE, "--", "one table E, shared and tied"),
    ]
    for color, ls, text in lines:
        arrow(ax, (0.15, y), (0.45, y), color=color, ls=ls, head="-", lw=1.6)
        label(ax, 0.55, y, text)
        y -= 0.3
    return trim(fig, ax, d[-1][2] + 0.08)


# --------------------------------------------------------------------------------------------
C, R, CW, RW, SIDE = 2.0, 5.6, 3.3, 2.6, 0.18  # centre and right columns, widths, skip line
SHAPE_T, SHAPE_H = "(batch, T, d_model)", "(batch, T, h·d_head)"


def add_norm(ax, y, start, name):
    """The post-LN Residual, bottom at y, around a sublayer whose input left the stream at
    height `start`; returns its top."""
    h = tall(2)
    box(ax, C, y + h / 2, CW, h, "norm", "*Add & Norm (post-LN)", f"`{name}: Residual")
    residual(ax, C, start, SIDE, y + h / 2, C - CW / 2)
    return y + h


def attention(ax, y, cross):
    """One attention sublayer of a DecoderLayer, from the stream at height y; returns its top.

    Q comes from the stream; K and V from the stream (self) or the memory (cross), through the
    KV cache that decoding keeps between steps (chapter 12)."""
    ya, yb = y + 0.4, y + 0.4 + tall(2) + 0.26  # bottoms of the rows: Q / K, V, then heads
    ym = yb + tall(5) / 2  # middle of the heads row
    kv = "M" if cross else "x"
    box(ax, C, ya + tall(2) / 2, 2.0, tall(2), "attn", r"*$Q = x\,W^Q$", "`in_proj")
    keys = (rf"*$K = {kv}\,W^K,\ V = {kv}\,W^V$", "`in_proj")
    box(ax, R, ya + tall(2) / 2, RW, tall(2), "attn", *keys)
    if cross:
        heads = ("*Cross-attention, h heads", "`cross_attn: MultiHeadAttention")
        mask = "!mask: source padding (keys)"
        cache = ("`cache['cross']", "k, v: (batch, S, h·d_head)", "projected once, then reused")
    else:
        heads = ("*Masked self-attention, h heads", "`self_attn: MultiHeadAttention")
        mask = "!mask: causal (no later positions)"
        cache = ("`cache['self']", "k, v: (batch, t, h·d_head)", "grows by 1 position a step")
    formula = r"softmax$(QK^{\top}/\sqrt{d_{head}}$ + mask$)\,V$"
    box(ax, C, ym, CW, tall(5), "attn", *heads, formula, mask, r"concat heads, $W^O$: out_proj")
    box(ax, R, ym, RW, tall(4), "cache", "*KV cache", *cache)
    link(ax, C, y, ya)
    link(ax, C, ya + tall(2), yb, f"Q {SHAPE_H}")
    yn = yb + tall(5) + 0.26
    link(ax, C, yb + tall(5), yn, SHAPE_T)
    link(ax, R, ya + tall(2), ym - tall(4) / 2)
    note = "first step only" if cross else "append"
    label(ax, R - 0.08, (ya + tall(2) + ym - tall(4) / 2) / 2, note, ha="right")
    arrow(ax, (R - RW / 2, ym), (C + CW / 2, ym))
    if cross:
        memory = ("*memory M (Encoder)", "(batch, S, d_model)")
        box(ax, R, y - 0.1, RW, tall(2), "tensor", *memory, edge=MEMORY)
        arrow(ax, (R, y - 0.1 + tall(2) / 2), (R, ya), color=MEMORY, lw=1.6)
    else:  # keys and values of the stream itself
        ax.plot([C], [y + 0.24], "o", ms=3.5, color=INK, zorder=3)
        arrow(ax, (C, y + 0.24), (R, y + 0.24), (R, ya))
    return add_norm(ax, yn, y + 0.1, "cross_residual" if cross else "self_residual")


def draw_decoder_layer():
    """One DecoderLayer (post-LN, norm_first=False) with tensor shapes and the KV cache."""
    fig, ax = page(11.0)
    x = ("*x: embedded target or layer below", SHAPE_T)
    box(ax, C, 0.05 + tall(2) / 2, CW, tall(2), "tensor", *x)
    y = attention(ax, 0.05 + tall(2), cross=False)
    y = attention(ax, y, cross=True)
    rows = [(0.4, "ffn", r"*ReLU$(x W_1 + b_1)$, dropout", "`feed_forward.linear1")]
    rows += [(0.26, "ffn", r"*$(\cdot)\,W_2 + b_2$", "`feed_forward.linear2")]
    f = stack(ax, C, CW, rows, y)
    link(ax, C, y, f[0][0])
    label(ax, C + 0.08, (f[0][2] + f[1][0]) / 2, "(batch, T, d_ff)", color="#444444")
    link(ax, C, f[1][2], f[1][2] + 0.26, SHAPE_T)
    y = add_norm(ax, f[1][2] + 0.26, y + 0.12, "ff_residual")
    link(ax, C, y, y + 0.22)
    top = ("*to the next layer, or the generator", SHAPE_T)
    box(ax, C, y + 0.22 + tall(2) / 2, CW, tall(2), "tensor", *top)
    label(ax, R, y + 0.2, "DecoderLayer", ha="center", size=FONT + 2, weight="bold")
    label(ax, R, y - 0.1, "post-LN (norm_first=False)", ha="center")
    notes = [
        "training: x holds all T target",
        "positions, and no cache is used",
        "",
        "decoding: T = 1 (the newest",
        "token); the self cache holds",
        "all t positions decoded so far",
    ]
    label(ax, R - RW / 2, y - 0.45 - 2.5 * LEAD, "\n".join(notes), linespacing=1.3)
    return trim(fig, ax, y + 0.22 + tall(2) + 0.05)


# --------------------------------------------------------------------------------------------
def draw_decoding_step():
    """One step t of greedy decoding (or beam search) with the KV cache: decoding.py."""
    fig, ax = page(8.0)
    L, A, K = 0.98, 3.25, 5.75  # columns: once per batch and the cache; the decoder; the choice
    AW = 2.3  # width of the boxes of the loop

    # one step t: only the newest token goes through the decoder
    newest = (r"*newest token $y_{t-1}$", "`prefix[:, -1:]", "(rows, 1), BOS at t = 1")
    embed = ("*Embedding + positions", "`TransformerEmbedding", "at position t − 1")
    decoder = ("*Decoder", "`N × DecoderLayer", "", "", "one query position")
    generator = ("*Linear, weight E", "`generator", "logits (rows, 1, V)")
    last = ("*last position", "`state.log_probs", "log_softmax;", "PAD, BOS → −∞")
    rows = [(1.05, "tensor", *newest), (0.28, "embed", *embed), (0.28, "stack", *decoder)]
    rows += [(0.28, "embed", *generator), (0.28, "choice", *last)]
    a = stack(ax, A, AW, rows)
    top = a[4][2] + 0.52
    title = ("one step t = 1, 2, …", "greedy_decode · beam_search")
    group(ax, 2.02, 0.9, 6.96, top, title, (2.02 + 6.96) / 2, "center")
    for dx, kind, name in [(-0.7, "attn", "self"), (0, "attn", "cross"), (0.7, "ffn", "FFN")]:
        box(ax, A + dx, a[2][1] - LEAD / 2, 0.62, 0.26, kind, name)

    # before the loop (DecoderState): the encoder runs once; the cache lives across steps
    y = top - 0.55  # the boxes hang from the frame's title, top to bottom
    before = [("tensor", "*source ids", "(rows, S)")]
    before += [("stack", "*Encoder", "`model.encode", "runs once")]
    before += [("tensor", "*memory M", "(rows, S, d_model)")]
    for i, (kind, *lines) in enumerate(before):
        if i:
            link(ax, L, y, y - 0.3)
            y -= 0.3
        edge = MEMORY if i == 2 else INK
        box(ax, L, y - tall(len(lines)) / 2, 1.75, tall(len(lines)), kind, *lines, edge=edge)
        y -= tall(len(lines))
    group(ax, 0.04, y - 0.12, 1.92, top, ("before the loop", "DecoderState"), L, "center")
    cache = ("*KV cache", "`DecoderCache", "per layer: self k, v", "+1 position a step;")
    cache += ("cross k, v from M", "at step 1, reused")
    box(ax, L, y - 0.55 - tall(6) / 2, 1.85, tall(6), "cache", *cache)
    arrow(ax, (L, y), (L, y - 0.55), color=MEMORY, lw=1.6)
    label(ax, L + 0.08, y - 0.3, "step 1", color=MEMORY)
    y = (max(a[2][0], y - 0.55 - tall(6)) + min(a[2][2], y - 0.55)) / 2  # level with both
    arrow(ax, (L + 0.925, y), (A - AW / 2, y), head="<|-|>")

    # choose, append, then stop or loop back
    choose = [
        r"*choose $y_t$",
        "greedy: argmax",
        "beam: the best 2k of",
        r"k beams × V by $\sum\log p$;",
        "a finished one scores",
        r"$\sum\log p\ /\ \mathrm{lp}(|Y|)$,",
        r"$\mathrm{lp} = ((5 + |Y|)\,/\,6)^{0.6}$",
    ]
    yc = a[4][2] - tall(7) / 2  # the choice's top is level with the last position's
    box(ax, K, yc, AW, tall(7), "choice", *choose)
    append = (r"*append $y_t$", "`state.advance", "beam: reorder the rows")
    append += ("of prefix, M and cache",)
    ya = (yc - tall(7) / 2 + a[0][1] + 0.45) / 2  # halfway between the choice and the diamond
    box(ax, K, ya, AW, tall(4), "tensor", *append)
    diamond(ax, K, a[0][1], 1.7, 0.9, "choice", "*EOS, or", "*length limit?")
    ids = (r"*ids $y_1 \ldots y_T$", "(rows, T), no BOS")
    box(ax, K, 0.05 + tall(2) / 2, AW, tall(2), "tensor", *ids)
    arrow(ax, (A + AW / 2, a[4][1]), (K - AW / 2, a[4][1]))
    link(ax, K, yc - tall(7) / 2, ya + tall(4) / 2)
    link(ax, K, ya - tall(4) / 2, a[0][1] + 0.45)
    link(ax, K, a[0][1] - 0.45, 0.05 + tall(2))
    label(ax, K + 0.08, (a[0][1] - 0.45 + 0.05 + tall(2)) / 2, "yes")
    arrow(ax, (K - 0.85, a[0][1]), (A + AW / 2, a[0][1]), lw=1.6)  # the loop back to the start
    label(ax, (A + AW / 2 + K - 0.85) / 2, a[0][1] + 0.16, "no", ha="center")
    label(ax, (A + AW / 2 + K - 0.85) / 2, a[0][1] - 0.16, "t + 1", ha="center")
    notes = [
        "rows: the sentences (greedy), or",
        "sentences × k beams (beam search)",
        "length limit: S + 50, at most max_len",
    ]
    label(ax, 0.05, 0.42, "\n".join(notes), linespacing=1.3)
    return trim(fig, ax, top + 0.05)


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
