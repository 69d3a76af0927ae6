// The training session behind chapter 11's trainer page (trainer_page.js): a run of
// trainer.js's model driven by messages, in a Web Worker, or on the page where no
// worker starts. It needs common.js, layers.js and trainer.js first, and leaves
// transformerSession: {createSession, workerSource}; the whole script is one function,
// so that the worker can run it from its source.
//
//   createSession(post) -> {handle(message)}: the worker's protocol
//   initRun, asks, evaluateHeldOut, loop, soon, progress, view, runHeadless: its parts
//   workerSource()       the worker's script: common.js, layers.js, trainer.js and this
function transformerSessionModule(scope) {
  "use strict";
  const T = scope.transformerTrainer;  // trainer.js
  if (!T) throw new Error("trainer_session.js needs trainer.js first");
  const {PAD_ID, BOS_ID, EOS_ID, FIRST, N_SYMBOLS, below, collate, createModel} = T;
  const {evaluate, evaluateSlices, evaluationSums, addSums, rates, greedy} = T;
  const {heldOutSet, modelConfig, mulberry32, noamLr, reversalBatches} = T;
  const {reversalPairs, smoothingFloor, trainStep} = T;
  const now = () => (typeof performance !== "undefined" ? performance.now() : Date.now());

  // ---------------------------------------------------------------- the session

  // The training run behind the page, driven by messages (a Worker's, or direct calls
  // where no worker can start). In: init {options}, start, pause, settings {factor,
  // labelSmoothing, warmup}, watch {typed, example}, run {steps} (headless). Out:
  // ready, progress {step, losses, stepsPerSecond, validation, reached, view}, result.
  function createSession(post) {
    const state = {model: null, running: false, ticket: 0, typed: [], example: 0};
    const handlers = {
      init: message => {
        initRun(state, message.options || {});
        post({type: "ready", config: state.model.c, examples: state.examples,
          parameters: Object.values(state.model.params).reduce((n, w) => n + w.length, 0)});
        post(progress(state, [], evaluateHeldOut(state), true));
      },
      start: () => {
        if (state.running || !state.model) return;
        state.running = true;
        state.ticket += 1;
        state.mark = {time: now(), step: state.step};
        loop(state, post, state.ticket);
      },
      pause: () => {  // the held-out set of the step it stopped at, whole
        state.running = false;
        post(progress(state, [], evaluateHeldOut(state), true));
      },
      settings: message => Object.assign(state.settings, message.settings),
      watch: message => {
        state.typed = message.typed ?? state.typed;
        state.example = message.example ?? state.example;
        state.lastView = -Infinity;  // a running loop shows it after its slice
        if (!state.running && state.model) post({type: "view", view: view(state)});
      },
      run: message => runHeadless(state, message, post),
    };
    return {handle: message => handlers[message.type](message), state};
  }

  // a new model, stream and held-out set for the options; options.target (0.99): the
  // held-out exact match whose first step the run reports
  function initRun(state, options) {
    state.running = false;
    state.ticket += 1;
    const seed = (options.seed ?? 0) >>> 0;
    state.options = options;
    state.settings = {labelSmoothing: options.labelSmoothing ?? 0.1,
      warmup: options.warmup || 100, factor: options.factor ?? 1,
      clip: options.clip ?? 1};
    state.model = createModel({...options, seed});
    state.stream = reversalBatches(seed, options.batchSize || 64);
    state.heldOut = heldOutSet(seed, options.heldOut || 1000);
    state.examples = state.heldOut.pairs.slice(0, 8).map(([s]) => s);
    Object.assign(state, {step: 0, seconds: 0, lastEval: -Infinity, lastView: -Infinity,
      target: options.target ?? 0.99, askedAt: -Infinity, reached: null, evaluation: null});
  }

  // trainReversal's rule for asking the held-out set whether the target is reached:
  // the batch of the step just taken right (before its update) within 3 points of the
  // target, and more than 10 steps since the held-out set was last asked
  function asks(state) {
    if (state.reached || !state.target || state.step <= state.askedAt + 10
      || !(state.model.batchExact >= state.target - 0.03)) return false;
    state.askedAt = state.step;
    return true;
  }

  // The held-out evaluation under way (state.evaluation; training waits for it, so it
  // measures the model of one step), a slice after another until `until` (ms): its
  // result {step, loss, exactMatch} when the last slice is done, else null. `asked`:
  // started by asks, so that its result can mark the step the target is reached at.
  function evaluateHeldOut(state, until = Infinity, asked = false) {
    const slices = state.heldOut.slices;
    const e = state.evaluation ??= {step: state.step, asked, next: 0, sums: []};
    while (e.next < slices.length && now() < until) {
      e.sums.push(evaluationSums(state.model, slices[e.next++],
        state.settings.labelSmoothing));
    }
    if (e.next < slices.length) return null;
    state.evaluation = null;
    state.lastEval = now();
    const result = {step: e.step, ...rates(e.sums.reduce(addSums))};
    if (e.asked && !state.reached && result.exactMatch >= state.target) {
      state.reached = {step: e.step, seconds: state.seconds, target: state.target};
    }
    return result;
  }

  // train for about 10 ms, or evaluate the held-out set for as long (a typed sequence
  // waits no longer), report, and go on unless paused or reset
  function loop(state, post, ticket) {
    if (!state.running || ticket !== state.ticket) return;
    const start = now(), losses = [];
    let validation = null;
    if (state.evaluation) validation = evaluateHeldOut(state, start + 10);
    else {
      while (now() - start < 10) {
        losses.push(trainStep(state.model, state.stream.next().value, state.settings));
        state.step += 1;
        if (asks(state)) {
          evaluateHeldOut(state, 0, true);  // begun: its slices follow
          break;
        }
      }
    }
    state.seconds += (now() - start) / 1000;
    if (validation && state.reached && state.reached.step === validation.step) {
      state.reached.seconds = state.seconds;
    }
    // besides, the held-out set every 2 s and the watched sequences 4 times a second: a
    // small share of the time, even for the chapter's model; a sequence just typed goes
    // first
    const time = now(), typed = state.lastView === -Infinity;
    if (!state.evaluation && !validation && !typed && time - state.lastEval > 2000) {
      evaluateHeldOut(state, 0);
    }
    post(progress(state, losses, validation, typed || time - state.lastView > 250));
    soon(() => loop(state, post, ticket));
  }

  // run fn after the messages waiting now (a paused run must see its pause)
  function soon(fn) {
    if (typeof MessageChannel === "undefined") return void setTimeout(fn, 0);
    const channel = new MessageChannel();
    channel.port1.onmessage = () => { channel.port1.close(); fn(); };
    channel.port2.postMessage(null);
  }

  // what the page shows: losses since the last report, the speed, a finished held-out
  // evaluation (or null), the step the target was reached at, and the watched sequences
  // (when `show`)
  function progress(state, losses, validation, show = false) {
    const time = now(), mark = state.mark || {time, step: state.step};
    let speed = (state.step - mark.step) / Math.max(1e-3, (time - mark.time) / 1000);
    if (time - mark.time > 3000) state.mark = {time, step: state.step};
    if (!state.running) speed = 0;
    if (show) state.lastView = time;
    return {type: "progress", step: state.step, seconds: state.seconds, losses,
      stepsPerSecond: speed, validation, reached: state.reached, heldOut: state.heldOut.n,
      view: show ? view(state) : null, running: state.running};
  }

  // the typed sequence's output, and the chosen example's (0 = the typed one, k = the
  // held-out example k) output with its cross-attention; a typed sequence longer than
  // the positions hold (max_len - 1 symbols and the end) is cut, and `typedLength` says
  // how long it was
  function view(state) {
    const symbols = state.typed.filter(id => id >= FIRST && id < FIRST + N_SYMBOLS);
    const typed = symbols.slice(0, state.model.c.max_len - 1);
    const typedOut = typed.length ? greedy(state.model, typed).output : [];
    const source = state.example > 0 ? state.examples[state.example - 1] : typed;
    const shown = {typed, typedLength: symbols.length, typedOut, example: null};
    if (!source || !source.length) return shown;
    const decoded = greedy(state.model, source);
    return {...shown, example: {source, output: decoded.output,
      expected: [...source].reverse().concat([EOS_ID]), cross: decoded.cross}};
  }

  // trainReversal's run, as fast as it goes: message.steps steps, or with
  // message.target until the held-out exact match reaches it (asked by `asks`) or
  // message.maxSeconds pass; reports {steps, seconds, losses, exactMatch, ...} once
  function runHeadless(state, message, post) {
    const options = message.options || {};
    initRun(state, options);
    state.target = message.target;
    const losses = [], start = now(), limit = 1000 * (message.maxSeconds || Infinity);
    const steps = state.target ? Infinity : message.steps || 100;
    let held = null;
    const done = () => losses.length >= steps || now() - start >= limit || state.reached;
    const step = () => {
      const until = now() + 100;
      while (!done() && now() < until) {
        losses.push(trainStep(state.model, state.stream.next().value, state.settings));
        state.step += 1;
        if (asks(state)) held = evaluateHeldOut(state, Infinity, true);
      }
      if (!done()) return void soon(step);
      const seconds = (now() - start) / 1000;
      if (!state.reached) held = evaluateHeldOut(state);
      post({type: "result", steps: losses.length, seconds, losses,
        exactMatch: held.exactMatch, validationLoss: held.loss, reached: !!state.reached,
        stepsPerSecond: losses.length / seconds,
        worker: typeof WorkerGlobalScope !== "undefined", float64: !!options.float64,
        config: state.model.c, heldOut: state.heldOut.n});
    };
    step();
  }

  // the worker's source: the page builds its Worker from it
  const workerSource = () => [transformerCommonModule, transformerLayersModule,
    transformerTrainerModule, transformerSessionModule]
    .map(module => `(${String(module)})(self);\n`).join("");

  scope.transformerSession = {createSession, workerSource};
  if (typeof WorkerGlobalScope !== "undefined" && scope instanceof WorkerGlobalScope) {
    const session = createSession(message => scope.postMessage(message));
    scope.onmessage = event => {
      try {
        session.handle(event.data);
      } catch (error) {
        scope.postMessage({type: "error", message: error.message});
      }
    };
  }
  return scope.transformerSession;
}

if (typeof window !== "undefined" && !window.transformerSession) {
  transformerSessionModule(window);
}
