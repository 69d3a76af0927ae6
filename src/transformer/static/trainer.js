// Chapter 11's reversal Transformer trained in the reader's browser. The forward pass
// in training form (a whole padded batch, keeping what the backward pass needs), the
// backward pass written out by hand, the label-smoothed loss, gradient clipping and
// Adam with the Noam schedule, each as the package computes it (model.py, encoder.py,
// decoder.py, multihead.py, attention.py, normalization.py, feed_forward.py,
// embeddings.py, training.py), with the same parameter names as its state_dict. No
// library: typed arrays and loops, and for the matrix products in float32 common.js's
// small WebAssembly kernel. Float32Array by default, Float64Array with
// {float64: true}: one code, the array type chosen when the model is built.
//
// It needs common.js first (the token ids, the positional table, attention and the
// kernel, which the translator's model uses too). The whole script is one function, so
// that trainer_page.js can start it as a Web Worker from a Blob of the two files'
// sources (a page opened from disk may not load a worker from a file):
//
//   transformerTrainer.createModel(options) -> model   (seeded init, or options.weights)
//   transformerTrainer.trainStep(model, batch, settings) -> loss (training.train_step)
//   transformerTrainer.forward(model, batch, eps) -> tape; backward(model, tape)
//   transformerTrainer.reversalBatches(seed, batchSize) -> iterator of batches
//   transformerTrainer.heldOutSet(seed, n) -> its n held-out pairs, collated in slices;
//     evaluateSlices(model, slices) -> {loss, exactMatch} of them all
//   transformerTrainer.createSession(post) -> {handle(message)}: the worker's protocol
//
// Shapes in the comments: B sentences, S source and T target positions, D = d_model,
// H heads of d_head, I = H d_head, F = d_ff, V the vocabulary; rows are (batch, position)
// pairs, row r = b * seq + t.
// Sections: the stream · parameters · kernels · attention · layers · the model · the
// loss and the update · evaluation · the session.
function transformerTrainerModule(scope) {
  "use strict";
  const common = scope.transformerCommon;  // common.js
  if (!common) throw new Error("trainer.js needs common.js on the page first");
  const {PAD_ID, BOS_ID, EOS_ID, positionalEncoding} = common;
  const FIRST = 4, N_SYMBOLS = 16, MIN_LENGTH = 4, MAX_LENGTH = 10;  // chapter 11
  const LN_EPS = 1e-5;  // normalization.LayerNorm
  const BETA1 = 0.9, BETA2 = 0.98, ADAM_EPS = 1e-9;  // training.make_optimizer
  const now = () => (typeof performance !== "undefined" ? performance.now() : Date.now());

  // ---------------------------------------------------------------- the stream

  // mulberry32: a 32-bit state advanced by a constant, then mixed by two rounds of
  // multiply and xorshift; returns the next output, an integer in [0, 2^32).
  // transformer.reversal's Mulberry32 computes the same numbers.
  function mulberry32(seed) {
    let state = seed >>> 0;
    return () => {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = Math.imul(state ^ (state >>> 15), state | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return (t ^ (t >>> 14)) >>> 0;
    };
  }

  // an integer in [0, n): floor(u n / 2^32), exact in doubles (u n < 2^53)
  const below = (next, n) => Math.floor((next() * n) / 4294967296);

  // n pairs (sequence, its reverse): length 4 + below(7), then each symbol 4 + below(16)
  function reversalPairs(next, n) {
    const pairs = [];
    for (let e = 0; e < n; e++) {
      const length = MIN_LENGTH + below(next, MAX_LENGTH - MIN_LENGTH + 1);
      const sequence = Array.from({length}, () => FIRST + below(next, N_SYMBOLS));
      pairs.push([sequence, sequence.slice().reverse()]);
    }
    return pairs;
  }

  // batching.collate: src (B, S), tgt_in = [BOS] + target (B, T), tgt_out = target +
  // [EOS] (B, T), each padded with PAD to its longest row
  function collate(pairs) {
    const B = pairs.length;
    const S = Math.max(...pairs.map(([s]) => s.length));
    const T = Math.max(...pairs.map(([, t]) => t.length + 1));
    const src = new Int32Array(B * S), tgtIn = new Int32Array(B * T);
    const tgtOut = new Int32Array(B * T);  // Int32Array starts at 0 = PAD
    pairs.forEach(([s, t], b) => {
      src.set(s, b * S);
      tgtIn.set([BOS_ID, ...t], b * T);
      tgtOut.set([...t, EOS_ID], b * T);
    });
    return {B, S, T, src, tgtIn, tgtOut};
  }

  // endless batches of one seed's stream: transformer.reversal.reversal_batches
  function* reversalBatches(seed, batchSize) {
    const next = mulberry32(seed);
    for (;;) yield collate(reversalPairs(next, batchSize));
  }

  // ---------------------------------------------------------------- parameters

  // the sizes; vocabulary 20 (PAD, UNK, BOS, EOS and 16 symbols), no dropout
  function modelConfig(o = {}) {
    const d_model = o.d_model || 32, n_heads = o.n_heads || 2;
    if (d_model % n_heads || d_model % 2) {
      throw new Error(
        `d_model=${d_model} must be even and divisible by n_heads=${n_heads}`);
    }
    return {d_model, n_heads, d_head: d_model / n_heads, d_ff: o.d_ff || 2 * d_model,
      n_layers: o.n_layers || 1, vocab: FIRST + N_SYMBOLS, max_len: o.max_len || 16};
  }

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

  // The package's init, drawn from mulberry32(seed) (not PyTorch's numbers): the table
  // N(0, 1/d_model) (embeddings.TokenEmbedding); every matrix of the stacks
  // Xavier-uniform, U(+-sqrt(6 / (fan_in + fan_out))) (model.xavier_init); attention
  // biases 0; FFN biases U(+-1/sqrt(fan_in)) (nn.Linear); LayerNorm 1 and 0.
  function initParameters(c, Float, seed) {
    const next = mulberry32(seed), uniform = () => (next() + 0.5) / 4294967296;
    const params = {};
    for (const [name, shape] of Object.entries(parameterShapes(c))) {
      const w = params[name] = new Float(sizeOf(shape));
      if (name.startsWith("src_embed")) {
        for (let i = 0; i < w.length; i++) {  // Box-Muller
          w[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform())
            / Math.sqrt(c.d_model);
        }
      } else if (shape.length === 2) {
        const bound = Math.sqrt(6 / (shape[0] + shape[1]));
        for (let i = 0; i < w.length; i++) w[i] = (2 * uniform() - 1) * bound;
      } else if (name.endsWith("norm.weight")) {
        w.fill(1);
      } else if (/linear[12]\.bias$/.test(name)) {
        const fanIn = name.endsWith("linear1.bias") ? c.d_model : c.d_ff;
        for (let i = 0; i < w.length; i++) w[i] = (2 * uniform() - 1) / Math.sqrt(fanIn);
      }
    }
    return params;
  }

  // Given weights: name -> flat numbers (a state_dict's, row-major); the tied aliases
  // may be there or not
  function loadParameters(c, Float, weights) {
    const params = {};
    for (const [name, shape] of Object.entries(parameterShapes(c))) {
      const w = weights[name];
      if (!w || w.length !== sizeOf(shape)) {
        throw new Error(
          `the weights lack ${name} of shape [${shape}] (got ${w && w.length})`);
      }
      params[name] = Float.from(w);
    }
    return params;
  }

  // The parameters (or their gradients, or Adam's moments) of `store` grouped as the
  // modules hold them; W^Q, W^K, W^V are views of the stacked in_proj.
  function views(c, store) {
    const D = c.d_model, I = c.n_heads * c.d_head, get = name => store[name];
    const linear = p => ({weight: get(`${p}.weight`), bias: get(`${p}.bias`)});
    const attention = p => {
      const w = get(`${p}.in_proj.weight`), b = get(`${p}.in_proj.bias`);
      return {w_q: w.subarray(0, I * D), w_k: w.subarray(I * D, 2 * I * D),
        w_v: w.subarray(2 * I * D), b_q: b.subarray(0, I), b_k: b.subarray(I, 2 * I),
        b_v: b.subarray(2 * I), out_proj: linear(`${p}.out_proj`)};
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

  // The model: config, parameters, gradients and Adam's state, all of one array type.
  // options: d_model, n_heads, d_ff, n_layers, max_len; float64; weights or seed.
  function createModel(options = {}) {
    const c = modelConfig(options);
    const Float = options.float64 ? Float64Array : Float32Array;
    const params = options.weights ? loadParameters(c, Float, options.weights)
      : initParameters(c, Float, options.seed || 0);
    const zeros = () => Object.fromEntries(
      Object.entries(params).map(([name, w]) => [name, new Float(w.length)]));
    const grads = zeros(), m = zeros(), v = zeros();
    return {c, Float, round: options.float64 ? x => x : Math.fround,
      params, grads, m, v, p: views(c, params), g: views(c, grads),
      pe: positionalEncoding(c.max_len, c.d_model, Float),
      adamSteps: 0, schedulerSteps: 0};
  }

  // ---------------------------------------------------------------- kernels

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
  // stores it; b may be null
  function linear(x, rows, W, b, n_in, n_out, y) {
    product(x, false, W, true, rows, n_in, n_out, y, false);
    if (!b) return;
    for (let r = 0; r < rows; r++) {
      for (let o = 0; o < n_out; o++) y[r * n_out + o] += b[o];
    }
  }

  // dx (rows, n_in) = dy (rows, n_out) W, the gradient of linear's input; with `add`,
  // dx += dy W
  function linearInputGrad(dy, rows, W, n_in, n_out, dx, add) {
    product(dy, false, W, false, rows, n_out, n_in, dx, add);
  }

  // dW (n_out, n_in) += dy^T x and db (n_out,) += the sum of dy's rows: linear's
  // parameter gradients, dy (rows, n_out), x (rows, n_in); db may be null
  function linearParamGrad(dy, x, rows, n_in, n_out, dW, db) {
    product(dy, true, x, false, n_out, rows, n_in, dW, true);
    if (!db) return;
    for (let o = 0; o < n_out; o++) {
      let sum = 0;
      for (let r = 0; r < rows; r++) sum += dy[r * n_out + o];
      db[o] += sum;
    }
  }

  // a += b, elementwise
  function addInto(a, b) {
    for (let i = 0; i < a.length; i++) a[i] += b[i];
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

  // attend's backward, dctx -> dq, dk and dv, overwritten:
  // dP = dctx V^T, dS = P * (dP - rowsum(P * dP)) (the softmax's Jacobian),
  // dQ = dS K / sqrt(d_head), dK = dS^T Q / sqrt(d_head), dV = P^T dctx.
  function attendBackward(q, k, v, dims, P, dctx, dq, dk, dv) {
    const {H, dh, causal, q: Q, k: K} = dims, I = H * dh, scale = 1 / Math.sqrt(dh);
    const dP = new Float64Array(K.seq), acc = new Float64Array(dh);
    dk.fill(0);
    dv.fill(0);
    for (let b = 0; b < Q.B; b++) {
      for (let h = 0; h < H; h++) {
        for (let i = 0; i < Q.len[b]; i++) {
          const qi = (Q.start[b] + i) * I + h * dh, p0 = ((b * H + h) * Q.seq + i) * K.seq;
          const keys = causal ? Math.min(i + 1, K.len[b]) : K.len[b];
          let dot = 0;
          for (let j = 0; j < keys; j++) {
            const w = P[p0 + j], vj = (K.start[b] + j) * I + h * dh;
            if (w === 0) continue;  // underflowed: no gradient either way
            let g = 0;
            for (let c = 0; c < dh; c++) g += dctx[qi + c] * v[vj + c];
            dP[j] = g;
            dot += w * g;
          }
          acc.fill(0);
          for (let j = 0; j < keys; j++) {
            const w = P[p0 + j], kj = (K.start[b] + j) * I + h * dh;
            if (w === 0) continue;
            const ds = w * (dP[j] - dot) * scale;
            for (let c = 0; c < dh; c++) {
              acc[c] += ds * k[kj + c];
              dk[kj + c] += ds * q[qi + c];
              dv[kj + c] += w * dctx[qi + c];
            }
          }
          for (let c = 0; c < dh; c++) dq[qi + c] = acc[c];
        }
      }
    }
  }

  // MultiHead(x, y) = Concat(head_1..head_h) W^O + b^O, head_i = Attention(x W_i^Q,
  // y W_i^K, y W_i^V) (section 3.2.2): y = x for self-attention, the memory for
  // cross-attention. x (queries' rows, D), y (keys' rows, D) -> tape.out (like x).
  function multiHeadAttention(model, p, x, y, dims) {
    const D = model.c.d_model, I = dims.H * dims.dh, Float = model.Float;
    const rowsQ = dims.q.n, rowsK = dims.k.n;
    const q = new Float(rowsQ * I), k = new Float(rowsK * I), v = new Float(rowsK * I);
    linear(x, rowsQ, p.w_q, p.b_q, D, I, q);  // (B*Tq, I)
    linear(y, rowsK, p.w_k, p.b_k, D, I, k);  // (B*Tk, I)
    linear(y, rowsK, p.w_v, p.b_v, D, I, v);
    const P = new Float(dims.q.B * dims.H * dims.q.seq * dims.k.seq);
    const ctx = new Float(rowsQ * I);
    attend(q, k, v, dims, P, ctx);
    const out = new Float(rowsQ * D);
    linear(ctx, rowsQ, p.out_proj.weight, p.out_proj.bias, I, D, out);  // (B*Tq, D)
    return {x, y, q, k, v, P, ctx, out, dims};
  }

  // multiHeadAttention's backward: dout (B*Tq, D) -> dx (B*Tq, D), overwritten, and
  // dy (B*Tk, D), added to; for self-attention dy is dx itself. Gradients of W^Q, W^K,
  // W^V, W^O and their biases go into g.
  function multiHeadAttentionBackward(model, p, g, t, dout, dx, dy) {
    const D = model.c.d_model, dims = t.dims, I = dims.H * dims.dh, Float = model.Float;
    const rowsQ = dims.q.n, rowsK = dims.k.n;
    const dctx = new Float(rowsQ * I);
    linearParamGrad(dout, t.ctx, rowsQ, I, D, g.out_proj.weight, g.out_proj.bias);
    linearInputGrad(dout, rowsQ, p.out_proj.weight, I, D, dctx, false);
    const dq = new Float(rowsQ * I), dk = new Float(rowsK * I), dv = new Float(rowsK * I);
    attendBackward(t.q, t.k, t.v, dims, t.P, dctx, dq, dk, dv);
    linearParamGrad(dq, t.x, rowsQ, D, I, g.w_q, g.b_q);
    linearParamGrad(dk, t.y, rowsK, D, I, g.w_k, g.b_k);
    linearParamGrad(dv, t.y, rowsK, D, I, g.w_v, g.b_v);
    linearInputGrad(dq, rowsQ, p.w_q, D, I, dx, false);  // first: dy may be dx
    linearInputGrad(dk, rowsK, p.w_k, D, I, dy, true);
    linearInputGrad(dv, rowsK, p.w_v, D, I, dy, true);
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

  // embed's backward: dE[ids[row]] += sqrt(D) dx[row], dx (rows, D)
  function embedBackward(model, pack, dx) {
    const D = model.c.d_model, dE = model.g.embedding, scale = Math.sqrt(D);
    for (let row = 0; row < pack.n; row++) {
      const e = pack.ids[row] * D;
      for (let i = 0; i < D; i++) dE[e + i] += scale * dx[row * D + i];
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

  // residual's backward: dy (rows, D) -> dz, the gradient of z = x + h (both branches
  // get it): dzhat = dy gamma, dz = rstd (dzhat - mean(dzhat) - zhat mean(dzhat zhat));
  // dgamma += sum dy zhat, dbeta += sum dy
  function residualBackward(model, norm, gnorm, t, dy) {
    const D = model.c.d_model, rows = dy.length / D, dz = new model.Float(rows * D);
    const dzhat = new Float64Array(D);
    for (let r = 0; r < rows; r++) {
      let mean = 0, dot = 0;
      for (let i = 0; i < D; i++) {
        const g = dy[r * D + i], zh = t.zhat[r * D + i];
        dzhat[i] = g * norm.weight[i];
        mean += dzhat[i];
        dot += dzhat[i] * zh;
        gnorm.weight[i] += g * zh;
        gnorm.bias[i] += g;
      }
      mean /= D;
      dot /= D;
      for (let i = 0; i < D; i++) {
        dz[r * D + i] = t.rstd[r] * (dzhat[i] - mean - t.zhat[r * D + i] * dot);
      }
    }
    return dz;
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

  // feedForward's backward: dout (rows, D) -> dx (rows, D); the ReLU passes the gradient
  // where its output is positive
  function feedForwardBackward(model, p, g, t, dout) {
    const {d_model: D, d_ff} = model.c, rows = dout.length / D;
    const dhidden = new model.Float(rows * d_ff), dx = new model.Float(rows * D);
    linearParamGrad(dout, t.hidden, rows, d_ff, D, g.linear2.weight, g.linear2.bias);
    linearInputGrad(dout, rows, p.linear2.weight, d_ff, D, dhidden, false);
    for (let i = 0; i < dhidden.length; i++) if (!(t.hidden[i] > 0)) dhidden[i] = 0;
    linearParamGrad(dhidden, t.x, rows, D, d_ff, g.linear1.weight, g.linear1.bias);
    linearInputGrad(dhidden, rows, p.linear1.weight, D, d_ff, dx, false);
    return dx;
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

  // encoderLayer's backward: dy (B*S, D) -> dx (B*S, D)
  function encoderLayerBackward(model, p, g, t, dy) {
    const dz2 = residualBackward(model, p.ff_residual, g.ff_residual, t.r2, dy);
    const dx1 = feedForwardBackward(model, p.feed_forward, g.feed_forward, t.ff, dz2);
    addInto(dx1, dz2);  // the residual path around the FFN
    const dz1 = residualBackward(model, p.attn_residual, g.attn_residual, t.r1, dx1);
    const dx = new model.Float(dz1.length);
    multiHeadAttentionBackward(model, p.self_attn, g.self_attn, t.attn, dz1, dx, dx);
    addInto(dx, dz1);  // the residual path around the attention
    return dx;
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

  // decoderLayer's backward: dy (B*T, D) -> the gradient of its input (B*T, D); the
  // memory's gradient is added to dmemory (B*S, D)
  function decoderLayerBackward(model, p, g, t, dy, dmemory) {
    const dz3 = residualBackward(model, p.ff_residual, g.ff_residual, t.r3, dy);
    const dx2 = feedForwardBackward(model, p.feed_forward, g.feed_forward, t.ff, dz3);
    addInto(dx2, dz3);
    const dz2 = residualBackward(model, p.cross_residual, g.cross_residual, t.r2, dx2);
    const dx1 = new model.Float(dz2.length);
    multiHeadAttentionBackward(
      model, p.cross_attn, g.cross_attn, t.cross, dz2, dx1, dmemory);
    addInto(dx1, dz2);
    const dz1 = residualBackward(model, p.self_residual, g.self_residual, t.r1, dx1);
    const dx = new model.Float(dz1.length);
    multiHeadAttentionBackward(model, p.self_attn, g.self_attn, t.self, dz1, dx, dx);
    addInto(dx, dz1);
    return dx;
  }

  // ---------------------------------------------------------------- the model

  // Transformer.encode: src (B, S) -> memory (source rows, D), with every layer's tape
  function encode(model, src, B, S) {
    const c = model.c, pack = packRows(src, B, S, lengthsOf(src, B, S));
    const x = new model.Float(pack.n * c.d_model);
    embed(model, pack, x);
    const dims = {H: c.n_heads, dh: c.d_head, q: pack, k: pack, causal: false};
    const layers = [];
    let h = x;
    for (const p of model.p.encoder) {
      layers.push(encoderLayer(model, p, h, dims));
      h = layers[layers.length - 1].y;
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

  // the encoder and decoder passes of a batch, and its targets at the decoder's rows
  function run(model, batch) {
    const enc = encode(model, batch.src, batch.B, batch.S);
    const len = lengthsOf(batch.tgtOut, batch.B, batch.T);
    const dec = decode(model, enc, batch.tgtIn, batch.T, len);
    return {enc, dec, target: packRows(batch.tgtOut, batch.B, batch.T, len).ids};
  }

  // Transformer.forward and the loss, for training: the tape of the whole pass
  function forward(model, batch, eps = 0.1) {
    const {enc, dec, target} = run(model, batch);
    const dlogits = new model.Float(dec.logits.length);
    const loss = labelSmoothedLoss(dec.logits, target, model.c.vocab, eps, dlogits);
    return {batch, enc, dec, target, dlogits, loss};
  }

  // The backward pass of forward's tape: every parameter's gradient into model.grads
  // (zeroed first), d loss / d theta
  function backward(model, tape) {
    const c = model.c, g = model.g, p = model.p, {enc, dec} = tape;
    for (const grad of Object.values(model.grads)) grad.fill(0);
    // the tied projection: dh = dlogits E, dE += dlogits^T h
    const rowsT = dec.pack.n, dh = new model.Float(rowsT * c.d_model);
    linearParamGrad(tape.dlogits, dec.h, rowsT, c.d_model, c.vocab, g.embedding, null);
    linearInputGrad(tape.dlogits, rowsT, p.embedding, c.d_model, c.vocab, dh, false);
    const dmemory = new model.Float(enc.pack.n * c.d_model);
    let dy = dh;
    for (let l = c.n_layers - 1; l >= 0; l--) {
      dy = decoderLayerBackward(
        model, p.decoder[l], g.decoder[l], dec.layers[l], dy, dmemory);
    }
    embedBackward(model, dec.pack, dy);
    let dx = dmemory;
    for (let l = c.n_layers - 1; l >= 0; l--) {
      dx = encoderLayerBackward(model, p.encoder[l], g.encoder[l], enc.layers[l], dx);
    }
    embedBackward(model, enc.pack, dx);
  }

  // ---------------------------------------------------------------- loss and update

  // training.label_smoothed_loss (F.cross_entropy with label_smoothing=eps and
  // ignore_index=PAD, reduction mean): over the N non-pad targets,
  // loss = mean -sum_c q_c log p_c with q = (1 - eps) onehot(target) + eps / V;
  // dlogits (rows, V) = (p - q) / N, 0 on pad rows. logits (rows, V), target (rows,).
  function labelSmoothedLoss(logits, target, V, eps, dlogits) {
    let tokens = 0, total = 0;
    for (const t of target) if (t !== PAD_ID) tokens += 1;
    const p = new Float64Array(V);
    for (let r = 0; r < target.length; r++) {
      if (target[r] === PAD_ID) continue;
      let max = -Infinity, sum = 0, sumLogits = 0;
      for (let k = 0; k < V; k++) max = Math.max(max, logits[r * V + k]);
      for (let k = 0; k < V; k++) {
        sum += (p[k] = Math.exp(logits[r * V + k] - max));
        sumLogits += logits[r * V + k];
      }
      const lse = max + Math.log(sum);
      // -sum_c q_c log p_c = (1 - eps) (lse - z_target) + (eps / V) (V lse - sum_c z_c)
      total += (1 - eps) * (lse - logits[r * V + target[r]])
        + (eps / V) * (V * lse - sumLogits);
      if (!dlogits) continue;
      for (let k = 0; k < V; k++) {
        const q = eps / V + (k === target[r] ? 1 - eps : 0);
        dlogits[r * V + k] = (p[k] / sum - q) / tokens;
      }
    }
    return total / tokens;
  }

  // H(q), the entropy of the smoothed target: no model's loss is lower (chapter 11)
  function smoothingFloor(V, eps) {
    const hit = 1 - eps + eps / V, other = eps / V;
    return -(hit * Math.log(hit)) - (other > 0 ? (V - 1) * other * Math.log(other) : 0);
  }

  // nn.utils.get_total_norm and clip_grads_with_norm_: ||g|| over every gradient, then
  // g *= min(1, max_norm / (||g|| + 1e-6)); returns ||g|| (not finite: left as it is)
  function clipGradients(model, maxNorm) {
    const r = model.round;
    let squares = 0;
    for (const grad of Object.values(model.grads)) {
      for (let i = 0; i < grad.length; i++) squares += grad[i] * grad[i];
    }
    const norm = r(Math.sqrt(squares));
    if (!(maxNorm > 0) || !Number.isFinite(norm)) return norm;
    const coefficient = r(maxNorm / r(norm + 1e-6));
    if (coefficient < 1) {
      for (const grad of Object.values(model.grads)) {
        for (let i = 0; i < grad.length; i++) grad[i] *= coefficient;
      }
    }
    return norm;
  }

  // training.noam_lr: factor d_model^-0.5 min(step^-0.5, step warmup^-1.5), step from 1
  function noamLr(step, d_model, warmup, factor = 1) {
    return factor * d_model ** -0.5 * Math.min(step ** -0.5, step * warmup ** -1.5);
  }

  // Adam(0.9, 0.98, 1e-9) as PyTorch's fused CPU kernel steps it (make_optimizer's
  // fused=True), at rate lr: m <- m + (1 - b1)(g - m), v <- b2 v + (1 - b2) g^2,
  // theta <- theta - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps); in float32
  // mode each product rounded as the kernel rounds it.
  function adamUpdate(model, lr) {
    const r = model.round, t = (model.adamSteps += 1);
    const stepSize = r(lr / (1 - BETA1 ** t)), root2 = r(Math.sqrt(1 - BETA2 ** t));
    const c1 = r(1 - BETA1), c2 = r(1 - BETA2), b2 = r(BETA2), eps = r(ADAM_EPS);
    for (const [name, theta] of Object.entries(model.params)) {
      const g = model.grads[name], m = model.m[name], v = model.v[name];
      for (let i = 0; i < theta.length; i++) {
        m[i] = m[i] + c1 * (g[i] - m[i]);
        v[i] = r(v[i] * b2) + r(r(c2 * g[i]) * g[i]);
        const denominator = r(r(Math.sqrt(v[i])) / root2) + eps;
        theta[i] = theta[i] - r(r(stepSize * m[i]) / r(denominator));
      }
    }
  }

  // training.train_step: forward, the loss, backward, clip to settings.clip (1.0), Adam
  // at the Noam rate of this step; a gradient that is not finite skips the update (the
  // schedule still advances). settings: labelSmoothing (0.1), clip, warmup (100), factor
  // (1). Returns the loss, of the weights before the update.
  function trainStep(model, batch, settings = {}) {
    const eps = settings.labelSmoothing ?? 0.1;
    const tape = forward(model, batch, eps);
    backward(model, tape);
    const norm = clipGradients(model, settings.clip ?? 1.0);
    const lr = noamLr(model.schedulerSteps + 1, model.c.d_model, settings.warmup || 100,
      settings.factor ?? 1);
    if (Number.isFinite(norm)) adamUpdate(model, lr);
    model.schedulerSteps += 1;
    // the batch's exact match before the update, for free: when to ask the held-out set
    model.batchExact = exactMatches(tape.dec.logits, tape.target, tape.dec.pack,
      model.c.vocab) / batch.B;
    return tape.loss;
  }

  // ---------------------------------------------------------------- evaluation

  // The loss and the exact-match rate of a batch, teacher-forced as chapter 11 counts
  // it: a sentence is right when the argmax is the target at every non-pad position
  function evaluate(model, batch, eps = 0.1) {
    return rates(evaluationSums(model, batch, eps));
  }

  // evaluate's sums over a batch: the loss summed over the target tokens, the tokens,
  // the sentences and the sentences right at every position
  function evaluationSums(model, batch, eps = 0.1) {
    const {dec, target} = run(model, batch), V = model.c.vocab;
    const tokens = target.length;  // the real positions only (packed)
    return {loss: labelSmoothedLoss(dec.logits, target, V, eps, null) * tokens, tokens,
      sentences: batch.B, exact: exactMatches(dec.logits, target, dec.pack, V)};
  }

  const rates = sums => ({loss: sums.loss / sums.tokens,
    exactMatch: sums.exact / sums.sentences});

  // a + b, sum by sum
  const addSums = (a, b) => ({loss: a.loss + b.loss, tokens: a.tokens + b.tokens,
    sentences: a.sentences + b.sentences, exact: a.exact + b.exact});

  // evaluate over a held-out set's slices: the figures of the whole set
  function evaluateSlices(model, slices, eps = 0.1) {
    return rates(slices.map(batch => evaluationSums(model, batch, eps)).reduce(addSums));
  }

  // The held-out set of a seed: n sequences of another stream of the same generator,
  // collated in slices of HELD_OUT_SLICE, so that a page can evaluate it a slice at a
  // time between its slices of training and answer what is typed meanwhile
  const HELD_OUT_SLICE = 100;
  function heldOutSet(seed, n) {
    const pairs = reversalPairs(mulberry32(seed ^ 0x5eed5eed), n), slices = [];
    for (let i = 0; i < n; i += HELD_OUT_SLICE) {
      slices.push(collate(pairs.slice(i, i + HELD_OUT_SLICE)));
    }
    return {n, pairs, slices};
  }

  // how many sentences of a pack have the argmax right at every position
  function exactMatches(logits, target, pack, V) {
    let exact = 0;
    for (let b = 0; b < pack.B; b++) {
      let right = true;
      for (let t = pack.start[b]; t < pack.start[b + 1] && right; t++) {
        right = argmax(logits, t * V, V) === target[t];
      }
      exact += right;
    }
    return exact;
  }

  function argmax(values, start, n) {
    let best = 0;
    for (let k = 1; k < n; k++) if (values[start + k] > values[start + best]) best = k;
    return best;
  }

  // Greedy decoding of one source (ids), at most `limit` tokens or to EOS; returns the
  // output ids and the cross-attention that chose them: cross[l][h] (T_out, S) as flat
  // arrays, row t = the query that produced output t
  function greedy(model, ids, limit = ids.length + 3) {
    const S = ids.length, enc = encode(model, Int32Array.from(ids), 1, S);
    const output = [], V = model.c.vocab;
    limit = Math.min(limit, model.c.max_len);
    let dec = null;
    while (output.length < limit && output[output.length - 1] !== EOS_ID) {
      const tgtIn = Int32Array.from([BOS_ID, ...output]);
      dec = decode(model, enc, tgtIn, tgtIn.length);
      output.push(argmax(dec.logits, (tgtIn.length - 1) * V, V));
    }
    const cross = dec.layers.map(layer => Array.from({length: model.c.n_heads},
      (_, h) => Array.from(layer.cross.P.subarray(h * dec.T * S, (h + 1) * dec.T * S))));
    return {output, cross};
  }

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

  // ---------------------------------------------------------------- the interface

  const api = {
    PAD_ID, BOS_ID, EOS_ID, FIRST, N_SYMBOLS, mulberry32, below, reversalPairs, collate,
    reversalBatches, modelConfig, parameterShapes, createModel, product, simd: !!SIMD,
    forward, backward,
    labelSmoothedLoss, smoothingFloor, clipGradients, noamLr, adamUpdate, trainStep,
    evaluate, evaluateSlices, heldOutSet, greedy, createSession,
    // the worker's source, common.js and this script: the page builds its Worker from it
    workerSource: () => [transformerCommonModule, transformerTrainerModule]
      .map(module => `(${String(module)})(self);\n`).join(""),
  };
  scope.transformerTrainer = api;
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
  return api;
}

if (typeof window !== "undefined" && !window.transformerTrainer) {
  transformerTrainerModule(window);
}
