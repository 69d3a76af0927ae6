// The attention explorer of transformer.explorer: reads the packed weights and draws the chosen
// map as SVG, as wide as its box allows (at most WIDTH), again when the window is resized.
// explorer.py fills in the placeholders in capitals between double underscores; explorer.css
// colours the cells from their weight (--w) in the book's light or dark theme.
//
//   function      what it does
//   unpack        the integers of one packed string (explorer.py's packing)
//   selected      the chosen map: queries, keys, weights
//   setOptions, refresh
//                 the menus: the sentences, layers and heads offered
//   draw          the map as SVG; highlight marks the hovered cell's labels
(() => {
  "use strict";
  const ID = "__ID__", WIDTH = __WIDTH__, MAX_CELL = 26, MAX_LABEL = 150;  // px
  const DIGITS = "__DIGITS__", SMALL = __SMALL__;  // the packing of the weights, see explorer.py
  // this script's own explorer, even where another output on the page reuses the id
  const own = document.currentScript && document.currentScript.parentElement;
  const root = own && own.id === ID ? own : document.getElementById(ID);
  const data = JSON.parse(root.querySelector(".attnx-data").textContent);
  const [direction, sentence, kind, layer, head] = ["direction", "sentence", "kind", "layer", "head"]
    .map(name => root.querySelector(`select[name="${name}"]`));
  const [figure, axes, readout] = [".attnx-figure", ".attnx-axes", ".attnx-readout"]
    .map(selector => root.querySelector(selector));
  const HINT = "hover over a cell to read its weight";
  const measure = document.createElement("canvas").getContext("2d");
  let shown = null;  // the map drawn last: {queries, keys, weights}
  let drawnWidth = 0;  // px: the room the map was drawn for
  // px: the room for the map, the figure's width (WIDTH where it is not laid out)
  const room = () => Math.min(WIDTH, figure.clientWidth || WIDTH);

  const esc = text => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
  // white for 0 to dark blue for 1
  const colour = w => `rgb(${Math.round(255 - 247 * w)},${Math.round(255 - 207 * w)},${Math.round(255 - 148 * w)})`;

  // the integers 0..1000 of one packed string: one digit below SMALL, two from there on
  function unpack(text) {
    const values = [];
    for (let i = 0; i < text.length; i++) {
      const d = DIGITS.indexOf(text[i]);
      values.push(d < SMALL ? d : SMALL + (d - SMALL) * DIGITS.length + DIGITS.indexOf(text[++i]));
    }
    return values;
  }

  // the chosen map: query and key pieces, weights[q][k] in [0, 1], null where masked;
  // "mean" averages the layer's heads
  function selected() {
    const s = data[direction.value].sentences[sentence.value];
    const causal = kind.value === "decoder";
    const queries = kind.value === "encoder" ? s.source : s.output;
    const keys = kind.value === "cross" ? s.source : queries;
    const heads = s[kind.value][layer.value - 1];
    const grids = (head.value === "mean" ? heads : [heads[head.value - 1]]).map(text => {
      const values = unpack(text);
      let i = 0;  // the decoder's maps hold only k <= q
      return queries.map((_, q) => keys.map((_, k) => (causal && k > q ? null : values[i++])));
    });
    const weights = grids[0].map((row, q) => row.map((w, k) =>
      w === null ? null : grids.reduce((sum, grid) => sum + grid[q][k], 0) / grids.length / 1000));
    return {queries, keys, weights};
  }

  // replace a menu's options, keeping its choice where it is still offered
  function setOptions(select, entries) {
    const keep = select.value;
    select.length = 0;
    for (const [value, label] of entries) select.add(new Option(label, value));
    if (entries.some(([value]) => String(value) === keep)) select.value = keep;
  }

  // offer the sentences of the direction, and the layers and heads of the sentence's kind
  function refresh() {
    const d = data[direction.value];
    setOptions(sentence, d.sentences.map((s, i) => [i, `${i + 1}. ${s.title}`]));
    const layers = d.sentences[sentence.value][kind.value];
    setOptions(layer, layers.map((_, i) => [i + 1, `${i + 1}`]));
    setOptions(head, [...layers[0].map((_, i) => [i + 1, `${i + 1}`]), ["mean", "mean of heads"]]);
  }

  function draw() {
    const {queries, keys, weights} = shown = selected();
    measure.font = "bold 12px sans-serif";  // room for the labels a hover marks in bold
    const textWidth = text => measure.measureText(text).width;
    const fit = text => {  // shorten a label wider than MAX_LABEL
      while (text.length > 2 && textWidth(text) > MAX_LABEL) text = text.slice(0, -2) + "…";
      return text;
    };
    const labels = pieces => Math.ceil(Math.min(MAX_LABEL, Math.max(...pieces.map(textWidth)))) + 8;
    const left = labels(queries), top = labels(keys);
    drawnWidth = room();
    const cell = Math.max(1, Math.min(MAX_CELL, Math.floor((drawnWidth - left - 1) / keys.length)));
    const font = cell >= 16 ? 12 : 11;
    const every = Math.ceil(font / cell);  // label every n-th piece only if cells are smaller than text
    const width = left + keys.length * cell + 1, height = top + queries.length * cell + 1;
    const svg = [
      `<svg width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-size="${font}">`,
      `<defs><pattern id="${ID}-mask" width="6" height="6" patternUnits="userSpaceOnUse" `,
      `patternTransform="rotate(45)"><rect class="attnx-hatch-bg" width="6" height="6" fill="#f0f0f0"/>`,
      `<line class="attnx-hatch" x1="0" y1="0" x2="0" y2="6" stroke="#c8c8c8" stroke-width="2"/>`,
      "</pattern></defs>",
    ];
    keys.forEach((piece, k) => {
      if (k % every === 0) svg.push(`<text data-k="${k}" dominant-baseline="central" transform="translate(${left + (k + 0.5) * cell},${top - 4}) rotate(-90)">${esc(fit(piece))}</text>`);
    });
    queries.forEach((piece, q) => {
      if (q % every === 0) svg.push(`<text data-q="${q}" x="${left - 4}" y="${top + (q + 0.5) * cell}" text-anchor="end" dominant-baseline="central">${esc(fit(piece))}</text>`);
    });
    weights.forEach((row, q) => row.forEach((w, k) => {
      const at = `x="${left + k * cell}" y="${top + q * cell}" width="${cell}" height="${cell}" data-q="${q}" data-k="${k}"`;
      const name = `${esc(queries[q])} → ${esc(keys[k])}`;
      svg.push(w === null
        ? `<rect class="attnx-masked" ${at} fill="url(#${ID}-mask)"><title>${name}: masked</title></rect>`
        : `<rect ${at} fill="${colour(w)}" style="--w:${(100 * w).toFixed(1)}%" data-value="${w.toFixed(3)}">`
          + `<title>${name}: ${w.toFixed(3)}</title></rect>`);
    }));
    svg.push(`<rect x="${left}" y="${top}" width="${keys.length * cell}" height="${queries.length * cell}" `,
      `class="attnx-frame" fill="none" stroke="#999" pointer-events="none"/></svg>`);
    figure.innerHTML = svg.join("");
    axes.textContent = kind.selectedOptions[0].dataset.axes;
    readout.textContent = HINT;
    Object.assign(root.dataset, {direction: data[direction.value].name, sentence: sentence.value,
      kind: kind.value, layer: layer.value, head: head.value});
  }

  // hovering a cell shows its weight and marks its query's and key's labels
  function highlight(q, k) {
    for (const text of figure.querySelectorAll("text")) {
      text.classList.toggle("attnx-hot", text.dataset.q === q || text.dataset.k === k);
    }
  }
  figure.addEventListener("mouseover", event => {
    const {q, k, value} = event.target.dataset || {};
    if (q === undefined) return;
    highlight(q, k);
    readout.textContent = `${shown.queries[q]} → ${shown.keys[k]}: ${value === undefined ? "masked" : value}`;
  });
  figure.addEventListener("mouseleave", () => {
    highlight(null, null);
    readout.textContent = HINT;
  });
  root.addEventListener("change", () => {
    refresh();
    draw();
  });
  // a narrower or wider box (a phone turned, a window resized): the map drawn again to fit,
  // once a frame at most; an explorer taken off the page (the translator's, replaced by the
  // next translation's) stops listening
  let pending = false;
  const onResize = () => {
    if (!root.isConnected) {
      window.removeEventListener("resize", onResize);
      return;
    }
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (room() !== drawnWidth) draw();
    });
  };
  window.addEventListener("resize", onResize);
  refresh();
  draw();
})();
