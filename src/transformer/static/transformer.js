// The translator's model in plain JavaScript: the shipped translators (chapter 14,
// appendix 18) built on the layers of layers.js, which the trainer shares, and decoding
// with the KV cache, one sentence at a time, shaped like the Python package and named
// after it. When a translation is first asked for, translator.js loads common.js (the
// token ids, the positional table, attention and the WebAssembly kernel), layers.js
// (the layers), this file, then pretrained.js (which reads the shipped files and calls
// these functions). This file leaves window.transformerModel.
//
//   function             mirrors (src/transformer/)
//   sizesOf              a shipped model_config as layers.js's sizes
//   buildModel,          pretrained.model_of: the parameters checked (against
//     checkParameters    layers.parameterShapes), grouped by layer, and every matrix
//                        of a product kept in the kernel's memory
//   encode, encodeSteps  model.Transformer.encode on one sentence (encodeSteps: a
//                        layer a step), by layers.encodeSteps
//   decoderState         decoding.DecoderState, with its decoder.DecoderCache
//   select               decoder.DecoderCache.select
//   decodeStep           model.Transformer.decode with a cache: one new position a row,
//                        through layers.decoderLayer
//   logSumExp            decoding.DecoderState.log_probs
//   lp, lengthLimit      decoding.lp, decoding.length_limits
//   beamSearch           decoding.beam_search (beamSearchSteps: a decoding step a
//                        step); bestTotals and sortOut are its halves
//   decoderAttention     attention_maps.attention_maps, the decoder's maps
//     (decoderAttentionSteps: a position a step)
//   pause, breathe, finish, paced, pace: the pacing of long work (no Python
//                        counterpart): a generator's steps, with the page given back
//                        to the browser between them
//
// Every matrix is a flat Float32Array, row-major: "x (rows, d_model)" means x[r][i] is
// x[r * d_model + i] (the weights of the products are kept in common.js's kernel,
// transposed).
(() => {
  "use strict";
  const common = window.transformerCommon;  // common.js
  const L = window.transformerLayers;  // layers.js
  if (!common || !L) throw new Error("transformer.js needs common.js and layers.js first");
  const {PAD_ID, UNK_ID, BOS_ID, EOS_ID, positionalEncoding, keepWeight} = common;
  // decoding.EXTRA_LENGTH: at most 50 tokens more than the source (paper 6.1)
  const EXTRA_LENGTH = 50;

  // ---------------------------------------------------------------- the model

  // a shipped model_config's sizes, as layers.js names them
  function sizesOf(config) {
    const c = config, d_head = c.d_head || c.d_model / c.n_heads;
    return {d_model: c.d_model, n_heads: c.n_heads, d_head, d_ff: c.d_ff,
      n_layers: c.n_layers, vocab: c.tgt_vocab_size, max_len: c.max_len};
  }

  // the weights (name -> {shape, data}) checked against the config, as
  // pretrained.model_of checks them; throws, naming `source`, where they do not fit
  function checkParameters(config, weights, source) {
    const c = config;
    if (c.norm_first || !c.share_embeddings || c.src_vocab_size !== c.tgt_vocab_size) {
      throw new Error(
        `${source}: this page runs post-LN models with one shared vocabulary`);
    }
    const expected = L.parameterShapes(sizesOf(c));
    const have = Object.keys(weights).sort(), want = Object.keys(expected).sort();
    const bad = want.filter(name =>
      !weights[name] || String(weights[name].shape) !== String(expected[name]));
    if (bad.length || have.length !== want.length) {
      const listed = bad.slice(0, 3).join(", ") || "extra tensors";
      throw new Error(
        `${source} does not fit its model_config (${listed}); ship the run again`);
    }
  }

  // The model, as layers.js takes it: its parameters checked, grouped by layer as the
  // modules hold them (layers.views), every matrix that a product reads kept in the
  // kernel's memory once (common.keepWeight; without the kernel, the array itself);
  // the tied E (V, d_model) also as the output projection (section 3.4).
  function buildModel(config, weights, source) {
    checkParameters(config, weights, source);
    const c = sizesOf(config), store = {};
    for (const [name, tensor] of Object.entries(weights)) store[name] = tensor.data;
    const kept = (W, n_out, n_in) => keepWeight(W, n_out, n_in) || W;
    const p = L.views(c, store, kept, true);  // self-attention's W^Q | W^K | W^V whole
    return {
      c, Float: Float32Array, round: Math.fround, p,
      pe: positionalEncoding(c.max_len, c.d_model),
      output: kept(p.embedding, c.vocab, c.d_model),
      d_model: c.d_model, n_heads: c.n_heads, d_head: c.d_head,
      inner: c.n_heads * c.d_head, d_ff: c.d_ff, V: c.vocab, n_layers: c.n_layers,
      max_len: c.max_len,
    };
  }

  // ---------------------------------------------------------------- the encoder

  // Model.encode: the memory (S, d_model) of the source ids, no padding (one sentence).
  // With `weights`, each layer's and head's attention is written there:
  // (n_layers, n_heads, S, S). encodeSteps is the same a layer a step, for paced.
  function encode(model, ids, weights = null) {
    return finish(encodeSteps(model, ids, weights));
  }

  function* encodeSteps(model, ids, weights = null) {
    const S = ids.length, size = model.n_heads * S * S;
    const steps = L.encodeSteps(model, Int32Array.from(ids), 1, S);
    for (let l = 0, step = steps.next(); ; l++, step = steps.next()) {
      if (step.done) return step.value.memory;  // (S, d_model)
      if (weights) weights.set(step.value.attn.P, l * size);  // P (1, n_heads, S, S)
      yield;
    }
  }

  // ---------------------------------------------------------------- the decoder

  // What decoding keeps between steps (decoding.DecoderState, decoder.DecoderCache):
  // per layer, the self-attention's keys and values of every row's earlier positions,
  // K and V (rows, limit, inner) each, in two copies that select() swaps; and the
  // cross-attention's K and V of the memory (S, inner) each, projected once and shared
  // by every row (memory: the pack that points every row at them), since every beam
  // has the same source.
  function decoderState(model, memory, S, rows, limit) {
    const {d_model, inner} = model;
    const cross = model.p.decoder.map(({cross_attn: a}) => {
      const k = new Float32Array(S * inner), v = new Float32Array(S * inner);
      L.linear(memory, S, a.w_k, a.b_k, d_model, inner, k);
      L.linear(memory, S, a.w_v, a.b_v, d_model, inner, v);
      return {k, v};
    });
    const cache = () => model.p.decoder.map(() => ({
      K: new Float32Array(rows * limit * inner),
      V: new Float32Array(rows * limit * inner),
      size: limit * inner,  // one row's part
    }));
    const pack = starts => ({B: rows, seq: 0, start: Int32Array.from(starts),
      len: new Int32Array(rows)});
    const memoryPack = Object.assign(pack(new Array(rows + 1).fill(0)), {seq: S});
    memoryPack.len.fill(S);
    return {
      S, limit, length: 0, cross, cache: cache(), spare: cache(), memory: memoryPack,
      // row r's cached positions, at r * limit: their number is set at each step
      self: Object.assign(pack(Array.from({length: rows + 1}, (_, r) => r * limit)),
        {seq: limit}),
      logits: new Float32Array(rows * model.V),  // (rows, V)
    };
  }

  // DecoderCache.select: row r continues row rows[r] (beam search reorders hypotheses)
  function select(model, state, rows) {
    const kept = state.length * model.inner;
    state.cache.forEach((layer, l) => {
      const spare = state.spare[l], size = layer.size;
      rows.forEach((from, r) => {
        spare.K.set(layer.K.subarray(from * size, from * size + kept), r * size);
        spare.V.set(layer.V.subarray(from * size, from * size + kept), r * size);
      });
    });
    [state.cache, state.spare] = [state.spare, state.cache];
  }

  // row 0's weights of each head from an attention's P (rows, n_heads, 1, n_keys):
  // the first `keys` of them, into heads[h]
  function keepFirstRow(P, n_heads, n_keys, keys, heads) {
    for (let h = 0; h < n_heads; h++) {
      heads[h] = Array.from(P.subarray(h * n_keys, h * n_keys + keys));
    }
  }

  // One decoding step (Model.decode with a cache): the newest token of each row, at
  // position state.length, through every decoder layer (layers.decoderLayer, its
  // self-attention on the cache), then the logits h E^T (rows, V) into state.logits
  // when `logits`. With `record`, row 0's attention weights are kept:
  // record.self[l][h] (length + 1,), record.cross[l][h] (S,).
  function decodeStep(model, state, tokens, logits = true, record = null) {
    const rows = tokens.length, t = state.length, H = model.n_heads, dh = model.d_head;
    const q = {B: rows, seq: 1, n: rows, start: Int32Array.from({length: rows + 1},
      (_, r) => r), len: new Int32Array(rows).fill(1), ids: Int32Array.from(tokens),
    pos: new Int32Array(rows).fill(t)};
    state.self.len.fill(t + 1);
    let x = new Float32Array(rows * model.d_model);
    L.embed(model, q, x);
    model.p.decoder.forEach((p, l) => {
      const dims = {
        self: {H, dh, q, k: state.self, causal: false,
          cache: {...state.cache[l], position: t}},
        cross: {H, dh, q, k: state.memory, causal: false, kv: state.cross[l]}};
      const tape = L.decoderLayer(model, p, x, null, dims);
      if (record) {
        keepFirstRow(tape.self.P, H, state.limit, t + 1, record.self[l]);
        keepFirstRow(tape.cross.P, H, state.S, state.S, record.cross[l]);
      }
      x = tape.y;
    });
    state.length += 1;
    if (logits) {
      L.linear(x, rows, model.output, null, model.d_model, model.V, state.logits);
    }
  }

  // log p(y_t | y_<t, x) of row r of logits (rows, V), PAD and BOS excluded
  // (DecoderState.log_probs): the log-sum-exp of the row, so that
  // log p(v) = logits[r][v] - lse
  function logSumExp(model, logits, r) {
    const V = model.V, o = r * V;
    let max = -Infinity;
    for (let v = 0; v < V; v++) {
      if (v !== PAD_ID && v !== BOS_ID && logits[o + v] > max) max = logits[o + v];
    }
    let sum = 0;
    for (let v = 0; v < V; v++) {
      if (v !== PAD_ID && v !== BOS_ID) sum += Math.exp(logits[o + v] - max);
    }
    return max + Math.log(sum);
  }

  // ---------------------------------------------------------------- beam search

  // decoding.lp: the length penalty of Wu et al. (2016), ((5 + |Y|) / 6)^alpha
  const lp = (length, alpha) => ((5 + length) / 6) ** alpha;

  // decoding.length_limits: the source length + extra, at most model.max_len positions
  const lengthLimit = (model, S, extra) => Math.min(S + extra, model.max_len);

  // beamSearch's first half: into top {value, index} (2k,), the 2k best totals
  // log P(prefix of row r) + log p(v), best first (ties: the lower index), and where
  // each is: index r * V + v into the logits (rows, V)
  function bestTotals(model, logits, scores, top) {
    const V = model.V, value = top.value, index = top.index, last = value.length - 1;
    value.fill(-Infinity);
    for (let r = 0; r < scores.length; r++) {
      const lse = logSumExp(model, logits, r), o = r * V;
      for (let v = 0; v < V; v++) {
        if (v === PAD_ID || v === BOS_ID) continue;
        // float32 log p, as PyTorch
        const total = scores[r] + Math.fround(logits[o + v] - lse);
        if (total <= value[last]) continue;
        let j = last;
        for (; j > 0 && value[j - 1] < total; j--) {
          value[j] = value[j - 1];
          index[j] = index[j - 1];
        }
        value[j] = total;
        index[j] = o + v;
      }
    }
  }

  // beamSearch's second half, at step t: those of the 2k totals among the first k that
  // end (EOS, or the length limit) join `finished` with the score log P / lp(t); the
  // first k that do not end are returned to go on, {origin row, token, total}.
  function sortOut(model, top, beams, t, atLimit, alpha, finished) {
    const k = top.value.length / 2, going = [];
    for (let j = 0; j < 2 * k; j++) {
      const origin = Math.floor(top.index[j] / model.V), token = top.index[j] % model.V;
      const total = top.value[j], ends = token === EOS_ID || atLimit;
      if (ends && j < k && Number.isFinite(total)) {
        finished.push({ids: [...beams.prefixes[origin], token], logP: total,
          score: total / lp(t, alpha)});
      }
      if (!ends && going.length < k) going.push({origin, token, total});
    }
    return going;
  }

  // decoding.beam_search for one sentence, step by step as Python takes it: the k live
  // beams extend by every token; of the 2k best totals log P, those among the first k
  // that end are finished, and the k best that do not end go on; stop with k finished,
  // or at the limit; the best finished hypothesis wins (the first, on a tie). Step 1
  // runs one row: the k rows Python starts with are all [BOS], and all but the first
  // have log P = -inf. decoding: {beam_size, alpha, extra_length}, as shipped.
  // Returns {ids (no BOS; EOS last unless cut), score, logP}, paced a step at a time.
  async function beamSearch(model, srcIds, memory, decoding) {
    return paced(beamSearchSteps(model, srcIds, memory, decoding));
  }

  function* beamSearchSteps(model, srcIds, memory, decoding) {
    const k = decoding.beam_size, S = srcIds.length;
    const limit = lengthLimit(model, S, decoding.extra_length);
    const state = decoderState(model, memory, S, k, limit);
    const top = {value: new Float64Array(2 * k), index: new Int32Array(2 * k)};
    let beams = {prefixes: [[]], scores: [0], tokens: [BOS_ID]};
    const finished = [];
    for (let t = 1; t <= limit; t++) {
      decodeStep(model, state, beams.tokens);
      bestTotals(model, state.logits, beams.scores, top);
      const going = sortOut(model, top, beams, t, limit <= t, decoding.alpha, finished);
      if (finished.length >= k || limit <= t) break;
      select(model, state, going.map(g => g.origin));
      beams = {prefixes: going.map(g => [...beams.prefixes[g.origin], g.token]),
        scores: going.map(g => g.total), tokens: going.map(g => g.token)};
      yield;
    }
    return finished.reduce((best, h) => (h.score > best.score ? h : best));
  }

  // attention_maps.attention_maps: every layer's and head's attention while the decoder
  // reads [BOS, out[:-1]] (teacher-forced), as [layer][head][query][key] arrays:
  // "decoder" (T, T, zero above the diagonal) and "cross" (T, S).
  // decoderAttentionSteps is the same a position a step, for paced.
  function decoderAttention(model, memory, S, outIds) {
    return finish(decoderAttentionSteps(model, memory, S, outIds));
  }

  function* decoderAttentionSteps(model, memory, S, outIds) {
    const T = outIds.length, state = decoderState(model, memory, S, 1, T);
    const maps = {decoder: [], cross: []};
    for (const kind of ["decoder", "cross"]) {
      maps[kind] = model.p.decoder.map(() =>
        Array.from({length: model.n_heads}, () => []));
    }
    const record = {self: model.p.decoder.map(() => []),
      cross: model.p.decoder.map(() => [])};
    for (const token of [BOS_ID, ...outIds.slice(0, -1)]) {
      decodeStep(model, state, [token], false, record);
      model.p.decoder.forEach((_, l) => {
        for (let h = 0; h < model.n_heads; h++) {
          const row = record.self[l][h];
          maps.decoder[l][h].push(row.concat(new Array(T - row.length).fill(0)));
          maps.cross[l][h].push(record.cross[l][h]);
        }
      });
      yield;
    }
    return maps;
  }

  // ---------------------------------------------------------------- pacing

  // A long translation must not freeze the page: the work is generators that yield
  // between steps (an encoder layer, a decoding step, a position of the maps), and
  // `paced` runs one, giving the main thread back to the browser (breathe) whenever
  // SLICE ms of work have run since it last did, so that the page draws a frame and
  // answers input between steps. `finish` runs a generator through at once.
  // pace.longest: the longest run of work between two breaks (ms), from pace.start()
  // to pace.stop(), as the tests read it; pace.breaks counts the breaks.
  const SLICE = 20;  // ms: a frame is 16.7 ms at 60 Hz, and a step takes a few ms more

  // the main thread given back: a task of its own (a message, unlike setTimeout not
  // clamped to 4 ms), after which the browser may draw before it runs
  const pause = () => new Promise(resolve => {
    const channel = new MessageChannel();
    channel.port1.onmessage = resolve;
    channel.port2.postMessage(null);
  });

  const pace = {since: performance.now(), longest: 0, breaks: 0,
    start() { pace.since = performance.now(); },  // a run of work begins
    stop() { pace.longest = Math.max(pace.longest, performance.now() - pace.since); }};

  async function breathe() {
    if (performance.now() - pace.since < SLICE) return;
    pace.stop();
    pace.breaks += 1;
    await pause();
    pace.start();
  }

  function finish(steps) {
    let step = steps.next();
    while (!step.done) step = steps.next();
    return step.value;
  }

  async function paced(steps) {
    let step = steps.next();
    while (!step.done) {
      await breathe();
      step = steps.next();
    }
    return step.value;
  }

  window.transformerModel = {
    PAD_ID, UNK_ID, BOS_ID, EOS_ID, EXTRA_LENGTH,
    parameterShapes: config => L.parameterShapes(sizesOf(config)),
    buildModel, encode, encodeSteps, decoderState, decodeStep,
    logSumExp, lp, beamSearch, decoderAttention, decoderAttentionSteps,
    pace, breathe, paced,
  };
})();
