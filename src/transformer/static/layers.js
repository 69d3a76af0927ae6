// The Transformer's layers in JavaScript, once, for the translator and the trainer,
// under the Python modules' names: the forward pass of a batch of sentences, packed
// (padding left out), each function keeping what the trainer's backward pass needs
// (its "tape"). trainer.js adds the backward pass and the update; transformer.js adds
// decoding with the KV cache (multiHeadAttention's dims.cache) and keeps its weights
// in common.js's WebAssembly kernel. It needs common.js first and leaves
// transformerLayers; the whole script is one function, so that the trainer's Web
// Worker can run it from its source.
//
//   function             mirrors (src/transformer/)
//   parameterShapes      model.named_parameters(): the names and shapes
//   views                the parameters grouped as the modules hold them
//   product, linear      torch.matmul, torch.nn.Linear (on the kernel in float32)
//   packRows, lengthsOf  masks.py's masks, as the rows that are computed
//   attend               attention.scaled_dot_product_attention, every query and head
//   multiHeadAttention   multihead.MultiHeadAttention.forward (project:
//                        multihead.project, with the decoder's cache)
//   embed                embeddings.TransformerEmbedding
//   residual             normalization.Residual (post-LN) with normalization.LayerNorm
//   feedForward          feed_forward.FeedForward
//   encoderLayer         encoder.EncoderLayer.forward
//   decoderLayer         decoder.DecoderLayer.forward
//   encode, encodeSteps  model.Transformer.encode (encodeSteps: a layer a step)
//   decode               model.Transformer._decode without a cache
//
// Shapes in the comments: B sentences, S source and T target positions, D = d_model,
// H heads of d_head, I = H d_head, F = d_ff, V the vocabulary; rows are (batch,
// position) pairs, row r = b * seq + t. A model: {c (its sizes: d_model, n_heads,
// d_head, d_ff, n_layers, vocab, max_len), Float (Float32Array or Float64Array), round
// (Math.fround, or none in float64), p (views of its parameters), pe}.
function transformerLayersModule(scope) {
  "use strict";
  const common = scope.transformerCommon;  // common.js
  if (!common) throw new Error("layers.js needs common.js on the page first");
  const PAD_ID = common.PAD_ID;
  const LN_EPS = 1e-5;  // normalization.LayerNorm

  // ---------------------------------------------------------------- parameters

  // name -> shape of every parameter, named as model.named_parameters() names them; the
  // tied table once (tgt_embed.token.embedding.weight and generator.weight are it too)
  function parameterShapes(c) {
    const D = c.d_model, I = c.n_heads * c.d_head, shapes = {};
    shapes["src_embed.token.embedding.weight"] = [c.vocab, D];
    const attention = p => Object.assign(shapes, {[`${p}.in_proj.weight`]: [3 * I, D],
      [`${p}.in_proj.bias`]: [3 * I], [`${p}.out_proj.weight`]: [D, I],
      [`${p}.out_proj.bias`]: [D]});
    const feedForward = p => Object.assign(shapes, {[`${p}.linear1.weight`]: [c.d_ff, D],
      [`${p}.linear1.bias`]: [c.d_ff], [`${p}.linear2.weight`]: [D, c.d_ff],
      [`${p}.linear2.bias`]: [D]});
    const norm = p => Object.assign(shapes, {[`${p}.norm.weight`]: [D],
      [`${p}.norm.bias`]: [D]});
    for (let l = 0; l < c.n_layers; l++) {
      const e = `encoder.layers.${l}`, d = `decoder.layers.${l}`;
      attention(`${e}.self_attn`);
      feedForward(`${e}.feed_forward`);
      norm(`${e}.attn_residual`);
      norm(`${e}.ff_residual`);
      attention(`${d}.self_attn`);
      norm(`${d}.self_residual`);
      attention(`${d}.cross_attn`);
      norm(`${d}.cross_residual`);
      feedForward(`${d}.feed_forward`);
      norm(`${d}.ff_residual`);
    }
    return shapes;
  }

  const sizeOf = shape => shape.reduce((a, b) => a * b, 1);

  // The parameters (or their gradients, or Adam's moments) of `store` grouped as the
  // modules hold them; W^Q, W^K, W^V are views of the stacked in_proj. Each matrix W
  // (n_out, n_in) of a product goes through matrix(W, n_out, n_in): the translator's
  // keeps it in the kernel's memory (common.keepWeight). With `fused`, attention also
  // holds W^Q | W^K | W^V whole, w_in, for self-attention's one product (project).
  function views(c, store, matrix = W => W, fused = false) {
    const D = c.d_model, I = c.n_heads * c.d_head, get = name => store[name];
    const shapes = parameterShapes(c);
    const linear = p => {
      const weight = get(`${p}.weight`), shape = shapes[`${p}.weight`];
      return {weight: shape.length === 2 ? matrix(weight, ...shape) : weight,
        bias: get(`${p}.bias`)};
    };
    const attention = p => {
      const w = get(`${p}.in_proj.weight`), b = get(`${p}.in_proj.bias`);
      return {w_q: matrix(w.subarray(0, I * D), I, D),
        w_k: matrix(w.subarray(I * D, 2 * I * D), I, D),
        w_v: matrix(w.subarray(2 * I * D), I, D), b_q: b.subarray(0, I),
        b_k: b.subarray(I, 2 * I), b_v: b.subarray(2 * I),
        out_proj: linear(`${p}.out_proj`),
        ...(fused ? {w_in: matrix(w, 3 * I, D), b_in: b} : {})};
    };
    const feedForward = p => ({linear1: linear(`${p}.linear1`),
      linear2: linear(`${p}.linear2`)});
    const encoder = [], decoder = [];
    for (let l = 0; l < c.n_layers; l++) {
      const e = `encoder.layers.${l}`, d = `decoder.layers.${l}`;
      encoder.push({self_attn: attention(`${e}.self_attn`),
        attn_residual: linear(`${e}.attn_residual.norm`),
        feed_forward: feedForward(`${e}.feed_forward`),
        ff_residual: linear(`${e}.ff_residual.norm`)});
      decoder.push({self_attn: attention(`${d}.self_attn`),
        self_residual: linear(`${d}.self_residual.norm`),
        cross_attn: attention(`${d}.cross_attn`),
        cross_residual: linear(`${d}.cross_residual.norm`),
        feed_forward: feedForward(`${d}.feed_forward`),
        ff_residual: linear(`${d}.ff_residual.norm`)});
    }
    return {embedding: get("src_embed.token.embedding.weight"), encoder, decoder};
  }

  // ---------------------------------------------------------------- products

  // Every product of the model is one call: C (m, n) = A B, or C += A B with `add`;
  // A is (m, k), or (k, m) read transposed in place if aT; B is (k, n), or (n, k) if
  // bT. In float32 it runs in a WebAssembly kernel with 4-lane vectors (simdKernel),
  // about ten times faster than plain JavaScript, its sums float32 ones as PyTorch's
  // are; in float64, and where WebAssembly has no SIMD, in three plain loops.
  function product(A, aT, B, bT, m, k, n, C, add) {
    if (SIMD && C instanceof Float32Array) {
      productSimd(A, aT, B, bT, m, k, n, C, add);
      return;
    }
    const ar = aT ? 1 : k, ai = aT ? m : 1, bi = bT ? 1 : n, bo = bT ? k : 1;
    for (let r = 0; r < m; r++) {
      for (let o = 0; o < n; o++) {
        let s = 0;
        for (let i = 0; i < k; i++) s += A[r * ar + i * ai] * B[i * bi + o * bo];
        C[r * n + o] = add ? C[r * n + o] + s : s;
      }
    }
  }

  // product through the kernel (common.js): A and B copied into its memory, above what
  // it keeps there for good, padded with zeros to
  // mp rows (a multiple of 4) and np columns (of 8), the product (mp, np) computed
  // there, and its first m rows and n columns copied out into C
  function productSimd(A, aT, B, bT, m, k, n, C, add) {
    const mp = m + (-m & 3), np = n + (-n & 7);
    const a = SIMD.top, b = a + mp * k, c = b + k * np;  // above the weights it keeps
    const F = SIMD.floats(c + mp * np);  // A at a, B at b, the product at c
    if (!aT) {  // (mp, k)
      F.set(A.subarray(0, m * k), a);
      F.fill(0, a + m * k, b);
    } else {  // (k, mp)
      for (let i = 0; i < k; i++) {
        F.set(A.subarray(i * m, (i + 1) * m), a + i * mp);
        F.fill(0, a + i * mp + m, a + (i + 1) * mp);
      }
    }
    if (!bT && np === n) F.set(B.subarray(0, k * n), b);
    else {  // (k, np)
      for (let i = 0; i < k; i++) {
        for (let o = 0; o < np; o++) {
          F[b + i * np + o] = o < n ? B[bT ? o * k + i : i * n + o] : 0;
        }
      }
    }
    // the byte strides of A's rows and of its columns
    SIMD.run(4 * a, aT ? 4 : 4 * k, aT ? 4 * mp : 4, 4 * b, 4 * c, mp, k, np);
    if (!add && np === n) C.set(F.subarray(c, c + m * n));
    else {
      for (let r = 0; r < m; r++) {
        for (let o = 0; o < n; o++) {
          C[r * n + o] = (add ? C[r * n + o] : 0) + F[c + r * np + o];
        }
      }
    }
  }

  const SIMD = common.kernel;  // common.js's WebAssembly kernel, or null

  // y (rows, n_out) = x (rows, n_in) W^T + b: nn.Linear, W (n_out, n_in) as PyTorch
  // stores it, or kept in the kernel's memory (views' matrix: the weights of a model
  // that does not train); b may be null
  function linear(x, rows, W, b, n_in, n_out, y) {
    if (W.np) {
      common.linearKept(x, rows, W, b, y);
      return;
    }
    product(x, false, W, true, rows, n_in, n_out, y, false);
    if (!b) return;
    for (let r = 0; r < rows; r++) {
      for (let o = 0; o < n_out; o++) y[r * n_out + o] += b[o];
    }
  }

  // ---------------------------------------------------------------- attention

  // Only the real positions are computed, packed: padding changes no real position's
  // value or gradient (masks.py: no real query attends to a pad key, the loss ignores
  // pad targets, and the decoder's pads come after every real query), so the rows of
  // the padded (B*seq, D) arrays that hold padding are left out. A pack: sentence b's
  // rows start[b] .. start[b] + len[b] - 1, their ids and positions. The masks follow:
  // encoder_mask: a key j < len[b]; the causal flag: j <= i; the cross mask: j < len[b].
  function packRows(ids, B, seq, len) {
    const start = new Int32Array(B + 1);
    for (let b = 0; b < B; b++) start[b + 1] = start[b] + len[b];
    const n = start[B], packed = new Int32Array(n), pos = new Int32Array(n);
    for (let b = 0; b < B; b++) {
      for (let t = 0; t < len[b]; t++) {
        packed[start[b] + t] = ids[b * seq + t];
        pos[start[b] + t] = t;
      }
    }
    return {B, seq, n, start, len, ids: packed, pos};
  }

  // each row's real length, up to its first PAD (collate pads on the right)
  function lengthsOf(ids, B, seq) {
    const len = new Int32Array(B);
    for (let b = 0; b < B; b++) {
      while (len[b] < seq && ids[b * seq + len[b]] !== PAD_ID) len[b] += 1;
    }
    return len;
  }

  // Attention (eq. 1) for every sentence, head and query of a batch, each by the
  // translator's attend (common.js): q (queries' rows, I), k and v (keys' rows, I),
  // head h in columns h d_head.. (h+1) d_head; dims.q and dims.k the packs, dims.causal
  // (query i sees keys 0..i). The weights P (B, H, Tq, Tk) (0 where masked) and the
  // output ctx (queries' rows, I). A query with no key allowed gets no weights and a
  // zero output (attention.py).
  function attend(q, k, v, dims, P, ctx) {
    const {H, dh, causal, q: Q, k: K} = dims, I = H * dh;
    const p = new Float64Array(K.seq), acc = new Float64Array(dh);
    const query = {data: q, at: 0}, out = {data: ctx, at: 0};
    const key = {data: k, at: 0, stride: I}, value = {data: v, at: 0, stride: I};
    for (let b = 0; b < Q.B; b++) {
      for (let h = 0; h < H; h++) {
        key.at = value.at = K.start[b] * I + h * dh;
        for (let i = 0; i < Q.len[b]; i++) {
          query.at = out.at = (Q.start[b] + i) * I + h * dh;
          const keys = causal ? Math.min(i + 1, K.len[b]) : K.len[b];
          common.attend(query, key, value, keys, dh, p, acc, out);
          P.set(p.subarray(0, keys), ((b * H + h) * Q.seq + i) * K.seq);
        }
      }
    }
  }

  // MultiHead(x, y) = Concat(head_1..head_h) W^O + b^O, head_i = Attention(x W_i^Q,
  // y W_i^K, y W_i^V) (section 3.2.2): y = x for self-attention, the memory for
  // cross-attention. x (queries' rows, D), y (keys' rows, D) -> tape.out (like x).
  function multiHeadAttention(model, p, x, y, dims) {
    const D = model.c.d_model, I = dims.H * dims.dh, Float = model.Float;
    const rowsQ = dims.q.n;
    const {q, k, v} = project(model, p, x, y, dims);
    const P = new Float(dims.q.B * dims.H * dims.q.seq * dims.k.seq);
    const ctx = new Float(rowsQ * I);
    attend(q, k, v, dims, P, ctx);
    const out = new Float(rowsQ * D);
    linear(ctx, rowsQ, p.out_proj.weight, p.out_proj.bias, I, D, out);  // (B*Tq, D)
    return {x, y, q, k, v, P, ctx, out, dims};
  }

  // multihead.project: Q = x W^Q (B*Tq, I), and the keys and values of y (its rows, I
  // each): in one product where x is y and W^Q | W^K | W^V is held whole (p.w_in, the
  // translator's), else in three. With dims.kv, given keys and values (the memory's);
  // with dims.cache (decoding: {K, V, size, position}, K and V (rows, limit, I)), y's
  // rows, each a beam's newest position, are written into the cache at `position`, and
  // the cache's K and V are returned, which dims.k points at.
  function project(model, p, x, y, dims) {
    const D = model.c.d_model, I = dims.H * dims.dh, Float = model.Float;
    const cache = dims.cache, rowsQ = dims.q.n, rows = cache ? rowsQ : dims.k.n;
    const q = new Float(rowsQ * I);
    if (dims.kv) {
      linear(x, rowsQ, p.w_q, p.b_q, D, I, q);
      return {q, k: dims.kv.k, v: dims.kv.v};
    }
    const k = new Float(rows * I), v = new Float(rows * I);
    if (p.w_in && x === y) {
      const qkv = new Float(rows * 3 * I);
      linear(x, rows, p.w_in, p.b_in, D, 3 * I, qkv);
      for (let r = 0, o = 0; r < rows; r++, o += 3 * I) {
        q.set(qkv.subarray(o, o + I), r * I);
        k.set(qkv.subarray(o + I, o + 2 * I), r * I);
        v.set(qkv.subarray(o + 2 * I, o + 3 * I), r * I);
      }
    } else {
      linear(x, rowsQ, p.w_q, p.b_q, D, I, q);
      linear(y, rows, p.w_k, p.b_k, D, I, k);
      linear(y, rows, p.w_v, p.b_v, D, I, v);
    }
    if (!cache) return {q, k, v};
    for (let r = 0; r < rows; r++) {
      const at = r * cache.size + cache.position * I;
      cache.K.set(k.subarray(r * I, (r + 1) * I), at);
      cache.V.set(v.subarray(r * I, (r + 1) * I), at);
    }
    return {q, k: cache.K, v: cache.V};
  }

  // ---------------------------------------------------------------- layers

  // x (rows, D) = sqrt(D) E[ids] + PE[position]: embeddings.TransformerEmbedding
  // (sections 3.4 and 3.5), a pack's ids and positions -> its rows
  function embed(model, pack, x) {
    const D = model.c.d_model, E = model.p.embedding, pe = model.pe, r = model.round;
    const scale = Math.sqrt(D);
    for (let row = 0; row < pack.n; row++) {
      const e = pack.ids[row] * D, pos = pack.pos[row] * D;
      for (let i = 0; i < D; i++) x[row * D + i] = r(E[e + i] * scale) + pe[pos + i];
    }
  }

  // Residual, post-LN (normalization.Residual): y = LN(x + h), LN(z) = gamma (z - mu) /
  // sqrt(sigma^2 + eps) + beta over each row of D. x, h (rows, D); keeps the normalized
  // rows zhat (rows, D) and 1 / sqrt(sigma^2 + eps) (rows,).
  function residual(model, norm, x, h) {
    const D = model.c.d_model, rows = x.length / D, Float = model.Float;
    const y = new Float(rows * D), zhat = new Float(rows * D), rstd = new Float(rows);
    const z = new Float64Array(D);
    for (let r = 0; r < rows; r++) {
      let mean = 0, variance = 0;
      for (let i = 0; i < D; i++) {
        z[i] = model.round(x[r * D + i] + h[r * D + i]);
        mean += z[i];
      }
      mean /= D;
      for (let i = 0; i < D; i++) variance += (z[i] - mean) ** 2;
      rstd[r] = 1 / Math.sqrt(variance / D + LN_EPS);
      for (let i = 0; i < D; i++) {
        zhat[r * D + i] = (z[i] - mean) * rstd[r];
        y[r * D + i] = zhat[r * D + i] * norm.weight[i] + norm.bias[i];
      }
    }
    return {y, zhat, rstd};
  }

  // FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (eq. 2): x (rows, D) -> out (rows, D), the
  // hidden layer (rows, F) kept for the backward pass
  function feedForward(model, p, x) {
    const {d_model: D, d_ff} = model.c, rows = x.length / D;
    const hidden = new model.Float(rows * d_ff), out = new model.Float(rows * D);
    linear(x, rows, p.linear1.weight, p.linear1.bias, D, d_ff, hidden);
    for (let i = 0; i < hidden.length; i++) if (hidden[i] < 0) hidden[i] = 0;
    linear(hidden, rows, p.linear2.weight, p.linear2.bias, d_ff, D, out);
    return {x, hidden, out};
  }

  // EncoderLayer, post-LN (section 3.1): x = LN(x + SelfAttn(x)), x = LN(x + FFN(x));
  // x (source rows, D)
  function encoderLayer(model, p, x, dims) {
    const attn = multiHeadAttention(model, p.self_attn, x, x, dims);
    const r1 = residual(model, p.attn_residual, x, attn.out);
    const ff = feedForward(model, p.feed_forward, r1.y);
    const r2 = residual(model, p.ff_residual, r1.y, ff.out);
    return {attn, r1, ff, r2, y: r2.y};
  }

  // DecoderLayer, post-LN: y = LN(y + SelfAttn(y, causal)), y = LN(y + CrossAttn(y,
  // memory)), y = LN(y + FFN(y)); y (target rows, D), memory (source rows, D)
  function decoderLayer(model, p, y, memory, dims) {
    const self = multiHeadAttention(model, p.self_attn, y, y, dims.self);
    const r1 = residual(model, p.self_residual, y, self.out);
    const cross = multiHeadAttention(
      model, p.cross_attn, r1.y, memory, dims.cross);
    const r2 = residual(model, p.cross_residual, r1.y, cross.out);
    const ff = feedForward(model, p.feed_forward, r2.y);
    const r3 = residual(model, p.ff_residual, r2.y, ff.out);
    return {self, r1, cross, r2, ff, r3, y: r3.y};
  }

  // ---------------------------------------------------------------- the model

  // Transformer.encode: src (B, S) -> memory (source rows, D), with every layer's tape.
  // encodeSteps is the same a layer a step, each step's value that layer's tape.
  function encode(model, src, B, S) {
    const steps = encodeSteps(model, src, B, S);
    let step = steps.next();
    while (!step.done) step = steps.next();
    return step.value;
  }

  function* encodeSteps(model, src, B, S) {
    const c = model.c, pack = packRows(src, B, S, lengthsOf(src, B, S));
    const x = new model.Float(pack.n * c.d_model);
    embed(model, pack, x);
    const dims = {H: c.n_heads, dh: c.d_head, q: pack, k: pack, causal: false};
    const layers = [];
    let h = x;
    for (const p of model.p.encoder) {
      layers.push(encoderLayer(model, p, h, dims));
      h = layers[layers.length - 1].y;
      yield layers[layers.length - 1];
    }
    return {src, B, S, pack, layers, memory: h};
  }

  // Transformer._decode without a cache: tgt_in (B, T), each row's real length `len`
  // (all T if not given), and the memory -> the logits h E^T (target rows, V), the
  // pre-softmax projection tied to the table (section 3.4)
  function decode(model, enc, tgtIn, T, len = new Int32Array(enc.B).fill(T)) {
    const c = model.c, pack = packRows(tgtIn, enc.B, T, len);
    const y = new model.Float(pack.n * c.d_model);
    embed(model, pack, y);
    const dims = {self: {H: c.n_heads, dh: c.d_head, q: pack, k: pack, causal: true},
      cross: {H: c.n_heads, dh: c.d_head, q: pack, k: enc.pack, causal: false}};
    const layers = [];
    let h = y;
    for (const p of model.p.decoder) {
      layers.push(decoderLayer(model, p, h, enc.memory, dims));
      h = layers[layers.length - 1].y;
    }
    const logits = new model.Float(pack.n * c.vocab);
    linear(h, pack.n, model.p.embedding, null, c.d_model, c.vocab, logits);
    return {tgtIn, T, pack, layers, h, logits};
  }

  scope.transformerLayers = {LN_EPS, parameterShapes, sizeOf, views, product, simd: !!SIMD,
    linear, packRows, lengthsOf, attend, multiHeadAttention, embed, residual, feedForward,
    encoderLayer, decoderLayer, encode, encodeSteps, decode};
  return scope.transformerLayers;
}

if (typeof window !== "undefined" && !window.transformerLayers) {
  transformerLayersModule(window);
}
