// What the translator's model (transformer.js) and the trainer (trainer.js) share: the
// token ids, the positional table, attention and the matrix-product kernel. Both load
// this file first; it leaves window.transformerCommon (in the trainer's Web Worker,
// self.transformerCommon).
//
//   the constants        tokenizer.py's special ids
//   positionalEncoding   embeddings.sinusoidal_positional_encoding
//   attend               attention.scaled_dot_product_attention: one query, one head
//   kernel               the WebAssembly SIMD matrix product (simdKernel, written out
//                        by kernelBytes and kernelCode), with a model's weights kept in
//                        its memory (keepWeight) and nn.Linear on them (linearKept)
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

  // ---------------------------------------------------------------- the kernel

  // The kernel, a WebAssembly module written out byte by byte (the binary format of
  // the WebAssembly specification, with its fixed-width SIMD). It exports
  // product(a, ar, ai, b, c, m, k, n): at byte address c, C (m, n) = A B, where A's
  // element (r, i) is the float32 at a + r ar + i ai and B (k, n) is at b, row-major;
  // m a multiple of 4, n of 8. It runs over blocks of 4 rows by 8 columns of C, which
  // 8 vectors of 4 floats hold: each step of i adds A(r, i) B(i, o..o+7) to them.
  // Returns the kernel, or null where WebAssembly or its SIMD is missing:
  //   run(a, ar, ai, b, c, m, k, n)  the product, addresses in bytes
  //   floats(n)   a Float32Array over the memory, grown to hold n floats (a view taken
  //               before a later call to floats or keep may be stale: take it again)
  //   keep(n)     n floats kept for good (a model's weights): where they begin, in
  //               floats; they lie below `top`, and each call's scratch above it
  function simdKernel() {
    try {
      const memory = new WebAssembly.Memory({initial: 1});
      const module = new WebAssembly.Module(kernelBytes());
      const run = new WebAssembly.Instance(module, {env: {memory}}).exports.product;
      let view = new Float32Array(memory.buffer);
      const floats = n => {
        const more = Math.ceil((4 * n - memory.buffer.byteLength) / 65536);
        if (more > 0) memory.grow(more);
        if (view.buffer !== memory.buffer) view = new Float32Array(memory.buffer);
        return view;
      };
      const kernel = {run, floats, top: 0, keep(n) {
        const at = kernel.top;
        kernel.top += n + (-n & 3);  // 16-byte aligned
        floats(kernel.top);
        return at;
      }};
      return kernel;
    } catch (error) {
      return null;
    }
  }

  // the module: its type, the memory it imports, the function and its export, the code
  function kernelBytes() {
    const uleb = n => n < 128 ? [n] : [(n & 127) | 128, ...uleb(n >>> 7)];
    const name = s => [s.length, ...Array.from(s, ch => ch.charCodeAt(0))];
    const section = (id, bytes) => [id, ...uleb(bytes.length), ...bytes];
    const I32 = 0x7f, V128 = 0x7b, body = kernelCode();
    // locals: 9 more i32 after the 8 parameters, and 11 v128
    const code = [2, 9, I32, 11, V128, ...body, 0x0b];
    return new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0,  // "\0asm", version 1
      ...section(1, [1, 0x60, 8, ...Array(8).fill(I32), 0]),  // (8 x i32) -> ()
      ...section(2, [1, ...name("env"), ...name("memory"), 2, 0, 1]),  // memory, min 1
      ...section(3, [1, 0]),  // one function, of type 0
      ...section(7, [1, ...name("product"), 0, 0]),
      ...section(10, [1, ...uleb(code.length), ...code])]);
  }

  // the instructions of product; locals by number: the parameters, then i32 indices
  // and addresses, then the 8 accumulators, B's two vectors and A's value, splat
  function kernelCode() {
    const [a, ar, ai, b, c, m, k, n, r, o, i, pa, pb, pc, ar2, ar3, nb] =
      Array.from({length: 17}, (_, j) => j);
    const ACC = 17, B0 = 25, B1 = 26, X = 27;
    const get = x => [0x20, x], set = x => [0x21, x], tee = x => [0x22, x];
    const num = v => [0x41, v];  // i32.const, 0 <= v < 64
    const ADD = 0x6a, SUB = 0x6b, MUL = 0x6c, SHL = 0x74, LT_U = 0x49;
    const LOOP = [0x03, 0x40], END = 0x0b, BR_IF = [0x0d, 0];  // br_if to the loop
    const simd = op => [0xfd, ...(op < 128 ? [op] : [(op & 127) | 128, op >>> 7])];
    const load = offset => [...simd(0x00), 4, offset];  // v128.load
    const store = offset => [...simd(0x0b), 4, offset];  // v128.store
    const splat = [...simd(0x09), 2, 0];  // v128.load32_splat: 4 copies of a float
    const ZERO = [...simd(0x0c), ...Array(16).fill(0)];  // v128.const 0
    const F32X4_ADD = simd(0xe4), F32X4_MUL = simd(0xe6);
    // acc_j += X * B(j % 2): the row's accumulator for columns 0..3 or 4..7
    const fma = j => [...get(ACC + j), ...get(X), ...get(j % 2 ? B1 : B0),
      ...F32X4_MUL, ...F32X4_ADD, ...set(ACC + j)];
    const row = (j, offset) =>
      [...get(pa), ...offset, ...splat, ...set(X), ...fma(2 * j), ...fma(2 * j + 1)];
    return [
      ...get(ar), ...get(ar), ADD, ...set(ar2), ...get(ar2), ...get(ar), ADD, ...set(ar3),
      ...get(n), ...num(2), SHL, ...set(nb),  // bytes per row of B and C
      ...num(0), ...set(r), ...LOOP,  // for r in 0, 4, .. m - 4
      ...num(0), ...set(o), ...LOOP,  // for o in 0, 8, .. n - 8
      ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap(j => [...ZERO, ...set(ACC + j)]),
      ...get(a), ...get(r), ...get(ar), MUL, ADD, ...set(pa),  // A(r, 0)
      ...get(b), ...get(o), ...num(2), SHL, ADD, ...set(pb),  // B(0, o)
      ...get(k), ...set(i), ...LOOP,  // k times
      ...get(pb), ...load(0), ...set(B0), ...get(pb), ...load(16), ...set(B1),
      ...row(0, []), ...row(1, [...get(ar), ADD]),
      ...row(2, [...get(ar2), ADD]), ...row(3, [...get(ar3), ADD]),
      ...get(pa), ...get(ai), ADD, ...set(pa), ...get(pb), ...get(nb), ADD, ...set(pb),
      ...get(i), ...num(1), SUB, ...tee(i), ...BR_IF, END,
      // C(r.. r + 3, o.. o + 7) = the accumulators
      ...get(c), ...get(r), ...get(n), MUL, ...get(o), ADD, ...num(2), SHL, ADD, ...set(pc),
      ...[0, 1, 2, 3].flatMap(j => [...get(pc), ...get(ACC + 2 * j), ...store(0),
        ...get(pc), ...get(ACC + 2 * j + 1), ...store(16), ...get(pc), ...get(nb), ADD,
        ...set(pc)]),
      ...get(o), ...num(8), ADD, ...tee(o), ...get(n), LT_U, ...BR_IF, END,
      ...get(r), ...num(4), ADD, ...tee(r), ...get(m), LT_U, ...BR_IF, END,
    ];
  }

  const kernel = simdKernel();

  // W (n_out, n_in), as nn.Linear stores it, kept in the kernel's memory as W^T
  // (n_in, np), np = n_out padded with zero columns to a multiple of 8: the kernel's B
  // for x W^T. Returns {at (in floats), n_in, n_out, np}; null without the kernel.
  function keepWeight(W, n_out, n_in) {
    if (!kernel) return null;
    const np = n_out + (-n_out & 7), at = kernel.keep(n_in * np);
    const F = kernel.floats(at + n_in * np);
    for (let o = 0; o < n_out; o++) {
      const row = o * n_in;
      for (let i = 0; i < n_in; i++) F[at + i * np + o] = W[row + i];
    }
    for (let i = 0; i < n_in; i++) F.fill(0, at + i * np + n_out, at + (i + 1) * np);
    return {at, n_in, n_out, np};
  }

  // y (rows, n_out) = x (rows, n_in) W^T + b for W kept by keepWeight: x copied into the
  // kernel's scratch (padded with zero rows to a multiple of 4), the product computed
  // there with float32 sums as PyTorch's, and copied out with b added (b may be null)
  function linearKept(x, rows, w, b, y) {
    const {n_in, n_out, np} = w, mp = rows + (-rows & 3);
    const a = kernel.top, c = a + mp * n_in;
    const F = kernel.floats(c + mp * np);
    F.set(x.subarray(0, rows * n_in), a);
    F.fill(0, a + rows * n_in, c);
    kernel.run(4 * a, 4 * n_in, 4, 4 * w.at, 4 * c, mp, n_in, np);
    for (let r = 0; r < rows; r++) {
      const from = c + r * np, to = r * n_out;
      if (b) for (let o = 0; o < n_out; o++) y[to + o] = F[from + o] + b[o];
      else y.set(F.subarray(from, from + n_out), to);
    }
  }

  scope.transformerCommon = {PAD_ID, UNK_ID, BOS_ID, EOS_ID, positionalEncoding, attend,
    kernel, keepWeight, linearKept};
  return scope.transformerCommon;
}

if (typeof window !== "undefined" && !window.transformerCommon) {
  transformerCommonModule(window);
}
