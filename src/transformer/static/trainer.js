// Chapter 11's reversal Transformer trained in the reader's browser: the forward pass
// of layers.js (a whole padded batch, keeping what the backward pass needs), and here
// the backward pass written out by hand, the label-smoothed loss, gradient clipping and
// Adam with the Noam schedule, each as the package computes it (model.py, encoder.py,
// decoder.py, multihead.py, attention.py, normalization.py, feed_forward.py,
// embeddings.py, training.py), with the same parameter names as its state_dict. No
// library: typed arrays and loops, and for the matrix products in float32 common.js's
// small WebAssembly kernel. Float32Array by default, Float64Array with
// {float64: true}: one code, the array type chosen when the model is built.
//
// It needs common.js (the token ids, the positional table, attention and the kernel)
// and layers.js (the layers, which the translator's model uses too) first. The whole
// script is one function, so that trainer_page.js can start it as a Web Worker from a
// Blob of the three files' sources (a page opened from disk may not load a worker from
// a file):
//
//   transformerTrainer.createModel(options) -> model   (seeded init, or options.weights)
//   transformerTrainer.trainStep(model, batch, settings) -> loss (training.train_step)
//   transformerTrainer.forward(model, batch, eps) -> tape; backward(model, tape)
//   transformerTrainer.reversalBatches(seed, batchSize) -> iterator of batches
//   transformerTrainer.heldOutSet(seed, n) -> its n held-out pairs, collated in slices;
//     evaluateSlices(model, slices) -> {loss, exactMatch} of them all
//   (trainer_session.js: the session that the page's worker runs)
//
// Shapes in the comments: B sentences, S source and T target positions, D = d_model,
// H heads of d_head, I = H d_head, F = d_ff, V the vocabulary; rows are (batch, position)
// pairs, row r = b * seq + t.
// Sections: the stream · parameters · products' gradients · attention · layers · the
// model · the loss and the update · evaluation.
function transformerTrainerModule(scope) {
  "use strict";
  const common = scope.transformerCommon;  // common.js
  const L = scope.transformerLayers;  // layers.js
  if (!common || !L) throw new Error("trainer.js needs common.js and layers.js first");
  const {PAD_ID, BOS_ID, EOS_ID, positionalEncoding} = common;
  const {parameterShapes, sizeOf, views, product, linear, packRows, lengthsOf} = L;
  const {embed, residual, feedForward, encode, decode} = L;
  const FIRST = 4, N_SYMBOLS = 16, MIN_LENGTH = 4, MAX_LENGTH = 10;  // chapter 11
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

  // ---------------------------------------------------------------- products' gradients

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

  // embed's backward: dE[ids[row]] += sqrt(D) dx[row], dx (rows, D)
  function embedBackward(model, pack, dx) {
    const D = model.c.d_model, dE = model.g.embedding, scale = Math.sqrt(D);
    for (let row = 0; row < pack.n; row++) {
      const e = pack.ids[row] * D;
      for (let i = 0; i < D; i++) dE[e + i] += scale * dx[row * D + i];
    }
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

  // ---------------------------------------------------------------- the interface

  const api = {
    PAD_ID, BOS_ID, EOS_ID, FIRST, N_SYMBOLS, mulberry32, below, reversalPairs, collate,
    reversalBatches, modelConfig, parameterShapes, createModel, product, simd: L.simd,
    forward, backward,
    labelSmoothedLoss, smoothingFloor, clipGradients, noamLr, adamUpdate, trainStep,
    evaluate, evaluationSums, addSums, rates, evaluateSlices, heldOutSet, greedy,
  };
  scope.transformerTrainer = api;
  return api;
}

if (typeof window !== "undefined" && !window.transformerTrainer) {
  transformerTrainerModule(window);
}
