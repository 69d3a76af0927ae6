// The translator in the page (chapter 14, appendix 18): the controls that the fragment
// of translator_page.py asks for, and the public API. The fragment's <script> loads
// this file only; this one loads the translator itself, from beside it, when a
// translation is first asked for: transformer.js (the model and decoding, shaped like
// the Python package), then pretrained.js (the shipped files, loading, translating),
// which loads the weights in turn. Nothing comes from another host.
//
//   transformerTranslate(direction, text, options) -> Promise of {translation,
//     sourcePieces, sourceIds, outputPieces, outputIds, score, confidence, seconds,
//     loadSeconds, truncated, message, attention: {encoder, decoder, cross}}
//     (pretrained.js's translate: Pretrained.translate, and what the page shows)
//   transformerDebug: what the tests compare with PyTorch (pretrained.js's debug)
//   transformerTranslator: {translate, mount, mountAll, debug}
//
//   function             what it does (the page mirrors no Python module but these)
//   loadScript,          transformer.js and pretrained.js, added once, in order
//     loadEngine
//   languageNames        language code -> name, from the fragment's config
//   markup, mount        one translator's controls, built and wired (mountAll: all)
//   showExamples, idle, changeDirection, chooseExample, go, show, notesOn
//                        the controls' parts and events
//   packSentence         explorer.py's _sentence: a translation's maps, packed
//   showAttention        the attention explorer (explorer.js) on them
(() => {
  "use strict";
  if (window.transformerTranslator) {
    // the script is on the page twice: mount the new containers
    window.transformerTranslator.mountAll();
    return;
  }
  const script = document.currentScript;
  // the folder of this script, and of the scripts it loads
  const BASE = new URL(".", script && script.src ? script.src : location.href).href;
  // in this order: pretrained.js reads window.transformerModel as it starts
  const ENGINE = ["transformer.js", "pretrained.js"];

  // ---------------------------------------------------------------- loading

  // a script beside this one, added to the page; async = false: the scripts added so
  // run in the order they were added, whichever arrives first
  function loadScript(name) {
    return new Promise((resolve, reject) => {
      const tag = document.createElement("script");
      tag.src = new URL(name, BASE).href;
      tag.async = false;
      tag.onload = resolve;
      tag.onerror = () => {
        tag.remove();
        reject(new Error(`could not load ${tag.src}; `
          + "the book's build writes it (book/_ext/translator_assets.py)"));
      };
      document.head.appendChild(tag);
    });
  }

  // The Promise of pretrained.js's {translate, debug, isLoaded, UNK_ID}, transformer.js
  // and pretrained.js loaded once (again after a failure).
  let engine = null;
  const loadEngine = () => {
    const loaded = window.transformerPretrained;
    if (loaded) return Promise.resolve(loaded);
    engine = engine || Promise.all(ENGINE.map(loadScript))
      .then(() => window.transformerPretrained)
      .catch(error => { engine = null; throw error; });
    return engine;
  };

  const translate = async (direction, text, options) =>
    (await loadEngine()).translate(direction, text, options);

  // pretrained.js's debug functions, each loading the engine first
  const debug = Object.fromEntries(["load", "encode", "decode", "normalize",
    "encoderOutput", "firstStepLogProbs", "score", "sha256"].map(name =>
    [name, async (...args) => (await loadEngine()).debug[name](...args)]));

  // whether a direction's weights are loaded, or loading
  const isLoaded = direction => {
    const loaded = window.transformerPretrained;
    return Boolean(loaded && loaded.isLoaded(direction));
  };

  // ---------------------------------------------------------------- the page

  // mean log p a token below this: unlike the captions it learned (about 1 val
  // caption in 20 falls below it, and most sentences typed from outside the
  // photo-caption domain)
  const LOW_CONFIDENCE = -1.2;
  const MAX_MAP = 100;  // pieces: longer texts get no maps drawn (cells under 6 px)
  const esc = text => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  const option = (value, label) =>
    `<option value="${esc(value)}">${esc(label)}</option>`;

  // language code -> name, from the config's directions: "en-de" is
  // "English → German" (translator_page.py's LANGUAGES); config.languages first, where
  // the fragment gives one
  function languageNames(config) {
    const names = {...config.languages};
    for (const [direction, label] of Object.entries(config.directions)) {
      const codes = direction.split("-"), parts = label.split(" → ");
      if (parts.length !== codes.length) continue;
      codes.forEach((code, i) => { names[code] = names[code] || parts[i]; });
    }
    return names;
  }

  // the translator's controls, empty
  function markup(config) {
    const directions = Object.entries(config.directions)
      .map(([value, label]) => option(value, label)).join("");
    return `
      <div class="tx-controls">
        <label>direction <select name="direction">${directions}</select></label>
        <label class="tx-wide">example <select name="example"></select></label>
      </div>
      <textarea name="text" rows="2" spellcheck="false"
        aria-label="text to translate"></textarea>
      <div class="tx-actions"><button type="button" name="translate">Translate</button>
        <span class="tx-status" role="status"></span></div>
      <div class="tx-result" hidden>
        <p class="tx-translation"></p>
        <p class="tx-note"></p>
        <dl>
          <dt>source pieces</dt><dd class="tx-source"></dd>
          <dt>output pieces</dt><dd class="tx-output"></dd>
          <dt>confidence</dt><dd class="tx-confidence"></dd>
          <dt>time</dt><dd class="tx-time"></dd>
        </dl>
      </div>
      <div class="tx-attention"></div>`;
  }

  // One translator on the page: its controls in root (a .transformer-translator), and
  // its state, `tx`: the config, the controls, history (direction -> the packed
  // sentences translated here, newest first), ticket (the latest translation asked
  // for: older ones are dropped), running.
  function mount(root) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "yes";
    const config = JSON.parse(root.querySelector("script.tx-config").textContent);
    const ui = document.createElement("div");
    ui.className = "tx-ui";
    ui.innerHTML = markup(config);
    root.querySelector(".tx-fallback")?.remove();
    root.prepend(ui);
    const $ = selector => ui.querySelector(selector);
    const tx = {root, config, $, languages: languageNames(config), history: {},
      ticket: 0, running: false, direction: $("select[name=direction]"),
      example: $("select[name=example]"), textBox: $("textarea"), button: $("button"),
      status: $(".tx-status")};
    tx.direction.addEventListener("change", () => changeDirection(tx));
    tx.example.addEventListener("change", () => chooseExample(tx));
    tx.button.addEventListener("click", () => go(tx));
    tx.textBox.addEventListener("keydown", event => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) go(tx);
    });
    showExamples(tx);
    tx.textBox.value = (config.examples[source(tx)] || [""])[0];
    idle(tx);
  }

  const source = tx => tx.direction.value.split("-")[0];  // the source language

  // the status line, and root.dataset.state: idle, running, done, empty or error
  // (for tests)
  function setStatus(tx, text, state, kind = "") {
    tx.status.textContent = text;
    tx.status.dataset.kind = kind;
    tx.root.dataset.state = state;
  }

  function showExamples(tx) {
    const lang = source(tx), captions = tx.config.examples[lang] || [];
    tx.example.innerHTML =
      option("", `a test2016 caption (${tx.languages[lang] || lang})…`)
      + captions.map((c, i) => option(i, c)).join("");
  }

  function idle(tx) {
    const which = tx.direction.value;
    const mb = tx.config.download_mb && tx.config.download_mb[which];
    setStatus(tx, isLoaded(which) ? "ready"
      : `the ${which} weights${mb ? ` (${mb} MB)` : ""} load on the first Translate`,
    "idle");
  }

  // the other direction: drop a translation still running (it belongs to the old one),
  // and put the same example in the new source language where the text is one
  function changeDirection(tx) {
    tx.ticket += 1;
    const examples = tx.config.examples, text = tx.textBox.value;
    const from = Object.keys(examples).find(lang => examples[lang].includes(text));
    const i = from ? examples[from].indexOf(text) : -1;
    showExamples(tx);
    if (i >= 0 && examples[source(tx)]) tx.textBox.value = examples[source(tx)][i];
    tx.running = false;
    tx.button.disabled = false;
    idle(tx);
  }

  function chooseExample(tx) {
    if (tx.example.value !== "") {
      tx.textBox.value = tx.config.examples[source(tx)][tx.example.value];
    }
    tx.example.value = "";
  }

  // Translate pressed: the text in the box, in the chosen direction; nothing more
  // while a translation runs
  async function go(tx) {
    if (tx.running) return;
    const text = tx.textBox.value, which = tx.direction.value, mine = ++tx.ticket;
    if (!text.trim()) {
      setStatus(tx, "Type a sentence first, or choose an example.", "empty", "warning");
      return;
    }
    tx.running = true;
    tx.button.disabled = true;
    setStatus(tx, isLoaded(which) ? "translating…"
      : "loading the weights, then translating…", "running");
    await new Promise(resolve => setTimeout(resolve, 0));  // let the status show
    try {
      const result = await translate(which, text, {attentionUpTo: MAX_MAP});
      if (mine !== tx.ticket) return;
      if (result.sourceIds.length) {
        show(tx, result);
      } else {  // e.g. only zero-width characters
        setStatus(tx, result.message, "empty", "warning");
      }
    } catch (error) {
      if (mine === tx.ticket) {
        setStatus(tx, `The translator failed: ${error.message}`, "error", "error");
      }
    } finally {
      if (mine === tx.ticket) { tx.running = false; tx.button.disabled = false; }
    }
  }

  // the notes under a translation: cut, unknown characters, low confidence
  function notesOn(result) {
    const notes = [];
    if (result.truncated) notes.push(result.message);
    if (result.unknown) {
      const many = result.unknown > 1;
      notes.push(`${result.unknown} piece${many ? "s" : ""} of the text `
        + `${many ? "are" : "is"} outside the vocabulary (shown as <unk>): `
        + `the model never saw ${many ? "these characters" : "this character"}.`);
    }
    if (result.confidence < LOW_CONFIDENCE || result.unknown) {
      notes.push(`Low confidence (below ${LOW_CONFIDENCE}, `
        + "where about 1 caption in 20 falls): this text is unlike the image "
        + "captions the model learned from (Multi30k: one-sentence descriptions "
        + "of photos). Expect a poor translation.");
    }
    return notes;
  }

  // pieces as spans, <unk> marked
  const piecesHtml = (pieces, ids, unk) => pieces.map((p, i) => {
    const kind = ids[i] === unk ? "tx-piece tx-unk" : "tx-piece";
    return `<span class="${kind}">${esc(p)}</span>`;
  }).join("");

  function show(tx, result) {
    const $ = tx.$, unk = window.transformerPretrained.UNK_ID;
    $(".tx-result").hidden = false;
    $(".tx-translation").textContent = result.translation || "(nothing)";
    $(".tx-translation").lang = result.direction.split("-")[1];
    $(".tx-source").innerHTML = piecesHtml(result.sourcePieces, result.sourceIds, unk);
    $(".tx-output").innerHTML = piecesHtml(result.outputPieces, result.outputIds, unk);
    $(".tx-confidence").textContent =
      `mean log-probability ${result.confidence.toFixed(2)} a token `
      + `(a geometric mean of ${Math.exp(result.confidence).toFixed(2)} per token)`;
    $(".tx-time").textContent = `${result.seconds.toFixed(2)} s`
      + (result.loadSeconds > 0.05 ? ` (and ${result.loadSeconds.toFixed(1)} s `
        + "to load and check the weights, once)" : "");
    const notes = notesOn(result);
    $(".tx-note").textContent = notes.join(" ");
    $(".tx-note").hidden = !notes.length;
    if (result.attention) {
      showAttention(tx, result);
    } else {
      $(".tx-attention").textContent =
        `The attention maps are drawn for texts of at most ${MAX_MAP} pieces.`;
    }
    setStatus(tx, "done", "done");
  }

  // the explorer's packing of one sentence (explorer.py's _sentence): weights as
  // integers round(1000 w) in DIGITS, one digit below SMALL and two from there; the
  // decoder's only on and below the diagonal. attention[kind][layer][head][query][key]
  function packSentence(result, digits, small) {
    const codes = w => (w < small ? digits[w]
      : digits[small + Math.floor((w - small) / 64)] + digits[(w - small) % 64]);
    const title = result.sourcePieces.join("").replaceAll("\u2581", " ").trim();
    const packed = {
      title: title.length <= 60 ? title : `${title.slice(0, 59).trimEnd()}…`,
      source: result.sourcePieces, output: result.outputPieces,
    };
    for (const kind of ["encoder", "decoder", "cross"]) {
      packed[kind] = result.attention[kind].map(heads => heads.map(grid =>
        grid.map((row, q) => row.slice(0, kind === "decoder" ? q + 1 : row.length)
          .map(w => codes(Math.round(w * 1000))).join("")).join("")));
    }
    return packed;
  }

  // the attention explorer (explorer.js) on the sentences translated here,
  // newest first
  function showAttention(tx, result) {
    const shell = tx.root.querySelector("template.tx-explorer");
    const code = tx.root.querySelector("script.tx-explorer-script");
    if (!shell || !code) return;
    const {digits, small} = JSON.parse(shell.dataset.packing);
    const history = tx.history;
    const list = history[result.direction] = history[result.direction] || [];
    list.unshift(packSentence(result, digits, small));
    list.length = Math.min(list.length, 8);
    const names = [result.direction,
      ...Object.keys(history).filter(d => d !== result.direction)];
    const box = document.createElement("div");
    box.id = shell.dataset.id;
    box.className = "attnx";
    box.append(shell.content.cloneNode(true));
    // explorer_html's direction menu
    const menu = box.querySelector("select[name=direction]");
    names.forEach((name, i) => menu.add(new Option(name, i)));
    const data = document.createElement("script");
    data.type = "application/json";
    data.className = "attnx-data";
    data.textContent =
      JSON.stringify(names.map(name => ({name, sentences: history[name]})));
    box.append(data);
    tx.$(".tx-attention").replaceChildren(box);
    // runs as it joins the page, in box
    const run = document.createElement("script");
    run.textContent = code.textContent;
    box.append(run);
  }

  function mountAll() {
    document.querySelectorAll(".transformer-translator").forEach(mount);
  }

  window.transformerTranslator = {translate, mount, mountAll, debug};
  window.transformerTranslate =
    (direction, text, options) => translate(direction, text, options);
  window.transformerDebug = debug;
  mountAll();
})();
