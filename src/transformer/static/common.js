// What the translator's model (transformer.js) and the trainer (trainer.js) share: the
// token ids, the positional table and attention. Both load this file first; it leaves
// window.transformerCommon (in the trainer's Web Worker, self.transformerCommon).
//
//   the constants        tokenizer.py's special ids
//   positionalEncoding   embeddings.sinusoidal_positional_encoding
//   attend               attention.scaled_dot_product_attention: one query, one head
//
// The whole script is one function, so that trainer.js can start its worker from the
// sources of both files.
function transformerCommonModule(scope) {
  "use strict";
  const PAD_ID = 0, UNK_ID = 1, BOS_ID = 2, EOS_ID = 3;  // tokenizer.py

  // PE (max_len, d_model): PE[pos, 2k] = sin(pos w_k), PE[pos, 2k+1] = cos(pos w_k),
  // w_k = 10000^(-2k / d_model), computed in float64 and kept in the array type Float
  // (section 3.5)
  function positionalEncoding(max_len, d_model, Float = Float32Array) {
    const pe = new Float(max_len * d_model);
    for (let k = 0; k < d_model; k += 2) {
      const omega = 10000 ** (-k / d_model);
      for (let pos = 0; pos < max_len; pos++) {
        pe[pos * d_model + k] = Math.sin(pos * omega);
        pe[pos * d_model + k + 1] = Math.cos(pos * omega);
      }
    }
    return pe;
  }

  // Attention(q, K, V) = softmax(q K^T / sqrt(d_head)) V (eq. 1) for one query of one
  // head. q, k, v and out are cursors {data, at, stride} into flat arrays: the query
  // is q.data[q.at ..], key j is k.data[k.at + j * k.stride ..], value j likewise in
  // v, the output goes to out.data[out.at ..], each d_head long. n_keys keys (a mask
  // is a shorter n_keys); their weights are left in p (n_keys,); acc (d_head,) is
  // scratch. With no key, the weights are none and the output is 0.
  function attend(q, k, v, n_keys, d_head, p, acc, out) {
    const Q = q.data, q0 = q.at, K = k.data, V = v.data, root = Math.sqrt(d_head);
    let max = -Infinity;
    for (let j = 0, kj = k.at; j < n_keys; j++, kj += k.stride) {
      let s = 0;
      for (let c = 0; c < d_head; c++) s += Q[q0 + c] * K[kj + c];
      s /= root;
      p[j] = s;
      if (s > max) max = s;
    }
    let sum = 0;
    for (let j = 0; j < n_keys; j++) { p[j] = Math.exp(p[j] - max); sum += p[j]; }
    acc.fill(0);
    for (let j = 0, vj = v.at; j < n_keys; j++, vj += v.stride) {
      const pj = (p[j] /= sum);
      for (let c = 0; c < d_head; c++) acc[c] += pj * V[vj + c];
    }
    const O = out.data, o0 = out.at;
    for (let c = 0; c < d_head; c++) O[o0 + c] = acc[c];
  }

  scope.transformerCommon = {PAD_ID, UNK_ID, BOS_ID, EOS_ID, positionalEncoding, attend};
  return scope.transformerCommon;
}

if (typeof window !== "undefined" && !window.transformerCommon) {
  transformerCommonModule(window);
}
