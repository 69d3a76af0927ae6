// The translator in the page (chapter 14, appendix 18): the controls that the fragment
// of translator_page.py asks for, and the public API. The fragment's <script> loads
// this file only; this one loads the translator itself, from beside it, when a
// translation is first asked for: common.js and layers.js (what the model shares with
// the trainer: the ids, attention, the kernel, the layers), transformer.js (the shipped
// model and decoding, shaped like the Python package), shipped.js (reading the shipped
// files), sentencepiece.js (the tokenizer), domain.js (the in-domain check and the
// sentence splitter), then pretrained.js (loading, translating), which loads the
// shipped files in turn, by this file's loader. Nothing comes from another host.
//
//   transformerTranslate(direction, text, options) -> Promise of {translation,
//     outOfDomain, betterDirection, cost, threshold, sentences: [{source,
//     translation, sourcePieces, sourceIds, outputPieces, outputIds, score,
//     confidence, truncated, seconds, attention: {encoder, decoder, cross}}],
//     truncated, unknown, seconds, loadSeconds, message} (pretrained.js's translate:
//     Pretrained.translate sentence by sentence, Pretrained.out_of_domain and
//     better_direction, and what the page shows); options.progress({done, total,
//     sentences}) hears of each sentence, options.signal (an AbortSignal) stops it
//     between sentences
//   transformerDebug: what the tests compare with PyTorch (pretrained.js's debug)
//   transformerTranslator: {translate, mount, mountAll, debug, loadScript}
//
//   function             what it does (the page mirrors no Python module but these)
//   loadScript,          the one script loader: the ENGINE scripts, added once, in
//     loadEngine         order; the shipped files' scripts (shipped.js's loadFile)
//   languageNames        language code -> name, from the fragment's config
//   markup, mount        one translator's controls, built and wired (mountAll: all)
//   setStatus, showExamples, idle, changeDirection, chooseExample
//                        the controls' parts and events
//   clearResult, go      a submission: the old result cleared, then the new one
//   showProgress         a long text's sentences as they come, and their count
//   warningOn, switchDirection
//                        the warning: not a caption, or a caption in the other
//                        language, with a button that translates it the other way
//   notesOn, piecesHtml, confidenceText, timeText, show
//                        the result: warning, translation, notes and details
//   packSentence         explorer.py's _sentence: a sentence's maps, packed
//   showAttention,       the attention explorer (explorer.js) on the last text's
//     explorerBox        sentences
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
  // in this order: each reads the one before it as it starts
  // (book/_ext/translator_assets.py reads this list: the scripts the book's build copies)
  const ENGINE = ["common.js", "layers.js", "transformer.js", "shipped.js",
    "sentencepiece.js", "domain.js", "pretrained.js"];

  // ---------------------------------------------------------------- loading

  // a script beside this one, added to the page; async = false: the scripts added so
  // run in the order they were added, whichever arrives first. An asset (a shipped
  // file's script, which only stores its bytes) runs as soon as it arrives, and its tag
  // goes once it has run.
  function loadScript(name, asset = false) {
    return new Promise((resolve, reject) => {
      const tag = document.createElement("script");
      tag.src = new URL(name, BASE).href;
      tag.async = asset;
      tag.onload = () => {
        if (asset) tag.remove();
        resolve();
      };
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
    engine = engine || Promise.all(ENGINE.map(name => loadScript(name)))
      .then(() => window.transformerPretrained)
      .catch(error => { engine = null; throw error; });
    return engine;
  };

  const translate = async (direction, text, options) =>
    (await loadEngine()).translate(direction, text, options);

  // pretrained.js's debug functions, each loading the engine first
  const debug = Object.fromEntries(["load", "encode", "decode", "normalize",
    "encoderOutput", "firstStepLogProbs", "score", "sha256", "splitSentences",
    "captionCheck", "betterDirection", "pace"].map(name =>
    [name, async (...args) => (await loadEngine()).debug[name](...args)]));

  // whether a direction's weights are loaded, or loading
  const isLoaded = direction => {
    const loaded = window.transformerPretrained;
    return Boolean(loaded && loaded.isLoaded(direction));
  };

  // ---------------------------------------------------------------- the page

  const MAX_MAP = 100;  // pieces: longer sentences get no maps drawn (cells under 6 px)
  const WARNING = "This does not look like an image caption; expect a poor "
    + "translation. The model learned only from one-sentence descriptions of photos.";
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
        <label class="tx-field"><span>Direction</span>
          <select name="direction">${directions}</select></label>
        <label class="tx-field tx-wide"><span>Example</span>
          <select name="example"></select></label>
      </div>
      <textarea name="text" rows="3" spellcheck="false" aria-label="text to translate"
        placeholder="Type a sentence that describes a photo, e.g. A dog runs on the beach."
        ></textarea>
      <div class="tx-actions"><button type="button" name="translate">Translate</button>
        <span class="tx-status" role="status" aria-live="polite"></span></div>
      <div class="tx-result" hidden>
        <p class="tx-warning" role="alert" hidden><span><span class="tx-warning-text"
          ></span> <button type="button" name="switch" hidden></button></span></p>
        <p class="tx-translation"></p>
        <p class="tx-note" hidden></p>
        <dl class="tx-details">
          <dt>source pieces</dt><dd class="tx-source"></dd>
          <dt>output pieces</dt><dd class="tx-output"></dd>
          <dt>confidence</dt><dd class="tx-confidence"></dd>
          <dt>time</dt><dd class="tx-time"></dd>
        </dl>
        <div class="tx-attention"></div>
      </div>`;
  }

  // One translator on the page: its controls in root (a .transformer-translator), and
  // its state, `tx`: the config, the controls, ticket (the latest submission: the
  // results of older ones are dropped), running, stop (aborts the running one).
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
    const tx = {root, config, $, languages: languageNames(config), ticket: 0,
      running: false, stop: new AbortController(),
      direction: $("select[name=direction]"), example: $("select[name=example]"),
      textBox: $("textarea"), button: $("button[name=translate]"),
      status: $(".tx-status")};
    tx.direction.addEventListener("change", () => changeDirection(tx));
    tx.example.addEventListener("change", () => chooseExample(tx));
    tx.button.addEventListener("click", () => go(tx));
    $("button[name=switch]").addEventListener("click", () => switchDirection(tx));
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
      option("", `Choose a caption (${tx.languages[lang] || lang})…`)
      + captions.map((c, i) => option(i, c)).join("");
  }

  function idle(tx) {
    const which = tx.direction.value;
    const mb = tx.config.download_mb && tx.config.download_mb[which];
    setStatus(tx, isLoaded(which) ? "Ready."
      : `The first translation downloads the model${mb ? ` (${mb} MB)` : ""}.`,
    "idle");
  }

  // the other direction: drop a translation still running (it belongs to the old one),
  // and put the same example in the new source language where the text is one
  function changeDirection(tx) {
    tx.ticket += 1;
    tx.stop.abort();  // its remaining sentences are not translated
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

  // the last result off the page: translation, warning, notes, details and maps
  function clearResult(tx) {
    const $ = tx.$;
    $(".tx-result").hidden = true;
    $(".tx-warning").hidden = true;
    $(".tx-note").hidden = true;
    for (const part of [".tx-translation", ".tx-note", ".tx-source", ".tx-output",
      ".tx-confidence", ".tx-time", ".tx-warning-text"]) $(part).textContent = "";
    $(".tx-attention").replaceChildren();
  }

  // Translate pressed: the old result goes, then the text in the box is translated in
  // the chosen direction; nothing more while a translation runs
  async function go(tx) {
    if (tx.running) return;
    const text = tx.textBox.value, which = tx.direction.value, mine = ++tx.ticket;
    clearResult(tx);
    if (!text.trim()) {
      setStatus(tx, "Type a sentence first, or choose an example.", "empty", "warning");
      return;
    }
    tx.running = true;
    tx.button.disabled = true;
    tx.stop = new AbortController();
    setStatus(tx, isLoaded(which) ? "Translating…"
      : "Loading the model, then translating…", "running");
    await new Promise(resolve => setTimeout(resolve, 0));  // let the status show
    try {
      const progress = done => showProgress(tx, mine, done), signal = tx.stop.signal;
      const result =
        await translate(which, text, {attentionUpTo: MAX_MAP, progress, signal});
      if (mine !== tx.ticket) return;
      if (result.sentences.some(s => s.sourceIds.length)) {
        await show(tx, result, mine);
        window.transformerPretrained.pace.stop();  // the work since the last break
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

  // While a text of several sentences is translated: how many are done, and their
  // translations so far in the result's place (the details come at the end).
  function showProgress(tx, mine, {done, total, sentences}) {
    if (mine !== tx.ticket || total < 2) return;
    setStatus(tx, `Translating: ${done} of ${total} sentences done…`, "running");
    if (!done) return;
    const $ = tx.$;
    $(".tx-translation").textContent = sentences.map(s => s.translation).join(" ");
    $(".tx-translation").lang = tx.direction.value.split("-")[1];
    $(".tx-details").hidden = true;
    $(".tx-result").hidden = false;
  }

  // The warning over a flagged text: a caption in the other language (better
  // direction offered by the page) gets a button that translates it that way; other
  // text, the general warning.
  function warningOn(tx, result) {
    const $ = tx.$, better = result.betterDirection;
    const switcher = $("button[name=switch]");
    const offered = result.outOfDomain && better && tx.config.directions[better];
    $(".tx-warning").hidden = !result.outOfDomain;
    switcher.hidden = !offered;
    if (!offered) {
      $(".tx-warning-text").textContent = result.outOfDomain ? WARNING : "";
      switcher.textContent = "";
      return;
    }
    const names = tx.languages, [from, to] = result.direction.split("-");
    $(".tx-warning-text").textContent = `This looks like ${names[to] || to}, not `
      + `${names[from] || from}: translate ${offered} instead.`;
    switcher.textContent = `Translate ${offered}`;
    switcher.dataset.direction = better;
  }

  // the warning's button: the other direction, and the same text translated in it
  function switchDirection(tx) {
    tx.direction.value = tx.$("button[name=switch]").dataset.direction;
    changeDirection(tx);
    go(tx);
  }

  // the notes under a translation: sentences cut, unknown characters
  function notesOn(result) {
    const notes = [];
    if (result.truncated) notes.push(result.message);
    if (result.unknown) {
      const many = result.unknown > 1;
      notes.push(`${result.unknown} piece${many ? "s" : ""} of the text `
        + `${many ? "are" : "is"} outside the vocabulary (shown as <unk>): `
        + `the model never saw ${many ? "these characters" : "this character"}.`);
    }
    return notes;
  }

  // each sentence's pieces as spans, <unk> marked, a group a sentence
  const piecesHtml = (sentences, pieces, ids, unk) => sentences.map(s =>
    `<span class="tx-group">${s[pieces].map((p, i) => {
      const kind = s[ids][i] === unk ? "tx-piece tx-unk" : "tx-piece";
      return `<span class="${kind}">${esc(p)}</span>`;
    }).join("")}</span>`).join("");

  // the mean log-probability a token of each sentence translated
  function confidenceText(result) {
    const done = result.sentences.filter(s => s.confidence !== null);
    if (done.length === 1) {
      const c = done[0].confidence;
      return `mean log-probability ${c.toFixed(2)} a token `
        + `(a geometric mean of ${Math.exp(c).toFixed(2)} per token)`;
    }
    return `mean log-probability a token, sentence by sentence: ${
      done.map(s => s.confidence.toFixed(2)).join(", ")}`;
  }

  const timeText = result => `${result.seconds.toFixed(2)} s`
    + (result.sentences.length > 1 ? ` for ${result.sentences.length} sentences` : "")
    + (result.loadSeconds > 0.05 ? ` (and ${result.loadSeconds.toFixed(1)} s `
      + "to load and check the model, once)" : "");

  // the result in its place, the maps drawn last (paced)
  async function show(tx, result, mine) {
    const $ = tx.$, unk = window.transformerPretrained.UNK_ID;
    const sentences = result.sentences;
    warningOn(tx, result);
    $(".tx-translation").textContent = result.translation || "(nothing)";
    $(".tx-translation").lang = result.direction.split("-")[1];
    $(".tx-source").innerHTML = piecesHtml(sentences, "sourcePieces", "sourceIds", unk);
    $(".tx-output").innerHTML = piecesHtml(sentences, "outputPieces", "outputIds", unk);
    $(".tx-confidence").textContent = confidenceText(result);
    $(".tx-time").textContent = timeText(result);
    const notes = notesOn(result);
    $(".tx-note").textContent = notes.join(" ");
    $(".tx-note").hidden = !notes.length;
    $(".tx-details").hidden = false;
    $(".tx-result").hidden = false;
    if (await showAttention(tx, result, mine)) setStatus(tx, "Done.", "done");
  }

  // the explorer's packing of one sentence (explorer.py's _sentence): weights as
  // integers round(1000 w) in DIGITS, one digit below SMALL and two from there; the
  // decoder's only on and below the diagonal. attention[kind][layer][head][query][key]
  function packSentence(sentence, digits, small) {
    const codes = w => (w < small ? digits[w]
      : digits[small + Math.floor((w - small) / 64)] + digits[(w - small) % 64]);
    const title = sentence.source;
    const packed = {
      title: title.length <= 60 ? title : `${title.slice(0, 59).trimEnd()}…`,
      source: sentence.sourcePieces, output: sentence.outputPieces,
    };
    for (const kind of ["encoder", "decoder", "cross"]) {
      packed[kind] = sentence.attention[kind].map(heads => heads.map(grid =>
        grid.map((row, q) => row.slice(0, kind === "decoder" ? q + 1 : row.length)
          .map(w => codes(Math.round(w * 1000))).join("")).join("")));
    }
    return packed;
  }

  // the attention explorer (explorer.js) on the sentences of the text translated last,
  // one entry a sentence (a sentence the text repeats: once), packed a sentence at a
  // time with breaks between (pretrained.js's breathe); false if the submission was
  // dropped meanwhile
  async function showAttention(tx, result, mine) {
    const shell = tx.root.querySelector("template.tx-explorer");
    const code = tx.root.querySelector("script.tx-explorer-script");
    const place = tx.$(".tx-attention");
    if (!shell || !code) return true;
    const {digits, small} = JSON.parse(shell.dataset.packing);
    const drawn = result.sentences.filter((s, i, all) => s.attention
      && all.findIndex(other => other.source === s.source) === i);
    if (!drawn.length) {
      place.textContent =
        `The attention maps are drawn for sentences of at most ${MAX_MAP} pieces.`;
      return true;
    }
    const packed = [];
    for (const sentence of drawn) {
      packed.push(packSentence(sentence, digits, small));
      await window.transformerPretrained.breathe();
      if (mine !== tx.ticket) return false;
    }
    place.replaceChildren(explorerBox(shell, result.direction, packed));
    // runs as it joins the page, in its box
    const run = document.createElement("script");
    run.textContent = code.textContent;
    place.firstChild.append(run);
    return true;
  }

  // the explorer's box from its template, with the packed sentences of one direction
  function explorerBox(shell, direction, sentences) {
    const box = document.createElement("div");
    box.id = shell.dataset.id;
    box.className = "attnx";
    box.append(shell.content.cloneNode(true));
    // explorer_html's direction menu: one direction here, so hidden
    const menu = box.querySelector("select[name=direction]");
    menu.add(new Option(direction, 0));
    menu.closest("label").hidden = true;
    const data = document.createElement("script");
    data.type = "application/json";
    data.className = "attnx-data";
    data.textContent = JSON.stringify([{name: direction, sentences}]);
    box.append(data);
    return box;
  }

  function mountAll() {
    document.querySelectorAll(".transformer-translator").forEach(mount);
  }

  window.transformerTranslator = {translate, mount, mountAll, debug, loadScript};
  window.transformerTranslate =
    (direction, text, options) => translate(direction, text, options);
  window.transformerDebug = debug;
  mountAll();
})();
