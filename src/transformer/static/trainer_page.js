// Watch it learn (chapter 11): the reversal Transformer of trainer.js trained in a Web
// Worker while the page draws the training and held-out losses, the exact-match rate,
// the speed, the cross-attention of one sequence (any layer, any head) and the model's
// current output for a sequence the reader types. Load common.js, layers.js,
// trainer.js and trainer_session.js first; all five work from file:// and over http,
// and ask nothing of another host.
//
//   <div class="reversal-trainer" data-options='{"d_model": 32}'></div> is mounted on
//   load (reversalTrainer.mountAll(); reversalTrainer.mount(element, options) by hand)
//   trainReversal(options) -> Promise of {steps, seconds, losses, exactMatch,
//     validationLoss, stepsPerSecond, worker, config, reached, heldOut}: a run without a
//     page, for tests and benchmarks: options.steps steps, or with options.target until
//     the exact match on options.heldOut (1,000) held-out sequences reaches it or
//     options.maxSeconds (60) pass
//
// The widget measures what trainReversal does: the exact match on the same 1,000
// held-out sequences (every 2 s, a slice of them at a time between slices of training),
// and the step at which it first reaches options.target (99%), asked by the same rule.
(() => {
  "use strict";
  if (window.reversalTrainer) {  // the script is on the page twice
    window.reversalTrainer.mountAll();
    return;
  }
  // the task's ids, as trainer.js (loaded before this file) has them
  const {FIRST, N_SYMBOLS, EOS_ID} = window.transformerTrainer || {};
  const VOCAB = FIRST + N_SYMBOLS;
  const LETTERS = "abcdefghijklmnop";  // the symbols, ids 4..19
  // the widget's model: it learns in about a minute in a browser (the chapter's is
  // d_model 64, 4 heads, 2 layers, d_ff 128)
  const DEFAULTS = {seed: 0, d_model: 32, n_heads: 2, n_layers: 1, warmup: 100, factor: 1,
    labelSmoothing: 0.1, batchSize: 64, heldOut: 1000, target: 0.99};
  const CHOICES = {d_model: [8, 16, 32, 64], n_heads: [1, 2, 4], n_layers: [1, 2],
    factor: [0.25, 0.5, 1, 2, 4, 100], labelSmoothing: [0, 0.05, 0.1, 0.2],
    warmup: [25, 50, 100, 200, 400]};
  const LIVE = ["factor", "labelSmoothing", "warmup"];  // changed without a reset

  // ---------------------------------------------------------------- the worker

  // A training session (trainer_session.js) in a Web Worker built from the sources of
  // common.js, layers.js, trainer.js and trainer_session.js (a page opened from disk may
  // not start a worker from a file, but may from a Blob); where no worker starts, the
  // same session runs on this thread, in short slices.
  function startRunner(inWorker = true) {
    const listeners = [], deliver = data => listeners.forEach(fn => fn(data));
    const session = window.transformerSession;
    if (!session) throw new Error("trainer_page.js needs trainer_session.js before it");
    try {
      if (!inWorker) throw new Error("asked to run on this thread");
      const url = URL.createObjectURL(
        new Blob([session.workerSource()], {type: "text/javascript"}));
      const worker = new Worker(url);
      worker.onmessage = event => {
        URL.revokeObjectURL(url);
        deliver(event.data);
      };
      worker.onerror = event => deliver({type: "error", message: event.message});
      return {worker: true, post: message => worker.postMessage(message),
        listen: fn => listeners.push(fn), stop: () => worker.terminate()};
    } catch (error) {
      let stopped = false;
      const run = session.createSession(data => {
        if (!stopped) setTimeout(() => deliver(data), 0);
      });
      return {worker: false, listen: fn => listeners.push(fn),
        post: message => setTimeout(() => {
          try {
            run.handle(message);
          } catch (e) {
            deliver({type: "error", message: e.message});
          }
        }, 0),
        stop: () => { stopped = true; run.handle({type: "pause"}); }};
    }
  }

  // options: seed, steps (200), target and maxSeconds (60), d_model, n_heads, d_ff,
  // n_layers, batchSize, warmup, factor, labelSmoothing, float64, heldOut (1,000);
  // trains in a worker (on this thread with worker: false) and resolves with the run
  function trainReversal(options = {}) {
    const {steps = 200, worker = true, target, maxSeconds = 60, ...rest} = options;
    return new Promise((resolve, reject) => {
      const runner = startRunner(worker);
      runner.listen(message => {
        if (message.type === "result") {
          runner.stop();
          resolve(message);
        } else if (message.type === "error") {
          runner.stop();
          reject(new Error(message.message));
        }
      });
      runner.post({type: "run", steps, target, maxSeconds, options: {...DEFAULTS, ...rest}});
    });
  }

  // ---------------------------------------------------------------- symbols

  // "abc" or "a b c" -> ids [4, 5, 6]; anything else is reported, not read
  function parseSymbols(text) {
    const ids = [], bad = [];
    for (const ch of text.toLowerCase()) {
      const k = LETTERS.indexOf(ch);
      if (k >= 0) ids.push(FIRST + k);
      else if (!/[\s,]/.test(ch)) bad.push(ch);
    }
    return {ids, bad};
  }

  const symbol = id => (id === EOS_ID ? "⏎"
    : id >= FIRST && id < FIRST + N_SYMBOLS ? LETTERS[id - FIRST] : `<${id}>`);
  const spell = ids => ids.map(symbol).join(" ");

  // H(q): the floor that label smoothing sets under the loss (chapter 11)
  const floorOf = eps => window.transformerTrainer.smoothingFloor(VOCAB, eps);

  // ---------------------------------------------------------------- drawing

  // the canvas's 2-D context, scaled to CSS pixels on a sharp backing store
  function context2d(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || Number(canvas.getAttribute("width"));
    const height = canvas.clientHeight || Number(canvas.getAttribute("height"));
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    return {ctx, width, height};
  }

  // the training loss (bucketed to the pixels: the mean of each bucket) and the held-out
  // loss (dots) against the step, with ln V (a uniform guess) and H(q) (the floor)
  function drawLosses(canvas, history, eps) {
    const {ctx, width, height} = context2d(canvas);
    const left = 34, bottom = height - 18, top = 6, right = width - 6;
    const steps = Math.max(100, history.train.length * 1.1);
    const early = history.train.slice(0, 20).filter(Number.isFinite);
    const yMax = Math.max(4, Math.ceil(Math.max(0, ...early)));
    const x = step => left + (right - left) * step / steps;
    const y = loss => bottom - (bottom - top) * Math.min(loss, yMax) / yMax;
    drawAxes(ctx, {left, right, top, bottom}, steps, yMax, y);
    // a dashed line across; its label at the right above it, or at the left below it
    const guide = (value, color, label, atLeft) => {
      ctx.strokeStyle = color;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(left, y(value));
      ctx.lineTo(right, y(value));
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = color;
      ctx.fillText(label, atLeft ? left + 4 : right - ctx.measureText(label).width - 2,
        atLeft ? y(value) + 11 : y(value) - 3);
    };
    guide(Math.log(VOCAB), "#888", `ln ${VOCAB}: a uniform guess`, false);
    guide(floorOf(eps), "#2a9d8f", `H(q) = ${floorOf(eps).toFixed(2)}: the floor`, true);
    const perPixel = Math.max(1, Math.floor(history.train.length / (right - left)));
    ctx.strokeStyle = "#1f6feb";
    ctx.beginPath();
    for (let s = 0; s < history.train.length; s += perPixel) {
      const bucket = history.train.slice(s, s + perPixel);
      const mean = bucket.reduce((a, b) => a + b, 0) / bucket.length;
      if (!Number.isFinite(mean)) continue;  // a diverged run: drawn up to there
      if (s === 0) ctx.moveTo(x(s + 1), y(mean));
      else ctx.lineTo(x(s + 1), y(mean));
    }
    ctx.stroke();
    ctx.fillStyle = "#d9480f";
    for (const v of history.validation) {
      if (!Number.isFinite(v.loss)) continue;
      ctx.beginPath();
      ctx.arc(x(v.step), y(v.loss), 2.5, 0, 2 * Math.PI);
      ctx.fill();
    }
  }

  function drawAxes(ctx, box, steps, yMax, y) {
    ctx.font = "10px system-ui, sans-serif";
    ctx.strokeStyle = "#ccc";
    ctx.fillStyle = "#555";
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(box.left, box.top);
    ctx.lineTo(box.left, box.bottom);
    ctx.lineTo(box.right, box.bottom);
    ctx.stroke();
    for (let v = 0; v <= yMax; v += 1) {
      ctx.fillText(v.toFixed(0), box.left - 12, y(v) + 3);
    }
    ctx.fillText("0", box.left, box.bottom + 12);
    const last = `${Math.round(steps)} steps`;
    ctx.fillText(last, box.right - ctx.measureText(last).width, box.bottom + 12);
    ctx.fillText("nats", 2, box.top + 8);
  }

  // the cross-attention of one layer and head: a row per output token (the query that
  // produced it), a column per source symbol, darker = more weight; a wrong output is red
  function drawHeatmap(canvas, example, layer, head) {
    const {ctx, width, height} = context2d(canvas);
    if (!example || !example.cross[layer] || !example.cross[layer][head]) return;
    const S = example.source.length, T = example.output.length;
    const weights = example.cross[layer][head];  // (T, S), row-major
    const cell = Math.min((width - 24) / S, (height - 24) / T, 28);
    ctx.font = `${Math.min(13, cell * 0.7)}px ui-monospace, monospace`;
    ctx.textAlign = "center";
    for (let t = 0; t < T; t++) {
      for (let s = 0; s < S; s++) {
        const w = weights[t * S + s];
        ctx.fillStyle = `rgb(${Math.round(255 - 225 * w)}, ${Math.round(255 - 190 * w)}, `
          + `${Math.round(255 - 80 * w)})`;
        ctx.fillRect(24 + s * cell, 24 + t * cell, cell - 1, cell - 1);
      }
      const right = example.output[t] === example.expected[t];
      ctx.fillStyle = right ? "#222" : "#c92a2a";
      ctx.fillText(symbol(example.output[t]), 12, 24 + (t + 0.7) * cell);
    }
    ctx.fillStyle = "#222";
    example.source.forEach((id, s) => {
      ctx.fillText(symbol(id), 24 + (s + 0.5) * cell, 16);
    });
    ctx.textAlign = "start";
  }

  // ---------------------------------------------------------------- the widget

  const esc = text => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;").replace(/"/g, "&quot;");

  function menu(name, label, values, chosen) {
    if (!values.includes(chosen)) values = [...values, chosen].sort((a, b) => a - b);
    const option = v =>
      `<option value="${v}"${v === chosen ? " selected" : ""}>${esc(v)}</option>`;
    const options = values.map(option).join("");
    return `<label>${esc(label)} <select name="${name}">${options}</select></label>`;
  }

  function widgetHtml(o) {
    return `
      <div class="rt-controls">
        <button type="button" name="start">Start</button>
        <button type="button" name="reset">Reset</button>
        <label>seed <input name="seed" type="number" min="0" step="1" value="${o.seed}">
        </label>
        ${menu("factor", "learning-rate factor", CHOICES.factor, o.factor)}
        ${menu("warmup", "warm-up", CHOICES.warmup, o.warmup)}
        ${menu("labelSmoothing", "label smoothing", CHOICES.labelSmoothing,
          o.labelSmoothing)}
        ${menu("d_model", "d_model", CHOICES.d_model, o.d_model)}
        ${menu("n_heads", "heads", CHOICES.n_heads, o.n_heads)}
        ${menu("n_layers", "layers", CHOICES.n_layers, o.n_layers)}
      </div>
      <p class="rt-stats" role="status">starting…</p>
      <div class="rt-panels">
        <figure><canvas class="rt-losses" width="420" height="220"
          aria-label="training and held-out loss against the step"></canvas>
          <figcaption>training loss (blue), held-out loss (orange dots)</figcaption>
        </figure>
        <figure><canvas class="rt-heatmap" width="240" height="240"
          aria-label="cross-attention of the chosen sequence"></canvas>
          <figcaption>cross-attention of
            <select name="example"><option value="0">your sequence</option></select>
            ${menu("layer", "layer", [0], 0)} ${menu("head", "head", [0], 0)}
          </figcaption></figure>
      </div>
      <label class="rt-typed">your sequence (letters a–p)
        <input name="typed" type="text" value="hello" spellcheck="false"
          autocomplete="off"></label>
      <p class="rt-output" aria-live="polite"></p>`;
  }

  // the widget in `root`: options from data-options, then `defaults`
  function mount(root, defaults = {}) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "yes";
    const given = root.dataset.options ? JSON.parse(root.dataset.options) : {};
    const options = {...DEFAULTS, ...defaults, ...given};
    root.innerHTML = widgetHtml(options);
    root.classList.add("reversal-trainer");
    const $ = selector => root.querySelector(selector);
    const ui = {root, $, options, history: {train: [], validation: []}, running: false,
      view: null, last: null, runner: null};
    bindControls(ui);
    restart(ui);
    return ui;
  }

  // a new run (a new worker) with the controls' current values; it starts at once if
  // `run` (a setting changed while training)
  function restart(ui, run = false) {
    if (ui.runner) ui.runner.stop();
    const o = ui.options, $ = ui.$;
    o.seed = Math.max(0, Math.floor(Number($("input[name=seed]").value) || 0));
    for (const name of Object.keys(CHOICES)) {
      o[name] = Number($(`select[name=${name}]`).value);
    }
    if (o.d_model % o.n_heads) o.n_heads = 1;
    Object.assign(ui, {history: {train: [], validation: []}, running: false, last: null});
    ui.runner = startRunner();
    ui.runner.listen(message => receive(ui, message));
    ui.runner.post({type: "init", options: {...o, d_ff: 2 * o.d_model}});
    watch(ui);
    $("button[name=start]").textContent = "Start";
    ui.root.dataset.state = "ready";
    if (run) toggle(ui);
    ui.notice = run ? "a new model for the new setting" : "";
    schedule(ui);
  }

  // Start or Pause; `hidden`: paused because the tab is hidden
  function toggle(ui, hidden = false) {
    const $ = ui.$;
    ui.running = !ui.running;
    ui.hiddenPause = hidden && !ui.running;
    ui.runner.post({type: ui.running ? "start" : "pause"});
    $("button[name=start]").textContent = ui.running ? "Pause" : "Start";
    ui.root.dataset.state = ui.running ? "running" : "paused";
    if (ui.running) ui.notice = "";
    if (hidden) ui.notice = "paused while the tab is hidden";
    schedule(ui);
  }

  function bindControls(ui) {
    const $ = ui.$;
    $("button[name=start]").addEventListener("click", () => toggle(ui));
    $("button[name=reset]").addEventListener("click", () => restart(ui));
    $("input[name=seed]").addEventListener("change", () => restart(ui, ui.running));
    for (const name of Object.keys(CHOICES)) {
      $(`select[name=${name}]`).addEventListener("change", () => {
        if (!LIVE.includes(name)) return restart(ui, ui.running);
        ui.options[name] = Number($(`select[name=${name}]`).value);
        ui.runner.post({type: "settings", settings: {[name]: ui.options[name]}});
        schedule(ui);
      });
    }
    // the worker answers between two slices of training (10 ms)
    $("input[name=typed]").addEventListener("input", () => watch(ui));
    document.addEventListener("visibilitychange", () => {
      const hidden = document.visibilityState === "hidden";
      if (hidden ? ui.running : ui.hiddenPause) toggle(ui, hidden);
    });
    $("select[name=example]").addEventListener("change", () => watch(ui));
    for (const name of ["layer", "head"]) {
      $(`select[name=${name}]`).addEventListener("change", () => schedule(ui));
    }
  }

  // tell the run which sequences to show
  function watch(ui) {
    const {ids, bad} = parseSymbols(ui.$("input[name=typed]").value);
    ui.typedBad = bad;
    const example = Number(ui.$("select[name=example]").value);
    ui.runner.post({type: "watch", typed: ids, example});
  }

  function receive(ui, message) {
    if (message.type === "ready") return ready(ui, message);
    if (message.type === "error") {
      ui.$(".rt-stats").textContent = `The trainer failed: ${message.message}`;
      ui.root.dataset.state = "error";
      return;
    }
    if (message.type === "progress") {
      ui.history.train.push(...message.losses);
      if (message.validation) ui.history.validation.push(message.validation);
      ui.last = message;
    }
    if (message.view) {
      ui.view = message.view;
      renderOutput(ui);  // the answer to what was typed at once, the drawing next frame
    }
    schedule(ui);
  }

  // the menus that depend on the run: held-out examples, layers, heads
  function ready(ui, message) {
    const $ = ui.$, c = message.config;
    const fill = (name, values, label) => {
      const select = $(`select[name=${name}]`), keep = Number(select.value);
      select.innerHTML = values.map(v => `<option value="${v}">${esc(label(v))}</option>`)
        .join("");
      select.value = values.includes(keep) ? keep : values[0];
    };
    fill("layer", [...Array(c.n_layers).keys()], v => v + 1);
    fill("head", [...Array(c.n_heads).keys()], v => v + 1);
    fill("example", [...Array(message.examples.length + 1).keys()],
      v => (v ? `held-out ${v}: ${spell(message.examples[v - 1])}` : "your sequence"));
    ui.parameters = message.parameters;
    watch(ui);
  }

  // redraw once per frame at most
  function schedule(ui) {
    if (ui.frame) return;
    const draw = () => { ui.frame = 0; render(ui); };
    ui.frame = typeof requestAnimationFrame === "function" && !document.hidden
      ? requestAnimationFrame(draw) : setTimeout(draw, 50);
  }

  function render(ui) {
    const $ = ui.$, last = ui.last, history = ui.history;
    drawLosses($(".rt-losses"), history, ui.options.labelSmoothing);
    const example = ui.view && ui.view.example;
    drawHeatmap($(".rt-heatmap"), example, Number($("select[name=layer]").value),
      Number($("select[name=head]").value));
    const recent = history.train.slice(-20), v = history.validation.at(-1);
    const mean = recent.length ? recent.reduce((a, b) => a + b, 0) / recent.length : NaN;
    $(".rt-stats").textContent = last ? [`step ${last.step}`,
      `${last.stepsPerSecond.toFixed(1)} steps/s`,
      `training loss ${Number.isNaN(mean) ? "–" : mean.toFixed(3)}`,
      `held-out loss ${v ? v.loss.toFixed(3) : "–"}`,
      `exact match ${v ? (100 * v.exactMatch).toFixed(1) : "–"}% of ${count(last.heldOut)}`
        + ` held-out${v ? ` at step ${count(v.step)}` : ""}`,
      ...reachedText(last.reached),
      `${ui.parameters || "?"} parameters`].join(" · ") : "starting…";
    if (recent.length && !(mean < Math.log(VOCAB) + 1 || history.train.length < 50)) {
      $(".rt-stats").textContent += " · the loss diverges (above a uniform guess's, or not"
        + " a number): the learning rate is too high for this model. Lower the"
        + " learning-rate factor and press Reset.";
    }
    if (ui.notice) $(".rt-stats").textContent += ` · ${ui.notice}`;
    if (last) ui.root.dataset.step = last.step;  // for tests
    renderOutput(ui);
  }

  const count = n => n.toLocaleString("en-US");

  // the step (and the seconds of training and evaluation) at which the held-out exact
  // match first reached the target: what chapter 11 quotes of trainReversal
  const reachedText = reached => (reached ? [`${Math.round(100 * reached.target)}% first`
    + ` at step ${count(reached.step)} (${reached.seconds.toFixed(0)} s)`] : []);

  function renderOutput(ui) {
    const out = ui.$(".rt-output"), view = ui.view;
    const notes = ui.typedBad && ui.typedBad.length
      ? ` (left out: ${[...new Set(ui.typedBad)].join(" ")})` : "";
    if (!view || !view.typed.length) {
      out.textContent = `Type symbols a–p to see the model reverse them${notes}.`;
      return;
    }
    const expected = spell([...view.typed].reverse().concat([EOS_ID]));
    const got = spell(view.typedOut), right = got === expected;
    const cut = view.typedLength > view.typed.length
      ? ` It read the first ${view.typed.length} of the ${view.typedLength} symbols: with`
        + ` the end (⏎), they fill the model's ${view.typed.length + 1} positions.` : "";
    const range = view.typed.length < 4 || view.typed.length > 10
      ? " It trained on 4 to 10 symbols." : "";
    const verdict = right ? "✓" : `(the reverse: ${esc(expected)})`;
    out.innerHTML = `${esc(spell(view.typed))} → `
      + `<b class="${right ? "rt-right" : "rt-wrong"}">${esc(got)}</b> ${verdict}`
      + `${esc(notes)}${esc(cut)}${esc(range)}`;
    ui.root.dataset.output = view.typedOut.join(",");
  }

  function mountAll() {
    document.querySelectorAll(".reversal-trainer").forEach(root => mount(root));
  }

  window.reversalTrainer = {mount, mountAll, parseSymbols, DEFAULTS};
  window.trainReversal = trainReversal;
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mountAll);
  } else {
    mountAll();
  }
})();
