// The Transformer of the book in plain JavaScript: the forward pass and decoding of
// the shipped translators (chapter 14, appendix 18), one sentence at a time, shaped
// like the Python package and named after it. When a translation is first asked for,
// translator.js loads common.js (the token ids, the positional table and attention,
// which the trainer uses too), this file, then pretrained.js (which reads the shipped
// files and calls these functions). This file leaves window.transformerModel.
//
//   function             mirrors (src/transformer/)
//   parameterShapes      the parameters' names and shapes (model.py, encoder.py,
//                        decoder.py); the tied matrix once, as pack_weights stores it
//   buildModel,          pretrained.model_of: the parameters checked, grouped by layer
//     checkParameters
//   embed                embeddings.TransformerEmbedding
//   linear, linearRow    torch.nn.Linear
//   addNorm              normalization.Residual (post-LN) with normalization.LayerNorm
//   feedForward          feed_forward.FeedForward
//   project              multihead.project
//   multiHeadAttention   multihead.MultiHeadAttention.forward
//   encoderLayer         encoder.EncoderLayer.forward
//   encode, encodeSteps  model.Transformer.encode (encodeSteps: a layer a step)
//   decoderState         decoding.DecoderState, with its decoder.DecoderCache
//   select               decoder.DecoderCache.select
//   decoderLayer         decoder.DecoderLayer.forward, with its LayerCache
//   decodeStep           model.Transformer.decode with a cache: one new position a row
//   logSumExp            decoding.DecoderState.log_probs
//   lp, lengthLimit      decoding.lp, decoding.length_limits
//   beamSearch           decoding.beam_search (beamSearchSteps: a decoding step a
//                        step); bestTotals and sortOut are its halves
//   decoderAttention     attention_maps.attention_maps, the decoder's maps
//     (decoderAttentionSteps: a position a step)
//   view, scratch, keepFirstRow: helpers with no Python counterpart
//   pause, breathe, finish, paced, pace: the pacing of long work (no Python
//                        counterpart): a generator's steps, with the page given back
//                        to the browser between them
//
// Every matrix is a flat Float32Array, row-major (the weights of the products are kept
// in common.js's WebAssembly kernel, transposed): "x (rows, d_model)" means x[r][i] is
// x[r * d_model + i]. Sums run in float64, as JavaScript's numbers; what they store is
// float32, as PyTorch's.
(() => {
  "use strict";
  const common = window.transformerCommon;  // common.js
  if (!common) throw new Error("transformer.js needs common.js on the page first");
  const {PAD_ID, UNK_ID, BOS_ID, EOS_ID, positionalEncoding, attend} = common;
  const {keepWeight, linearKept} = common;
  // decoding.EXTRA_LENGTH: at most 50 tokens more than the source (paper 6.1)
  const EXTRA_LENGTH = 50;

  // ---------------------------------------------------------------- parameters

  // name -> shape of every parameter of the model a config describes, by its PyTorch
  // name; the tied embedding and output matrix once, as pack_weights stores it
  function parameterShapes(c) {
    const d_model = c.d_model, inner = c.n_heads * (c.d_head || d_model / c.n_heads);
    const d_ff = c.d_ff;
    const expected = {"src_embed.token.embedding.weight": [c.tgt_vocab_size, d_model]};
    const attention = prefix => {
      expected[`${prefix}.in_proj.weight`] = [3 * inner, d_model];  // W^Q | W^K | W^V
      expected[`${prefix}.in_proj.bias`] = [3 * inner];
      expected[`${prefix}.out_proj.weight`] = [d_model, inner];  // W^O
      expected[`${prefix}.out_proj.bias`] = [d_model];
    };
    const norm = prefix => {
      expected[`${prefix}.norm.weight`] = expected[`${prefix}.norm.bias`] = [d_model];
    };
    const feedForward = prefix => {
      Object.assign(expected, {
        [`${prefix}.linear1.weight`]: [d_ff, d_model],
        [`${prefix}.linear1.bias`]: [d_ff],
        [`${prefix}.linear2.weight`]: [d_model, d_ff],
        [`${prefix}.linear2.bias`]: [d_model],
      });
    };
    for (let l = 0; l < c.n_layers; l++) {
      attention(`encoder.layers.${l}.self_attn`);
      feedForward(`encoder.layers.${l}.feed_forward`);
      norm(`encoder.layers.${l}.attn_residual`);
      norm(`encoder.layers.${l}.ff_residual`);
      attention(`decoder.layers.${l}.self_attn`);
      attention(`decoder.layers.${l}.cross_attn`);
      feedForward(`decoder.layers.${l}.feed_forward`);
      for (const r of ["self", "cross", "ff"]) {
        norm(`decoder.layers.${l}.${r}_residual`);
      }
    }
    return expected;
  }

  // the weights (name -> {shape, data}) checked against the config, as
  // pretrained.model_of checks them; throws, naming `source`, where they do not fit
  function checkParameters(config, weights, source) {
    const c = config;
    if (c.norm_first || !c.share_embeddings || c.src_vocab_size !== c.tgt_vocab_size) {
      throw new Error(
        `${source}: this page runs post-LN models with one shared vocabulary`);
    }
    const expected = parameterShapes(c);
    const have = Object.keys(weights).sort(), want = Object.keys(expected).sort();
    const bad = want.filter(name =>
      !weights[name] || String(weights[name].shape) !== String(expected[name]));
    if (bad.length || have.length !== want.length) {
      const listed = bad.slice(0, 3).join(", ") || "extra tensors";
      throw new Error(
        `${source} does not fit its model_config (${listed}); ship the run again`);
    }
  }

  // The model: its parameters checked, and grouped by layer as the modules hold them.
  // Every weight matrix that a product reads is kept in the kernel's memory, once
  // (common.keepWeight), where WebAssembly SIMD runs; without it, the array itself.
  function buildModel(config, weights, source) {
    checkParameters(config, weights, source);
    const c = config, d_model = c.d_model, n_heads = c.n_heads;
    const d_head = c.d_head || d_model / n_heads, inner = n_heads * d_head;
    const w = name => weights[name].data;
    // W (n_out, n_in) of a product: kept, where there is a kernel
    const kept = (W, n_out, n_in) => keepWeight(W, n_out, n_in) || W;
    const matrix = name => kept(w(name), ...weights[name].shape);
    const mha = p => ({w_in: matrix(`${p}.in_proj.weight`), b_in: w(`${p}.in_proj.bias`),
      w_out: matrix(`${p}.out_proj.weight`), b_out: w(`${p}.out_proj.bias`)});
    const ff = p => ({w1: matrix(`${p}.linear1.weight`), b1: w(`${p}.linear1.bias`),
      w2: matrix(`${p}.linear2.weight`), b2: w(`${p}.linear2.bias`)});
    const ln = p => ({gamma: w(`${p}.norm.weight`), beta: w(`${p}.norm.bias`)});
    const encoder = [], decoder = [];
    for (let l = 0; l < c.n_layers; l++) {
      const e = `encoder.layers.${l}`, d = `decoder.layers.${l}`;
      encoder.push({
        self_attn: mha(`${e}.self_attn`), attn_norm: ln(`${e}.attn_residual`),
        feed_forward: ff(`${e}.feed_forward`), ff_norm: ln(`${e}.ff_residual`),
      });
      // as multihead.project splits in_proj: W^Q on the target, W^K | W^V on the memory
      // W^Q (inner, d_model) and W^K | W^V (2 inner, d_model)
      const p = `${d}.cross_attn`, w_in = w(`${p}.in_proj.weight`);
      const b_in = w(`${p}.in_proj.bias`), cut = inner * d_model;
      const cross = {w_out: matrix(`${p}.out_proj.weight`), b_out: w(`${p}.out_proj.bias`),
        w_q: kept(w_in.subarray(0, cut), inner, d_model), b_q: b_in.subarray(0, inner),
        w_kv: kept(w_in.subarray(cut), 2 * inner, d_model), b_kv: b_in.subarray(inner)};
      decoder.push({
        self_attn: mha(`${d}.self_attn`), self_norm: ln(`${d}.self_residual`),
        cross_attn: cross, cross_norm: ln(`${d}.cross_residual`),
        feed_forward: ff(`${d}.feed_forward`), ff_norm: ln(`${d}.ff_residual`),
      });
    }
    return {
      d_model, n_heads, d_head, inner, d_ff: c.d_ff, V: c.tgt_vocab_size,
      n_layers: c.n_layers, max_len: c.max_len,
      // E (V, d_model), also the output projection (tied, section 3.4)
      embedding: w("src_embed.token.embedding.weight"),
      output: kept(w("src_embed.token.embedding.weight"), c.tgt_vocab_size, d_model),
      pe: positionalEncoding(c.max_len, d_model), encoder, decoder,
      noBias: new Float32Array(c.tgt_vocab_size),
    };
  }

  // ---------------------------------------------------------------- embeddings

  // x (rows, d_model): x[r] = sqrt(d_model) E[ids[r]] + PE[positions[r]]
  // (sections 3.4 and 3.5)
  function embed(model, ids, positions, x) {
    const d = model.d_model, E = model.embedding, pe = model.pe, scale = Math.sqrt(d);
    for (let r = 0; r < ids.length; r++) {
      const e = ids[r] * d, p = positions[r] * d;
      for (let i = 0; i < d; i++) {
        x[r * d + i] = Math.fround(E[e + i] * scale) + pe[p + i];
      }
    }
  }

  // ---------------------------------------------------------------- layers

  // y (rows, n_out) = x (rows, n_in) W^T + b: nn.Linear, W (n_out, n_in) as PyTorch
  // stores it. The time goes here. W kept in the kernel's memory (buildModel): the
  // product on WebAssembly SIMD (common.linearKept). Else, in plain JavaScript, blocks
  // of 4 rows x 2 outputs: each weight read serves 4 dot products and each x read 2, in
  // 8 running sums, which keeps the loads few. Rows left over go one at a time, 4
  // outputs at once. n_out is even (and a multiple of 4 here).
  function linear(x, rows, W, b, n_in, n_out, y) {
    if (W.np) {
      linearKept(x, rows, W, b, y);
      return;
    }
    let r = 0;
    for (; r + 4 <= rows; r += 4) {
      const x0 = r * n_in, x1 = x0 + n_in, x2 = x1 + n_in, x3 = x2 + n_in;
      const y0 = r * n_out, y1 = y0 + n_out, y2 = y1 + n_out, y3 = y2 + n_out;
      for (let o = 0; o < n_out; o += 2) {
        const w0 = o * n_in, w1 = w0 + n_in;  // the rows of W for outputs o and o + 1
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
        for (let i = 0; i < n_in; i++) {
          const u = W[w0 + i], v = W[w1 + i];
          const a0 = x[x0 + i], a1 = x[x1 + i], a2 = x[x2 + i], a3 = x[x3 + i];
          s0 += u * a0; s1 += u * a1; s2 += u * a2; s3 += u * a3;
          t0 += v * a0; t1 += v * a1; t2 += v * a2; t3 += v * a3;
        }
        const b0 = b[o], b1 = b[o + 1];
        y[y0 + o] = s0 + b0; y[y1 + o] = s1 + b0;
        y[y2 + o] = s2 + b0; y[y3 + o] = s3 + b0;
        y[y0 + o + 1] = t0 + b1; y[y1 + o + 1] = t1 + b1;
        y[y2 + o + 1] = t2 + b1; y[y3 + o + 1] = t3 + b1;
      }
    }
    for (; r < rows; r++) linearRow(x, r, W, b, n_in, n_out, y);
  }

  // linear's rows left over: row r of y, 4 outputs at once, then one at a time
  function linearRow(x, r, W, b, n_in, n_out, y) {
    const x0 = r * n_in, y0 = r * n_out;
    let o = 0;
    for (; o + 4 <= n_out; o += 4) {
      const w0 = o * n_in, w1 = w0 + n_in, w2 = w1 + n_in, w3 = w2 + n_in;
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (let i = 0; i < n_in; i++) {
        const a = x[x0 + i];
        s0 += W[w0 + i] * a; s1 += W[w1 + i] * a;
        s2 += W[w2 + i] * a; s3 += W[w3 + i] * a;
      }
      y[y0 + o] = s0 + b[o]; y[y0 + o + 1] = s1 + b[o + 1];
      y[y0 + o + 2] = s2 + b[o + 2]; y[y0 + o + 3] = s3 + b[o + 3];
    }
    for (; o < n_out; o++) {
      const w0 = o * n_in;
      let s = 0;
      for (let i = 0; i < n_in; i++) s += W[w0 + i] * x[x0 + i];
      y[y0 + o] = s + b[o];
    }
  }

  // x = LayerNorm(x + h) over each row: x and h (rows, d), gamma and beta (d,)
  // (post-LN, section 3.1; eps 1e-5 as normalization.LayerNorm)
  function addNorm(x, h, rows, d, norm) {
    const gamma = norm.gamma, beta = norm.beta;
    for (let r = 0; r < rows; r++) {
      const o = r * d;
      let mean = 0;
      for (let i = 0; i < d; i++) { x[o + i] += h[o + i]; mean += x[o + i]; }
      mean /= d;
      let variance = 0;
      for (let i = 0; i < d; i++) { const v = x[o + i] - mean; variance += v * v; }
      const inv = 1 / Math.sqrt(variance / d + 1e-5);
      for (let i = 0; i < d; i++) {
        x[o + i] = (x[o + i] - mean) * inv * gamma[i] + beta[i];
      }
    }
  }

  // out (rows, d_model) = FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (eq. 2);
  // s.hidden (rows, d_ff) is scratch
  function feedForward(model, ff, x, rows, s, out) {
    const {d_model, d_ff} = model, hidden = s.hidden;
    linear(x, rows, ff.w1, ff.b1, d_model, d_ff, hidden);
    for (let i = 0; i < rows * d_ff; i++) if (hidden[i] < 0) hidden[i] = 0;
    linear(hidden, rows, ff.w2, ff.b2, d_ff, d_model, out);
  }

  // ---------------------------------------------------------------- attention

  // Where the vectors that attention reads lie in a flat array: row r's vector j (its
  // query, j = 0, or its key or value j) begins at data[offset + r * rowStride + j *
  // stride], and head h's slice of it h * d_head further. Keys that every row shares
  // have rowStride 0.
  const view = (data, offset, rowStride, stride = 0) =>
    ({data, offset, rowStride, stride});

  // multihead.project: Q = x W^Q for x (rows, d_model), and the keys and values each
  // row attends to, as views, by where they come from (`source`):
  //   null: x's own rows, each row seeing all of them (the encoder's one sentence);
  //   {cache, position}: x holds each row's newest position; its K and V join the row's
  //     cache (rows, limit, inner) at `position`, and the row sees positions
  //     0..position (the causal mask, by what the cache holds);
  //   {memory}: the memory's K | V (S, 2 inner), projected once (cross-attention).
  // Returns {q, k, v, n_keys}; s.qkv holds Q (and x's K and V).
  function project(model, attn, x, rows, source, s) {
    const {d_model, inner} = model, qkv = s.qkv;
    if (source && source.memory) {
      linear(x, rows, attn.w_q, attn.b_q, d_model, inner, qkv);  // Q (rows, inner)
      const {KV, S} = source.memory;
      return {q: view(qkv, 0, inner), k: view(KV, 0, 0, 2 * inner),
        v: view(KV, inner, 0, 2 * inner), n_keys: S};
    }
    // (rows, 3 inner): Q | K | V
    linear(x, rows, attn.w_in, attn.b_in, d_model, 3 * inner, qkv);
    const q = view(qkv, 0, 3 * inner);
    if (!source) {
      const k = view(qkv, inner, 0, 3 * inner), v = view(qkv, 2 * inner, 0, 3 * inner);
      return {q, k, v, n_keys: rows};
    }
    const {cache, position} = source, size = cache.size;  // cache.K[r]: (limit, inner)
    for (let r = 0; r < rows; r++) {
      const at = r * size + position * inner, row = r * 3 * inner;
      cache.K.set(qkv.subarray(row + inner, row + 2 * inner), at);
      cache.V.set(qkv.subarray(row + 2 * inner, row + 3 * inner), at);
    }
    return {q, k: view(cache.K, 0, size, inner), v: view(cache.V, 0, size, inner),
      n_keys: position + 1};
  }

  // MultiHead(x) = Concat(head_1..head_h) W^O, head_i = Attention(Q_i, K_i, V_i)
  // (section 3.2.2), into y (rows, d_model): Q, K and V by project (source: see there),
  // every row's and head's attention by attend, the heads side by side in s.ctx
  // (rows, inner), then W^O. keep(r, h, weights) is called with the weights
  // (n_keys,) of each row and head where it is given (need_weights).
  function multiHeadAttention(model, attn, x, rows, source, s, y, keep = null) {
    const {n_heads, d_head, inner, d_model} = model;
    const {q, k, v, n_keys} = project(model, attn, x, rows, source, s);
    const query = {data: q.data, at: 0, stride: 0};
    const key = {data: k.data, at: 0, stride: k.stride};
    const value = {data: v.data, at: 0, stride: v.stride};
    const out = {data: s.ctx, at: 0, stride: 0};
    for (let r = 0; r < rows; r++) {
      for (let h = 0; h < n_heads; h++) {
        const head = h * d_head;
        query.at = q.offset + r * q.rowStride + head;
        key.at = k.offset + r * k.rowStride + head;
        value.at = v.offset + r * v.rowStride + head;
        out.at = r * inner + head;
        attend(query, key, value, n_keys, d_head, s.p, s.acc, out);
        if (keep) keep(r, h, s.p.subarray(0, n_keys));
      }
    }
    linear(s.ctx, rows, attn.w_out, attn.b_out, inner, d_model, y);  // Concat W^O
  }

  // Scratch buffers for `rows` positions at once, attending to at most n_keys keys.
  function scratch(model, rows, n_keys) {
    const {d_model, inner, d_ff} = model;
    return {
      x: new Float32Array(rows * d_model), qkv: new Float32Array(rows * 3 * inner),
      ctx: new Float32Array(rows * inner), h: new Float32Array(rows * d_model),
      hidden: new Float32Array(rows * d_ff), p: new Float64Array(n_keys),
      acc: new Float64Array(model.d_head),
    };
  }

  // ---------------------------------------------------------------- the encoder

  // x (S, d_model) through one encoder layer, in place: self-attention, then the
  // feed-forward network, each in a post-LN residual. keep: as multiHeadAttention's.
  function encoderLayer(model, layer, x, S, s, keep = null) {
    multiHeadAttention(model, layer.self_attn, x, S, null, s, s.h, keep);
    addNorm(x, s.h, S, model.d_model, layer.attn_norm);
    feedForward(model, layer.feed_forward, x, S, s, s.h);
    addNorm(x, s.h, S, model.d_model, layer.ff_norm);
  }

  // Model.encode: the memory (S, d_model) of the source ids, no padding (one sentence).
  // With `weights`, each layer's and head's attention is written there:
  // (n_layers, n_heads, S, S). encodeSteps is the same a layer a step, for paced.
  function encode(model, ids, weights = null) {
    return finish(encodeSteps(model, ids, weights));
  }

  function* encodeSteps(model, ids, weights = null) {
    const S = ids.length, n_heads = model.n_heads, s = scratch(model, S, S), x = s.x;
    embed(model, ids, ids.map((_, i) => i), x);
    for (const [l, layer] of model.encoder.entries()) {
      // query i's weights over the S keys, for head h
      const keep = weights
        && ((i, h, p) => weights.set(p, ((l * n_heads + h) * S + i) * S));
      encoderLayer(model, layer, x, S, s, keep);
      yield;
    }
    return x;  // (S, d_model)
  }

  // ---------------------------------------------------------------- the decoder

  // What decoding keeps between steps (decoding.DecoderState, decoder.DecoderCache):
  // per layer, the self-attention's keys and values of every row's earlier positions,
  // K and V (rows, limit, inner) each, in two copies that select() swaps; and the
  // cross-attention's K | V of the memory, KV (S, 2 inner), projected once and shared
  // by every row, since every beam has the same source.
  function decoderState(model, memory, S, rows, limit) {
    const {d_model, inner} = model;
    const cross = model.decoder.map(layer => {
      const KV = new Float32Array(S * 2 * inner);
      linear(memory, S, layer.cross_attn.w_kv, layer.cross_attn.b_kv,
        d_model, 2 * inner, KV);
      return {KV, S};
    });
    const cache = () => model.decoder.map(() => ({
      K: new Float32Array(rows * limit * inner),
      V: new Float32Array(rows * limit * inner),
      size: limit * inner,  // one row's part
    }));
    return {
      S, limit, length: 0, cross, cache: cache(), spare: cache(),
      scratch: scratch(model, rows, Math.max(S, limit)),
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

  // x (rows, d_model), each row's newest position, through one decoder layer in place:
  // masked self-attention over the row's cached positions and itself, cross-attention
  // over the memory, the feed-forward network, each in a post-LN residual. sources:
  // where each attention's keys and values come from (project's), {self: {cache,
  // position}, cross: {memory}}; keep: {self, cross}, as multiHeadAttention's.
  function decoderLayer(model, layer, x, rows, sources, s, keep = null) {
    const d_model = model.d_model, {self_attn, cross_attn} = layer;
    const keepSelf = keep && keep.self, keepCross = keep && keep.cross;
    multiHeadAttention(model, self_attn, x, rows, sources.self, s, s.h, keepSelf);
    addNorm(x, s.h, rows, d_model, layer.self_norm);
    multiHeadAttention(model, cross_attn, x, rows, sources.cross, s, s.h, keepCross);
    addNorm(x, s.h, rows, d_model, layer.cross_norm);
    feedForward(model, layer.feed_forward, x, rows, s, s.h);
    addNorm(x, s.h, rows, d_model, layer.ff_norm);
  }

  // keep for multiHeadAttention that copies row 0's weights of head h into heads[h]
  const keepFirstRow = heads => (r, h, p) => { if (r === 0) heads[h] = Array.from(p); };

  // One decoding step (Model.decode with a cache): the newest token of each row, at
  // position state.length, through every decoder layer, then the logits h E^T
  // (rows, V) into state.logits when `logits`. With `record`, row 0's attention
  // weights are kept: record.self[l][h] (length + 1,), record.cross[l][h] (S,).
  function decodeStep(model, state, tokens, logits = true, record = null) {
    const rows = tokens.length, t = state.length, s = state.scratch, x = s.x;
    embed(model, tokens, tokens.map(() => t), x);
    model.decoder.forEach((layer, l) => {
      const keep = record && {self: keepFirstRow(record.self[l]),
        cross: keepFirstRow(record.cross[l])};
      const sources = {self: {cache: state.cache[l], position: t},
        cross: {memory: state.cross[l]}};
      decoderLayer(model, layer, x, rows, sources, s, keep);
    });
    state.length += 1;
    if (logits) {
      const {output, noBias, d_model, V} = model;
      linear(x, rows, output, noBias, d_model, V, state.logits);  // (rows, V)
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
      maps[kind] = model.decoder.map(() =>
        Array.from({length: model.n_heads}, () => []));
    }
    const record = {self: model.decoder.map(() => []),
      cross: model.decoder.map(() => [])};
    for (const token of [BOS_ID, ...outIds.slice(0, -1)]) {
      decodeStep(model, state, [token], false, record);
      model.decoder.forEach((_, l) => {
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
    parameterShapes, buildModel, encode, encodeSteps, decoderState, decodeStep,
    logSumExp, lp, beamSearch, decoderAttention, decoderAttentionSteps,
    pace, breathe, paced,
  };
})();
