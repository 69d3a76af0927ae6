// The shipped translator in the reader's browser (chapter 15): the book's forward pass
// written out in plain JavaScript, beside the Python it mirrors. It reads the files
// that src/transformer/weights/ ships, as they are: manifest.json, the
// safetensors weights (int8 rows with float16 scales) and the SentencePiece model.
// book/_ext/translator_assets.py writes each file F into the built book as F.js, a
// script that holds F's bytes, because a page opened from disk may not fetch files;
// this script adds those scripts only when a translation is first asked for.
//
//   transformerTranslate(direction, text) -> Promise of {translation, sourcePieces,
//     sourceIds, outputPieces, outputIds, score, confidence, seconds, loadSeconds,
//     truncated, message, attention: {encoder, decoder, cross}}
//
// Sections: bytes · safetensors · SentencePiece · the model · beam search ·
// loading · the page.
(() => {
  "use strict";
  if (window.transformerTranslator) {
    // the script is on the page twice: mount the new containers
    window.transformerTranslator.mountAll();
    return;
  }
  const script = document.currentScript;
  // the assets' folder
  const BASE = new URL(".", script && script.src ? script.src : location.href).href;
  const PAD_ID = 0, UNK_ID = 1, BOS_ID = 2, EOS_ID = 3;  // tokenizer.py
  // decoding.py: at most 50 tokens more than the source (paper 6.1)
  const EXTRA_LENGTH = 50;
  const UTF8 = new TextDecoder(), ENCODE_UTF8 = new TextEncoder();

  // ---------------------------------------------------------------- bytes

  function fromBase64(text) {
    // where browsers have it
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
    const binary = atob(text), bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  const hex = bytes => Array.from(bytes, b => b.toString(16).padStart(2, "0")).join("");

  // SHA-256 (FIPS 180-4), for pages without crypto.subtle (plain http off localhost)
  const K256 = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
    0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
    0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const ror = (x, n) => (x >>> n) | (x << (32 - n));

  function sha256ByHand(bytes) {
    const n = bytes.length;
    const padded = new Uint8Array(((n + 72) >> 6) << 6);  // + 0x80 + 8 bytes
    padded.set(bytes);
    padded[n] = 0x80;
    const view = new DataView(padded.buffer);
    // the length in bits, big-endian
    view.setUint32(padded.length - 8, Math.floor(n / 2 ** 29));
    view.setUint32(padded.length - 4, (n * 8) >>> 0);
    const H = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
    const w = new Uint32Array(64);
    for (let block = 0; block < padded.length; block += 64) {
      for (let t = 0; t < 16; t++) w[t] = view.getUint32(block + 4 * t);
      for (let t = 16; t < 64; t++) {
        const a = w[t - 15], b = w[t - 2];
        w[t] = w[t - 16] + (ror(a, 7) ^ ror(a, 18) ^ (a >>> 3)) + w[t - 7]
          + (ror(b, 17) ^ ror(b, 19) ^ (b >>> 10));  // Uint32Array keeps it mod 2^32
      }
      let [a, b, c, d, e, f, g, h] = H;
      for (let t = 0; t < 64; t++) {
        const t1 = (h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g))
          + K256[t] + w[t]) | 0;
        const t2 = ((ror(a, 2) ^ ror(a, 13) ^ ror(a, 22))
          + ((a & b) ^ (a & c) ^ (b & c))) | 0;
        [h, g, f, e, d, c, b, a] = [g, f, e, (d + t1) | 0, c, b, a, (t1 + t2) | 0];
      }
      [a, b, c, d, e, f, g, h].forEach((x, i) => { H[i] += x; });
    }
    return Array.from(H, x => x.toString(16).padStart(8, "0")).join("");
  }

  async function sha256(bytes) {
    // a secure context: file://, https, localhost
    if (window.crypto && crypto.subtle) {
      return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
    }
    return sha256ByHand(bytes);
  }

  // an IEEE 754 half as the number it stands for (exactly: every half is a double)
  function float16(bits) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
    if (exponent === 0) return sign * fraction * 2 ** -24;  // zero and the subnormals
    if (exponent === 31) return fraction ? NaN : sign * Infinity;
    return sign * (1024 + fraction) * 2 ** (exponent - 25);
  }

  // ---------------------------------------------------------------- safetensors

  // An 8-byte little-endian header size, the header (JSON: name -> dtype, shape,
  // data_offsets into the data that follows), then the tensors' raw
  // little-endian bytes.
  function readSafetensors(bytes) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const size = Number(view.getBigUint64(0, true));
    const header = JSON.parse(UTF8.decode(bytes.subarray(8, 8 + size)));
    const tensors = {};
    for (const [name, info] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const [begin, end] = info.data_offsets;
      tensors[name] = {dtype: info.dtype, shape: info.shape,
        bytes: bytes.subarray(8 + size + begin, 8 + size + end)};
    }
    return tensors;
  }

  function halves(tensor) {  // a float16 tensor's values
    const view = new DataView(
      tensor.bytes.buffer, tensor.bytes.byteOffset, tensor.bytes.byteLength);
    const values = new Float64Array(tensor.bytes.byteLength / 2);
    for (let i = 0; i < values.length; i++) {
      values[i] = float16(view.getUint16(2 * i, true));
    }
    return values;
  }

  // pretrained.unpack_weights: each matrix w = q * s from its int8 rows q and float16
  // scales s ("NAME:scale", one a row), each vector from float16; all float32, as
  // PyTorch computes them. (q * s needs at most 8 + 11 significant bits, so the float32
  // product is exact in both.)
  function unpackWeights(tensors) {
    const weights = {};
    for (const [name, tensor] of Object.entries(tensors)) {
      if (name.endsWith(":scale")) continue;
      const size = tensor.shape.reduce((a, b) => a * b, 1), w = new Float32Array(size);
      if (tensor.dtype === "I8") {
        const q = new Int8Array(tensor.bytes.buffer, tensor.bytes.byteOffset, size);
        const scale = halves(tensors[`${name}:scale`]);  // (rows,)
        const cols = tensor.shape[1];
        for (let r = 0; r < tensor.shape[0]; r++) {
          for (let c = r * cols; c < (r + 1) * cols; c++) w[c] = q[c] * scale[r];
        }
      } else if (tensor.dtype === "F16") {
        w.set(halves(tensor));
      } else if (tensor.dtype === "F32") {
        const view = new DataView(
          tensor.bytes.buffer, tensor.bytes.byteOffset, tensor.bytes.byteLength);
        for (let i = 0; i < size; i++) w[i] = view.getFloat32(4 * i, true);
      } else {
        throw new Error(
          `${name} has dtype ${tensor.dtype}; the shipped weights are I8, F16 or F32`);
      }
      weights[name] = {shape: tensor.shape, data: w};
    }
    return weights;
  }

  // ---------------------------------------------------------------- SentencePiece

  // A minimal protobuf reader: one message's fields as [number, wire type, value], the
  // value a number (varint) or the bytes (length-delimited, fixed32, fixed64).
  function protoFields(bytes) {
    const fields = [];
    let i = 0;
    const varint = () => {
      let value = 0, scale = 1, b;
      do {
        b = bytes[i++];
        value += (b & 0x7f) * scale;
        scale *= 128;
      } while (b & 0x80);
      return value;
    };
    while (i < bytes.length) {
      const key = varint(), number = Math.floor(key / 8), wire = key & 7;
      const size = wire === 1 ? 8 : wire === 5 ? 4 : wire === 2 ? varint() : 0;
      if (wire === 0) fields.push([number, wire, varint()]);
      else if (size) {
        fields.push([number, wire, bytes.subarray(i, i + size)]);
        i += size;
      } else if (wire === 2) fields.push([number, wire, bytes.subarray(i, i)]);
      else throw new Error(`the SentencePiece model has protobuf wire type ${wire}`);
    }
    return fields;
  }

  const NORMAL = 1, UNKNOWN = 2, CONTROL = 3;  // ModelProto.SentencePiece.Type

  // ModelProto: pieces (1), trainer_spec (2), normalizer_spec (3),
  // denormalizer_spec (5)
  function readSentencePiece(bytes) {
    const pieces = [], types = [], scores = [];
    const trainer = new Map(), normalizer = new Map(), denormalizer = new Map();
    for (const [number, , value] of protoFields(bytes)) {
      if (number === 1) {  // SentencePiece: piece (1), score (2), type (3)
        const piece = new Map(protoFields(value).map(([n, , v]) => [n, v]));
        pieces.push(UTF8.decode(piece.get(1)));
        const score = piece.get(2);
        scores.push(piece.has(2)
          ? new DataView(score.buffer, score.byteOffset, 4).getFloat32(0, true) : 0);
        types.push(piece.get(3) || NORMAL);
      } else if (number === 2 || number === 3 || number === 5) {
        const spec = {2: trainer, 3: normalizer, 5: denormalizer}[number];
        for (const [n, , v] of protoFields(value)) spec.set(n, v);
      }
    }
    // TrainerSpec: model_type (3; 2 = BPE), treat_whitespace_as_suffix (24),
    // byte_fallback (35), unk_id/bos_id/eos_id/pad_id (40-43), unk_surface (44)
    const problems = [];
    if (trainer.get(3) !== 2) {
      problems.push(`model_type ${trainer.get(3)} (this reader knows BPE, 2)`);
    }
    if (trainer.get(24) || trainer.get(35)) {
      problems.push("whitespace as suffix or byte fallback");
    }
    if (types.some(t => t !== NORMAL && t !== UNKNOWN && t !== CONTROL)) {
      problems.push("user-defined, unused or byte pieces");
    }
    if (denormalizer.has(2) || normalizer.has(6)) {
      problems.push("a denormalizer or normalization rules");
    }
    const specials = [40, 41, 42, 43].map((n, i) =>
      (trainer.has(n) ? trainer.get(n) : [0, 1, 2, -1][i]));
    if (String(specials) !== String([UNK_ID, BOS_ID, EOS_ID, PAD_ID])) {
      problems.push(`special ids ${specials}`);
    }
    if (problems.length) {
      throw new Error(`the SentencePiece model has ${problems.join(", ")}; `
        + "this page's reader does not");
    }
    // proto2 default: true
    const bool = (spec, n) => (spec.has(n) ? spec.get(n) === 1 : true);
    const toId = new Map();  // the normal pieces, which BPE merges into
    pieces.forEach((p, id) => { if (types[id] === NORMAL) toId.set(p, id); });
    return {
      pieces, types, scores, toId,
      unkSurface: trainer.has(44) ? UTF8.decode(trainer.get(44)) : " \u2047 ",
      // NormalizerSpec: name (1), precompiled_charsmap (2), the three flags (3-5)
      normalizer: {
        name: normalizer.has(1) ? UTF8.decode(normalizer.get(1)) : "",
        charsmap: normalizer.has(2) && normalizer.get(2).length
          ? readCharsmap(normalizer.get(2)) : null,
        addDummyPrefix: bool(normalizer, 3),
        removeExtraWhitespaces: bool(normalizer, 4),
        escapeWhitespaces: bool(normalizer, 5),
      },
    };
  }

  // The precompiled character map (e.g. nmt_nfkc): <trie size, uint32 LE><a Darts-clone
  // double array of uint32 units><the replacement strings, each ending in a NUL byte>.
  function readCharsmap(blob) {
    const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
    const size = view.getUint32(0, true), units = new Uint32Array(size / 4);
    for (let i = 0; i < units.length; i++) units[i] = view.getUint32(4 + 4 * i, true);
    return {units, strings: blob.subarray(4 + size)};
  }

  // Darts-clone's commonPrefixSearch, keeping the longest match: [its length in bytes,
  // the offset of its replacement], or [0, -1]. A unit holds a label (its low byte;
  // bit 31 marks a value), a has-leaf flag (bit 8) and the offset to its children
  // (bits 10-31, shifted by 8 if bit 9).
  function longestRule(units, bytes, start) {
    let node = 0, unit = units[0], length = 0, value = -1;
    node ^= (unit >>> 10) << ((unit & 0x200) >>> 6);
    for (let i = start; i < bytes.length; i++) {
      node ^= bytes[i];
      unit = units[node];
      if ((unit & 0x800000ff) !== bytes[i]) break;
      node ^= (unit >>> 10) << ((unit & 0x200) >>> 6);
      if ((unit >>> 8) & 1) {
        length = i + 1 - start;
        value = units[node] & 0x7fffffff;
      }
    }
    return [length, value];
  }

  // a character's length in UTF-8, from its first byte
  const utf8Length = b => (b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4);
  const SPACE = 0x20, SPACE_SYMBOL = [0xe2, 0x96, 0x81];  // "▁" (U+2581) in UTF-8

  // normalizer.cc's Normalize: the charsmap's rules, longest first; leading, trailing
  // and repeated spaces dropped; a space in front ("dummy prefix"); every space
  // written as ▁.
  function normalize(vocab, text) {
    const spec = vocab.normalizer, bytes = ENCODE_UTF8.encode(text), out = [];
    // [the normalized bytes of the text at i, how many bytes they replace]
    const prefix = i => {
      if (spec.charsmap) {
        const [length, value] = longestRule(spec.charsmap.units, bytes, i);
        if (length) {
          const strings = spec.charsmap.strings;
          let end = value;
          while (strings[end] !== 0) end++;
          return [strings.subarray(value, end), length];
        }
      }
      const length = Math.min(utf8Length(bytes[i]), bytes.length - i);
      return [bytes.subarray(i, i + length), length];
    };
    const isSpace = piece => piece.length === 1 && piece[0] === SPACE;
    let i = 0;
    while (spec.removeExtraWhitespaces && i < bytes.length && isSpace(prefix(i)[0])) {
      i += prefix(i)[1];
    }
    if (i === bytes.length) return "";
    const space = () =>
      (spec.escapeWhitespaces ? out.push(...SPACE_SYMBOL) : out.push(SPACE));
    if (spec.addDummyPrefix) space();
    let previousSpace = spec.removeExtraWhitespaces;
    while (i < bytes.length) {
      const [piece, length] = prefix(i);
      let k = 0;
      if (previousSpace) while (k < piece.length && piece[k] === SPACE) k++;
      if (k < piece.length) {
        for (; k < piece.length; k++) piece[k] === SPACE ? space() : out.push(piece[k]);
        previousSpace = piece[piece.length - 1] === SPACE;
      }
      if (!spec.removeExtraWhitespaces) previousSpace = false;
      i += length;
    }
    if (spec.removeExtraWhitespaces) {
      const tail = spec.escapeWhitespaces ? SPACE_SYMBOL : [SPACE];
      const endsInTail = () =>
        tail.every((b, j) => out[out.length - tail.length + j] === b);
      while (out.length >= tail.length && endsInTail()) {
        out.length -= tail.length;
      }
    }
    return UTF8.decode(new Uint8Array(out));
  }

  // bpe_model.cc's Encode: start from the characters, and merge the adjacent pair whose
  // merge is the best-scored piece (ties: the leftmost) until no adjacent pair forms a
  // piece. Then, as sentencepiece_processor.cc does, characters outside the vocabulary
  // become <unk>, one <unk> for a run of them. Returns {ids, pieces}.
  function bpeEncode(vocab, normalized) {
    const symbols = Array.from(normalized);  // one a character (code point)
    const n = symbols.length, prev = new Int32Array(n), next = new Int32Array(n);
    for (let i = 0; i < n; i++) { prev[i] = i - 1; next[i] = i + 1 < n ? i + 1 : -1; }
    // candidate merges {score, left, right, size}: best score, then leftmost
    const heap = [];
    const better = (a, b) =>
      a.score > b.score || (a.score === b.score && a.left < b.left);
    const push = item => {
      heap.push(item);
      for (let i = heap.length - 1; i > 0;) {
        const parent = (i - 1) >> 1;
        if (!better(heap[i], heap[parent])) break;
        [heap[i], heap[parent]] = [heap[parent], heap[i]];
        i = parent;
      }
    };
    const pop = () => {
      const top = heap[0], last = heap.pop();
      if (heap.length) {
        heap[0] = last;
        for (let i = 0; ;) {
          const l = 2 * i + 1, r = l + 1;
          let best = i;
          if (l < heap.length && better(heap[l], heap[best])) best = l;
          if (r < heap.length && better(heap[r], heap[best])) best = r;
          if (best === i) break;
          [heap[i], heap[best]] = [heap[best], heap[i]];
          i = best;
        }
      }
      return top;
    };
    const candidate = (left, right) => {
      if (left === -1 || right === -1) return;
      const piece = symbols[left] + symbols[right], id = vocab.toId.get(piece);
      if (id !== undefined) {
        push({score: vocab.scores[id], left, right, size: piece.length});
      }
    };
    for (let i = 1; i < n; i++) candidate(i - 1, i);
    while (heap.length) {
      const {left, right, size} = pop();
      const stale = !symbols[left] || !symbols[right]
        || symbols[left].length + symbols[right].length !== size;
      if (stale) continue;  // one side has changed since this pair was queued
      symbols[left] += symbols[right];
      symbols[right] = "";
      next[left] = next[right];
      if (next[right] >= 0) prev[next[right]] = left;
      candidate(prev[left], left);
      candidate(left, next[left]);
    }
    const ids = [], pieces = [];
    for (let i = n ? 0 : -1; i !== -1; i = next[i]) {
      const id = vocab.toId.has(symbols[i]) ? vocab.toId.get(symbols[i]) : UNK_ID;
      if (id === UNK_ID && ids.length && ids[ids.length - 1] === UNK_ID) {
        // a run of unknown characters: one <unk>
        pieces[pieces.length - 1] += symbols[i];
      } else {
        ids.push(id);
        pieces.push(symbols[i]);
      }
    }
    return {ids, pieces};
  }

  const encodeText = (vocab, text) => bpeEncode(vocab, normalize(vocab, text));

  // sentencepiece_processor.cc's Decode: control pieces vanish, <unk> reads " ⁇ ",
  // ▁ becomes a space, and the pieces at the start drop one leading ▁ (the dummy
  // prefix).
  function decodeIds(vocab, ids) {
    let text = "";
    for (const id of ids) {
      if (vocab.types[id] === CONTROL) continue;
      if (vocab.types[id] === UNKNOWN) { text += vocab.unkSurface; continue; }
      let piece = vocab.pieces[id];
      if (!text && piece.startsWith("\u2581")) piece = piece.slice(1);
      text += piece.replaceAll("\u2581", " ");
    }
    return text;
  }

  // ---------------------------------------------------------------- the model

  // name -> shape of every parameter of the model a config describes, by its PyTorch
  // name (model.py, encoder.py, decoder.py); a tied matrix once, as pack_weights
  // stores it
  function parameterShapes(c) {
    const d_model = c.d_model, inner = c.n_heads * (c.d_head || d_model / c.n_heads);
    const d_ff = c.d_ff;
    const expected = {"src_embed.token.embedding.weight": [c.tgt_vocab_size, d_model]};
    const attention = prefix => {
      expected[`${prefix}.in_proj.weight`] = [3 * inner, d_model];
      expected[`${prefix}.in_proj.bias`] = [3 * inner];
      expected[`${prefix}.out_proj.weight`] = [d_model, inner];
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

  // The model: its parameters checked against the config as pretrained.model_of checks
  // them, and grouped by layer.
  function buildModel(config, weights, source) {
    const c = config;
    if (c.norm_first || !c.share_embeddings || c.src_vocab_size !== c.tgt_vocab_size) {
      throw new Error(
        `${source}: this page runs post-LN models with one shared vocabulary`);
    }
    const d_model = c.d_model, n_heads = c.n_heads;
    const d_head = c.d_head || d_model / n_heads;
    const inner = n_heads * d_head, d_ff = c.d_ff, V = c.tgt_vocab_size;
    const expected = parameterShapes(c);
    const have = Object.keys(weights).sort(), want = Object.keys(expected).sort();
    const bad = want.filter(name =>
      !weights[name] || String(weights[name].shape) !== String(expected[name]));
    if (bad.length || have.length !== want.length) {
      const listed = bad.slice(0, 3).join(", ") || "extra tensors";
      throw new Error(
        `${source} does not fit its model_config (${listed}); ship the run again`);
    }
    const w = name => weights[name].data;
    const mha = p => ({w_in: w(`${p}.in_proj.weight`), b_in: w(`${p}.in_proj.bias`),
      w_out: w(`${p}.out_proj.weight`), b_out: w(`${p}.out_proj.bias`)});
    const ff = p => ({w1: w(`${p}.linear1.weight`), b1: w(`${p}.linear1.bias`),
      w2: w(`${p}.linear2.weight`), b2: w(`${p}.linear2.bias`)});
    const ln = p => ({gamma: w(`${p}.norm.weight`), beta: w(`${p}.norm.bias`)});
    const encoder = [], decoder = [];
    for (let l = 0; l < c.n_layers; l++) {
      const e = `encoder.layers.${l}`, d = `decoder.layers.${l}`;
      encoder.push({
        self_attn: mha(`${e}.self_attn`), attn_norm: ln(`${e}.attn_residual`),
        feed_forward: ff(`${e}.feed_forward`), ff_norm: ln(`${e}.ff_residual`),
      });
      // W^Q on the target, W^K and W^V on the memory
      const cross = mha(`${d}.cross_attn`);
      cross.w_q = cross.w_in.subarray(0, inner * d_model);
      cross.b_q = cross.b_in.subarray(0, inner);
      cross.w_kv = cross.w_in.subarray(inner * d_model);
      cross.b_kv = cross.b_in.subarray(inner);
      decoder.push({
        self_attn: mha(`${d}.self_attn`), self_norm: ln(`${d}.self_residual`),
        cross_attn: cross, cross_norm: ln(`${d}.cross_residual`),
        feed_forward: ff(`${d}.feed_forward`), ff_norm: ln(`${d}.ff_residual`),
      });
    }
    return {
      d_model, n_heads, d_head, inner, d_ff, V, n_layers: c.n_layers,
      max_len: c.max_len,
      // E (V, d_model), also the output projection
      embedding: w("src_embed.token.embedding.weight"),
      pe: positionalEncoding(c.max_len, d_model), encoder, decoder,
      noBias: new Float32Array(V),
    };
  }

  // embeddings.sinusoidal_positional_encoding: PE[pos, 2k] = sin(pos w_k),
  // PE[pos, 2k+1] = cos(pos w_k), w_k = 10000^(-2k / d_model), in float64, kept in
  // float32 (section 3.5)
  function positionalEncoding(max_len, d_model) {
    const pe = new Float32Array(max_len * d_model);
    for (let k = 0; k < d_model; k += 2) {
      const omega = 10000 ** (-k / d_model);
      for (let pos = 0; pos < max_len; pos++) {
        pe[pos * d_model + k] = Math.sin(pos * omega);
        pe[pos * d_model + k + 1] = Math.cos(pos * omega);
      }
    }
    return pe;
  }

  // x[r] = sqrt(d_model) E[ids[r]] + PE[positions[r]] (sections 3.4 and 3.5)
  function embed(model, ids, positions, x) {
    const d = model.d_model, E = model.embedding, pe = model.pe, scale = Math.sqrt(d);
    for (let r = 0; r < ids.length; r++) {
      const e = ids[r] * d, p = positions[r] * d;
      for (let i = 0; i < d; i++) {
        x[r * d + i] = Math.fround(E[e + i] * scale) + pe[p + i];
      }
    }
  }

  // y (rows, n_out) = x (rows, n_in) W^T + b: nn.Linear, W (n_out, n_in) as PyTorch
  // stores it. The time goes here. Blocks of 4 rows x 2 outputs: each weight read
  // serves 4 dot products and each x read 2, in 8 running sums (JavaScript has no SIMD;
  // this keeps the loads few). Rows left over go one at a time, 4 outputs at once.
  // n_out is even (and a multiple of 4 here).
  function linear(x, rows, W, b, n_in, n_out, y) {
    let r = 0;
    for (; r + 4 <= rows; r += 4) {
      const x0 = r * n_in, x1 = x0 + n_in, x2 = x1 + n_in, x3 = x2 + n_in;
      const y0 = r * n_out, y1 = y0 + n_out, y2 = y1 + n_out, y3 = y2 + n_out;
      for (let o = 0; o < n_out; o += 2) {
        const w0 = o * n_in, w1 = w0 + n_in;
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
    for (; r < rows; r++) {
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
  }

  // x = LayerNorm(x + h) over each row of d_model (post-LN, section 3.1;
  // eps 1e-5 as LayerNorm)
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

  // FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (eq. 2), into out;
  // hidden (rows, d_ff) is scratch
  function feedForward(x, rows, ff, d_model, d_ff, hidden, out) {
    linear(x, rows, ff.w1, ff.b1, d_model, d_ff, hidden);
    for (let i = 0; i < rows * d_ff; i++) if (hidden[i] < 0) hidden[i] = 0;
    linear(hidden, rows, ff.w2, ff.b2, d_ff, d_model, out);
  }

  // Attention(q, K, V) = softmax(q K^T / sqrt(d_head)) V (eq. 1) for one query of one
  // head: q at Q[q0], key j at K[k0 + j * stride], value j at Vs[v0 + j * stride],
  // n_keys of them. The weights are left in p (n_keys,), the output (d_head,) written
  // to out[o0]; acc is (d_head,) scratch.
  function attend(Q, q0, K, k0, Vs, v0, stride, n_keys, d_head, p, acc, out, o0) {
    const root = Math.sqrt(d_head);
    let max = -Infinity;
    for (let j = 0, k = k0; j < n_keys; j++, k += stride) {
      let s = 0;
      for (let c = 0; c < d_head; c++) s += Q[q0 + c] * K[k + c];
      s /= root;
      p[j] = s;
      if (s > max) max = s;
    }
    let sum = 0;
    for (let j = 0; j < n_keys; j++) { p[j] = Math.exp(p[j] - max); sum += p[j]; }
    acc.fill(0);
    for (let j = 0, v = v0; j < n_keys; j++, v += stride) {
      const pj = (p[j] /= sum);
      for (let c = 0; c < d_head; c++) acc[c] += pj * Vs[v + c];
    }
    for (let c = 0; c < d_head; c++) out[o0 + c] = acc[c];
  }

  // Scratch buffers for `rows` positions at once.
  function scratch(model, rows, n_keys) {
    const {d_model, inner, d_ff} = model;
    return {
      x: new Float32Array(rows * d_model), qkv: new Float32Array(rows * 3 * inner),
      ctx: new Float32Array(rows * inner), h: new Float32Array(rows * d_model),
      hidden: new Float32Array(rows * d_ff), p: new Float64Array(n_keys),
      acc: new Float64Array(model.d_head),
    };
  }

  // Model.encode: memory (S, d_model) of the source ids, no padding (one sentence).
  // With `weights`, each layer's and head's attention is written there:
  // (n_layers, n_heads, S, S).
  function encode(model, ids, weights = null) {
    const S = ids.length, {d_model, n_heads, d_head, inner, d_ff} = model;
    const s = scratch(model, S, S), x = s.x;
    embed(model, ids, ids.map((_, i) => i), x);
    model.encoder.forEach((layer, l) => {
      const a = layer.self_attn;
      // (S, 3 inner): Q | K | V
      linear(x, S, a.w_in, a.b_in, d_model, 3 * inner, s.qkv);
      for (let i = 0; i < S; i++) {
        for (let h = 0; h < n_heads; h++) {
          const q0 = i * 3 * inner + h * d_head;
          attend(s.qkv, q0, s.qkv, inner + h * d_head,
            s.qkv, 2 * inner + h * d_head, 3 * inner, S,
            d_head, s.p, s.acc, s.ctx, i * inner + h * d_head);
          if (weights) weights.set(s.p.subarray(0, S), ((l * n_heads + h) * S + i) * S);
        }
      }
      linear(s.ctx, S, a.w_out, a.b_out, inner, d_model, s.h);  // Concat(heads) W^O
      addNorm(x, s.h, S, d_model, layer.attn_norm);
      feedForward(x, S, layer.feed_forward, d_model, d_ff, s.hidden, s.h);
      addNorm(x, s.h, S, d_model, layer.ff_norm);
    });
    return x;  // (S, d_model)
  }

  // What decoding keeps between steps (decoder.DecoderCache): per layer the
  // self-attention's keys and values of every row's earlier positions,
  // (rows, limit, inner) each, in two copies that select() swaps; and the
  // cross-attention's K and V of the memory, (S, inner) each, projected once and
  // shared by every row, since every beam has the same source.
  function decoderState(model, memory, S, rows, limit) {
    const {d_model, inner} = model, kv = new Float32Array(S * 2 * inner);
    const cross = model.decoder.map(layer => {
      linear(memory, S, layer.cross_attn.w_kv, layer.cross_attn.b_kv,
        d_model, 2 * inner, kv);
      const K = new Float32Array(S * inner), V = new Float32Array(S * inner);
      for (let j = 0; j < S; j++) {
        K.set(kv.subarray(j * 2 * inner, j * 2 * inner + inner), j * inner);
        V.set(kv.subarray(j * 2 * inner + inner, (j + 1) * 2 * inner), j * inner);
      }
      return {K, V};
    });
    const cache = () => model.decoder.map(() => ({
      K: new Float32Array(rows * limit * inner),
      V: new Float32Array(rows * limit * inner),
    }));
    return {
      S, limit, length: 0, cross, cache: cache(), spare: cache(),
      scratch: scratch(model, rows, Math.max(S, limit)),
      logits: new Float32Array(rows * model.V),
    };
  }

  // DecoderCache.select: row r continues row rows[r] (beam search reorders hypotheses)
  function select(model, state, rows) {
    const size = state.limit * model.inner, kept = state.length * model.inner;
    state.cache.forEach((layer, l) => {
      const spare = state.spare[l];
      rows.forEach((from, r) => {
        spare.K.set(layer.K.subarray(from * size, from * size + kept), r * size);
        spare.V.set(layer.V.subarray(from * size, from * size + kept), r * size);
      });
    });
    [state.cache, state.spare] = [state.spare, state.cache];
  }

  // One decoding step (Model.decode with a cache): the newest token of each row, at
  // position state.length, through every decoder layer (masked self-attention over the
  // cached positions and itself, cross-attention over the memory, the feed-forward
  // network, each in a post-LN residual), then the logits h E^T (rows, V) into
  // state.logits when `logits`. With `record`, row 0's attention weights are kept:
  // record.self[l][h] (length + 1,), record.cross[l][h] (S,).
  function decodeStep(model, state, tokens, logits = true, record = null) {
    const rows = tokens.length, t = state.length, S = state.S;
    const {d_model, n_heads, d_head, inner, d_ff} = model, s = state.scratch, x = s.x;
    const size = state.limit * inner;
    embed(model, tokens, tokens.map(() => t), x);
    model.decoder.forEach((layer, l) => {
      const a = layer.self_attn, cache = state.cache[l];
      linear(x, rows, a.w_in, a.b_in, d_model, 3 * inner, s.qkv);  // (rows, 3 inner)
      // this position's keys and values join the cache
      for (let r = 0; r < rows; r++) {
        cache.K.set(s.qkv.subarray(r * 3 * inner + inner, r * 3 * inner + 2 * inner),
          r * size + t * inner);
        cache.V.set(s.qkv.subarray(r * 3 * inner + 2 * inner, (r + 1) * 3 * inner),
          r * size + t * inner);
      }
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < n_heads; h++) {  // the causal mask: positions 0..t only
          attend(s.qkv, r * 3 * inner + h * d_head, cache.K, r * size + h * d_head,
            cache.V, r * size + h * d_head, inner, t + 1,
            d_head, s.p, s.acc, s.ctx, r * inner + h * d_head);
          if (record && r === 0) record.self[l][h] = Array.from(s.p.subarray(0, t + 1));
        }
      }
      linear(s.ctx, rows, a.w_out, a.b_out, inner, d_model, s.h);
      addNorm(x, s.h, rows, d_model, layer.self_norm);
      const c = layer.cross_attn, cross = state.cross[l];
      // (rows, inner): the queries
      linear(x, rows, c.w_q, c.b_q, d_model, inner, s.qkv);
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < n_heads; h++) {
          attend(s.qkv, r * inner + h * d_head, cross.K, h * d_head,
            cross.V, h * d_head, inner, S,
            d_head, s.p, s.acc, s.ctx, r * inner + h * d_head);
          if (record && r === 0) record.cross[l][h] = Array.from(s.p.subarray(0, S));
        }
      }
      linear(s.ctx, rows, c.w_out, c.b_out, inner, d_model, s.h);
      addNorm(x, s.h, rows, d_model, layer.cross_norm);
      feedForward(x, rows, layer.feed_forward, d_model, d_ff, s.hidden, s.h);
      addNorm(x, s.h, rows, d_model, layer.ff_norm);
    });
    state.length += 1;
    if (logits) {
      linear(x, rows, model.embedding, model.noBias, d_model, model.V, state.logits);
    }
  }

  // log p(y_t | y_<t, x) of row r from state.logits, PAD and BOS excluded
  // (DecoderState.log_probs): the log-sum-exp of the row, so that
  // log p(v) = logits[v] - lse
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

  // decoding.length_limits: the source length + 50, at most model.max_len positions
  const lengthLimit = (model, S) => Math.min(S + EXTRA_LENGTH, model.max_len);

  const pause = () => new Promise(resolve => {  // let the page handle its events
    const channel = new MessageChannel();
    channel.port1.onmessage = resolve;
    channel.port2.postMessage(null);
  });

  // decoding.beam_search for one sentence, step by step as Python takes it: the k live
  // beams extend by every token; of the 2k best totals log P, those among the first k
  // that end (EOS, or the length limit) are finished with the score log P / lp(|Y|),
  // and the k best that do not end go on; stop with k finished, or at the limit; the
  // best finished hypothesis wins (the first, on a tie). Step 1 runs one row: the k
  // rows Python starts with are all [BOS], and all but the first have log P = -inf.
  // Returns {ids (no BOS; EOS last unless cut), score, logP}.
  async function beamSearch(model, srcIds, memory, beamSize, alpha) {
    const k = beamSize, V = model.V, limit = lengthLimit(model, srcIds.length);
    const state = decoderState(model, memory, srcIds.length, k, limit);
    const topValue = new Float64Array(2 * k), topIndex = new Int32Array(2 * k);
    let prefixes = [[]], scores = [0], tokens = [BOS_ID], finished = [];
    let lastPause = performance.now();
    for (let t = 1; t <= limit; t++) {
      decodeStep(model, state, tokens);
      topValue.fill(-Infinity);
      // the 2k best totals, best first; ties: lower index
      for (let r = 0; r < tokens.length; r++) {
        const lse = logSumExp(model, state.logits, r), o = r * V;
        for (let v = 0; v < V; v++) {
          if (v === PAD_ID || v === BOS_ID) continue;
          // float32 log p, as PyTorch
          const total = scores[r] + Math.fround(state.logits[o + v] - lse);
          if (total <= topValue[2 * k - 1]) continue;
          let j = 2 * k - 1;
          for (; j > 0 && topValue[j - 1] < total; j--) {
            topValue[j] = topValue[j - 1];
            topIndex[j] = topIndex[j - 1];
          }
          topValue[j] = total;
          topIndex[j] = o + v;
        }
      }
      const atLimit = limit <= t, going = [];
      for (let j = 0; j < 2 * k; j++) {
        const origin = Math.floor(topIndex[j] / V), token = topIndex[j] % V;
        const ends = token === EOS_ID || atLimit;
        if (ends && j < k && Number.isFinite(topValue[j])) {
          finished.push({ids: [...prefixes[origin], token], logP: topValue[j],
            score: topValue[j] / lp(t, alpha)});
        }
        if (!ends && going.length < k) going.push({origin, token, total: topValue[j]});
      }
      if (finished.length >= k || atLimit) break;
      select(model, state, going.map(g => g.origin));
      prefixes = going.map(g => [...prefixes[g.origin], g.token]);
      scores = going.map(g => g.total);
      tokens = going.map(g => g.token);
      if (performance.now() - lastPause > 100) {
        await pause();
        lastPause = performance.now();
      }
    }
    return finished.reduce((best, h) => (h.score > best.score ? h : best));
  }

  // attention_maps.attention_maps: every layer's and head's attention while the decoder
  // reads [BOS, out[:-1]] (teacher-forced), as [layer][head][query][key] arrays:
  // "decoder" (T, T, zero above the diagonal) and "cross" (T, S).
  function decoderAttention(model, memory, S, outIds) {
    const T = outIds.length, state = decoderState(model, memory, S, 1, T);
    const maps = {decoder: [], cross: []};
    for (const kind of ["decoder", "cross"]) {
      maps[kind] = model.decoder.map(() =>
        Array.from({length: model.n_heads}, () => []));
    }
    const record = {self: model.decoder.map(() => []),
      cross: model.decoder.map(() => [])};
    [BOS_ID, ...outIds.slice(0, -1)].forEach(token => {
      decodeStep(model, state, [token], false, record);
      model.decoder.forEach((_, l) => {
        for (let h = 0; h < model.n_heads; h++) {
          const row = record.self[l][h];
          maps.decoder[l][h].push(row.concat(new Array(T - row.length).fill(0)));
          maps.cross[l][h].push(record.cross[l][h]);
        }
      });
    });
    return maps;
  }

  // ---------------------------------------------------------------- loading

  const assets = window.__transformerAssets = window.__transformerAssets || {};

  // The bytes of a shipped file, through the script NAME.js beside this one (file://
  // pages may not fetch files, but they may run scripts).
  function loadFile(name) {
    return new Promise((resolve, reject) => {
      const tag = document.createElement("script");
      tag.src = new URL(`${name}.js`, BASE).href;
      tag.onload = () => {
        const text = assets[name];
        delete assets[name];
        tag.remove();
        if (typeof text === "string") resolve(fromBase64(text));
        else reject(new Error(`${tag.src} did not hold ${name}`));
      };
      tag.onerror = () => {
        tag.remove();
        reject(new Error(`could not load ${tag.src}; `
          + "the book's build writes it (book/_ext/translator_assets.py)"));
      };
      document.head.appendChild(tag);
    });
  }

  async function verified(name, bytes, expected) {  // pretrained.verified
    const actual = await sha256(bytes);
    if (actual !== expected) {
      throw new Error(`${name} is damaged or altered: `
        + `its SHA-256 is ${actual}, expected ${expected}`);
    }
    return bytes;
  }

  const once = new Map();  // key -> the Promise of what loading it gives, made once
  const memo = (key, make) => {
    if (!once.has(key)) {
      once.set(key, make().catch(error => { once.delete(key); throw error; }));
    }
    return once.get(key);
  };

  const manifest = () => memo("manifest.json",
    async () => JSON.parse(UTF8.decode(await loadFile("manifest.json"))));

  // A made-up model of the shipped shape but tiny (d_model 8, 16 pieces), translated a
  // few times while the weights download: the JIT compiles the kernels on it, so that
  // the reader's first sentence runs compiled code from its start.
  function warmUp() {
    return memo("warm-up", async () => {
      const config = {d_model: 8, n_heads: 2, d_ff: 16, n_layers: 1, max_len: 24,
        src_vocab_size: 16, tgt_vocab_size: 16, share_embeddings: true,
        norm_first: false};
      let seed = 1;
      const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647 - 0.5;
      const weights = {};
      for (const [name, shape] of Object.entries(parameterShapes(config))) {
        weights[name] = {shape,
          data: new Float32Array(shape.reduce((a, b) => a * b, 1)).map(random)};
      }
      const model = buildModel(config, weights, "warm-up"), ids = [4, 5, 6, 7];
      for (let i = 0; i < 30; i++) {
        const memory = encode(model, ids, i % 10 ? null : new Float64Array(2 * 4 * 4));
        const best = await beamSearch(model, ids, memory, 4, 0.6);
        if (i % 10 === 0) decoderAttention(model, memory, ids.length, best.ids);
      }
    });
  }

  // pretrained.load_pretrained: the model, vocabulary and decoding shipped for a
  // direction, every file checked against the manifest's SHA-256 first. `timings`:
  // seconds of each stage.
  function loadTranslator(direction) {
    return memo(`translator ${direction}`, async () => {
      const start = performance.now(), timings = {};
      const lap = (name, since) => {
        timings[name] = (performance.now() - since) / 1000;
        return performance.now();
      };
      const shipped = await manifest();
      const models = shipped[direction];
      if (!models) {
        throw new Error(`no model shipped for "${direction}"; `
          + `shipped: ${Object.keys(shipped).join(", ")}`);
      }
      // pretrained.shipped_entry: of the CPU- and GPU-trained models, the one with the
      // best check BLEU (the first, on a tie)
      const entry = Object.values(models).reduce(
        (best, e) => (e.check.bleu_lc > best.check.bleu_lc ? e : best));
      const vocab = memo(`vocabulary ${entry.tokenizer}`, async () => readSentencePiece(
        await verified(entry.tokenizer, await loadFile(entry.tokenizer),
          entry.tokenizer_sha256)));
      // the browser fetches and parses it meanwhile
      const file = loadFile(entry.weights);
      let t = performance.now();
      await warmUp();
      t = lap("warm_up", t);
      const bytes = await file;
      t = lap("load", t);
      await verified(entry.weights, bytes, entry.weights_sha256);
      t = lap("sha256", t);
      const source = `${entry.weights} (SHA-256 ${entry.weights_sha256})`;
      const model = buildModel(
        entry.model_config, unpackWeights(readSafetensors(bytes)), source);
      t = lap("unpack", t);
      const translator = {direction, model, vocab: await vocab,
        decoding: entry.decoding};
      lap("vocabulary", t);
      return Object.assign(translator,
        {timings, seconds: (performance.now() - start) / 1000});
    });
  }

  // the source ids as evaluation.translate makes them: no BOS or EOS, cut to max_len
  function sourceIds(translator, text) {
    const {ids} = encodeText(translator.vocab, text);
    const max_len = translator.model.max_len;
    return {ids: ids.slice(0, max_len), pieces: ids.length,
      truncated: ids.length > max_len};
  }

  // one translation at a time: they share nothing, but the CPU
  let queue = Promise.resolve();
  const inTurn = work => {
    const run = queue.then(work);
    queue = run.catch(() => {});
    return run;
  };

  // The translation of `text` with the shipped decoding, as Pretrained.translate gives
  // it, and what the page shows: the pieces, the score log P / lp(|Y|), the confidence
  // (mean log p a target token), the seconds it took, and (unless options.attention is
  // false) every layer's and head's attention, [layer][head][query][key] arrays as
  // attention_maps gives them (none with options.attention false, or where the source
  // or output is longer than options.attentionUpTo).
  function translate(direction, text, options = {}) {
    return inTurn(async () => {
      if (typeof text !== "string") {
        throw new TypeError(
          "transformerTranslate(direction, text) takes the text as a string");
      }
      const loadStart = performance.now(), translator = await loadTranslator(direction);
      const loadSeconds = (performance.now() - loadStart) / 1000;
      const start = performance.now(), {model, vocab, decoding} = translator;
      const src = sourceIds(translator, text), S = src.ids.length;
      const result = {direction, translation: "", sourceIds: src.ids, outputIds: [],
        sourcePieces: src.ids.map(id => vocab.pieces[id]), outputPieces: [],
        score: null, confidence: null, truncated: src.truncated,
        sourceLength: src.pieces, maxLength: model.max_len,
        unknown: src.ids.filter(id => id === UNK_ID).length, loadSeconds, seconds: 0,
        attention: null, message: ""};
      if (!S) {
        result.message =
          "There is nothing to translate: the text is empty or only spaces.";
        return result;
      }
      // in pieces: the longest source and output that get attention maps
      const upTo = options.attention === false ? 0 : options.attentionUpTo || Infinity;
      const encoderWeights =
        S > upTo ? null : new Float64Array(model.n_layers * model.n_heads * S * S);
      const memory = encode(model, src.ids, encoderWeights);
      const best = await beamSearch(
        model, src.ids, memory, decoding.beam_size, decoding.alpha);
      Object.assign(result, {outputIds: best.ids,
        outputPieces: best.ids.map(id => vocab.pieces[id]),
        translation: decodeIds(vocab, best.ids), score: best.score,
        confidence: best.logP / best.ids.length});
      result.seconds = (performance.now() - start) / 1000;
      if (encoderWeights && best.ids.length <= upTo) {
        const grid = (l, h) => Array.from({length: S}, (_, i) =>
          Array.from(encoderWeights.subarray(((l * model.n_heads + h) * S + i) * S,
            ((l * model.n_heads + h) * S + i + 1) * S)));
        result.attention = {
          encoder: model.encoder.map((_, l) =>
            Array.from({length: model.n_heads}, (_, h) => grid(l, h))),
          ...decoderAttention(model, memory, S, best.ids),
        };
      }
      if (src.truncated) {
        result.message = `The text is ${src.pieces} pieces long; `
          + `the model reads at most ${model.max_len}, `
          + `so only the first ${model.max_len} were translated.`;
      }
      return result;
    });
  }

  // What the tests compare with PyTorch.
  // ids: source ids as sentencepiece gives them (no cut).
  const debug = {
    load: async direction => {
      const t = await loadTranslator(direction);
      return {seconds: t.seconds, timings: t.timings, decoding: t.decoding};
    },
    encode: async (direction, texts) => {
      const {vocab} = await loadTranslator(direction);
      return texts.map(text => encodeText(vocab, text).ids);
    },
    decode: async (direction, idLists) => {
      const {vocab} = await loadTranslator(direction);
      return idLists.map(ids => decodeIds(vocab, ids));
    },
    normalize: async (direction, text) =>
      normalize((await loadTranslator(direction)).vocab, text),
    encoderOutput: async (direction, ids) =>
      Array.from(encode((await loadTranslator(direction)).model, ids)),
    // log p(. | BOS, x) of the first step, PAD and BOS -inf (sent as null)
    firstStepLogProbs: async (direction, ids) => {
      const {model} = await loadTranslator(direction);
      const state = decoderState(model, encode(model, ids), ids.length, 1, 1);
      decodeStep(model, state, [BOS_ID]);
      const lse = logSumExp(model, state.logits, 0);
      return Array.from(state.logits,
        (v, i) => (i === PAD_ID || i === BOS_ID ? null : v - lse));
    },
    // log P(out | src) teacher-forced, and the beam's score log P / lp(|out|)
    score: async (direction, ids, outIds) => {
      const {model, decoding} = await loadTranslator(direction);
      const state = decoderState(
        model, encode(model, ids), ids.length, 1, outIds.length);
      let logP = 0;
      [BOS_ID, ...outIds.slice(0, -1)].forEach((token, t) => {
        decodeStep(model, state, [token]);
        logP += state.logits[outIds[t]] - logSumExp(model, state.logits, 0);
      });
      return {logP, score: logP / lp(outIds.length, decoding.alpha)};
    },
    sha256: async (bytes, byHand = false) =>
      (byHand ? sha256ByHand(new Uint8Array(bytes)) : sha256(new Uint8Array(bytes))),
  };

  // ---------------------------------------------------------------- the page

  const LANGUAGES = {en: "English", de: "German"};
  // mean log p a token below this: unlike the captions it learned (about 1 val
  // caption in 20 falls below it, and most sentences typed from outside the
  // photo-caption domain)
  const LOW_CONFIDENCE = -1.2;
  const MAX_MAP = 100;  // pieces: longer texts get no maps drawn (cells under 6 px)
  const esc = text => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;").replace(/"/g, "&quot;");

  // the explorer's packing of one sentence (explorer.py's _sentence): weights as
  // integers round(1000 w) in DIGITS, one digit below SMALL and two from there; the
  // decoder's only on and below the diagonal
  function packSentence(result, digits, small) {
    const codes = w => (w < small ? digits[w]
      : digits[small + Math.floor((w - small) / 64)] + digits[(w - small) % 64]);
    const title = result.sourcePieces.join("").replaceAll("\u2581", " ").trim();
    const packed = {
      title: title.length <= 60 ? title : `${title.slice(0, 59).trimEnd()}…`,
      source: result.sourcePieces, output: result.outputPieces,
    };
    for (const kind of ["encoder", "decoder", "cross"]) {
      packed[kind] = result.attention[kind].map(heads => heads.map(grid =>
        grid.map((row, q) => row.slice(0, kind === "decoder" ? q + 1 : row.length)
          .map(w => codes(Math.round(w * 1000))).join("")).join("")));
    }
    return packed;
  }

  function mount(root) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "yes";
    const config = JSON.parse(root.querySelector("script.tx-config").textContent);
    const directions = Object.keys(config.directions);
    const option = (value, label) =>
      `<option value="${esc(value)}">${esc(label)}</option>`;
    const directionMenu = directions.map(d => option(d, config.directions[d])).join("");
    const ui = document.createElement("div");
    ui.className = "tx-ui";
    ui.innerHTML = `
      <div class="tx-controls">
        <label>direction <select name="direction">${directionMenu}</select></label>
        <label class="tx-wide">example <select name="example"></select></label>
      </div>
      <textarea name="text" rows="2" spellcheck="false"
        aria-label="text to translate"></textarea>
      <div class="tx-actions"><button type="button" name="translate">Translate</button>
        <span class="tx-status" role="status"></span></div>
      <div class="tx-result" hidden>
        <p class="tx-translation"></p>
        <p class="tx-note"></p>
        <dl>
          <dt>source pieces</dt><dd class="tx-source"></dd>
          <dt>output pieces</dt><dd class="tx-output"></dd>
          <dt>confidence</dt><dd class="tx-confidence"></dd>
          <dt>time</dt><dd class="tx-time"></dd>
        </dl>
      </div>
      <div class="tx-attention"></div>`;
    root.querySelector(".tx-fallback")?.remove();
    root.prepend(ui);
    const $ = selector => ui.querySelector(selector);
    const [direction, example, textBox, button, status] = ["select[name=direction]",
      "select[name=example]", "textarea", "button", ".tx-status"].map($);
    // direction -> the packed sentences translated here, newest first
    const history = {};
    let ticket = 0, running = false;
    const source = () => direction.value.split("-")[0];
    // the status line, and root.dataset.state: idle, running, done, empty or error
    // (for tests)
    const setStatus = (text, state, kind = "") => {
      status.textContent = text;
      status.dataset.kind = kind;
      root.dataset.state = state;
    };

    function showExamples() {
      const captions = config.examples[source()] || [];
      example.innerHTML =
        option("", `a test2016 caption (${LANGUAGES[source()] || source()})…`)
        + captions.map((c, i) => option(i, c)).join("");
    }
    function idle() {
      const mb = config.download_mb && config.download_mb[direction.value];
      setStatus(once.has(`translator ${direction.value}`) ? "ready"
        : `the ${direction.value} weights${mb ? ` (${mb} MB)` : ""} `
          + "load on the first Translate", "idle");
    }
    direction.addEventListener("change", () => {
      // a translation still running belongs to the other direction: drop it
      ticket += 1;
      const from = Object.keys(config.examples)
        .find(lang => config.examples[lang].includes(textBox.value));
      const i = from ? config.examples[from].indexOf(textBox.value) : -1;
      showExamples();
      if (i >= 0 && config.examples[source()]) {
        textBox.value = config.examples[source()][i];
      }
      running = false;
      button.disabled = false;
      idle();
    });
    example.addEventListener("change", () => {
      if (example.value !== "") {
        textBox.value = config.examples[source()][example.value];
      }
      example.value = "";
    });
    button.addEventListener("click", () => go());
    textBox.addEventListener("keydown", event => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) go();
    });

    async function go() {
      if (running) return;
      const text = textBox.value, which = direction.value, mine = ++ticket;
      if (!text.trim()) {
        setStatus("Type a sentence first, or choose an example.", "empty", "warning");
        return;
      }
      running = true;
      button.disabled = true;
      setStatus(once.has(`translator ${which}`) ? "translating…"
        : "loading the weights, then translating…", "running");
      await new Promise(resolve => setTimeout(resolve, 0));  // let the status show
      try {
        const result = await translate(which, text, {attentionUpTo: MAX_MAP});
        if (mine !== ticket) return;
        if (result.sourceIds.length) {
          show(result);
        } else {  // e.g. only zero-width characters
          setStatus(result.message, "empty", "warning");
        }
      } catch (error) {
        if (mine === ticket) {
          setStatus(`The translator failed: ${error.message}`, "error", "error");
        }
      } finally {
        if (mine === ticket) { running = false; button.disabled = false; }
      }
    }

    function show(result) {
      const target = result.direction.split("-")[1];
      $(".tx-result").hidden = false;
      $(".tx-translation").textContent = result.translation || "(nothing)";
      $(".tx-translation").lang = target;
      const pieces = (list, ids) => list.map((p, i) => {
        const unk = ids[i] === UNK_ID ? " tx-unk" : "";
        return `<span class="tx-piece${unk}">${esc(p)}</span>`;
      }).join("");
      $(".tx-source").innerHTML = pieces(result.sourcePieces, result.sourceIds);
      $(".tx-output").innerHTML = pieces(result.outputPieces, result.outputIds);
      $(".tx-confidence").textContent =
        `mean log-probability ${result.confidence.toFixed(2)} a token `
        + `(a geometric mean of ${Math.exp(result.confidence).toFixed(2)} per token)`;
      $(".tx-time").textContent = `${result.seconds.toFixed(2)} s`
        + (result.loadSeconds > 0.05 ? ` (and ${result.loadSeconds.toFixed(1)} s `
          + "to load and check the weights, once)" : "");
      const notes = [];
      if (result.truncated) notes.push(result.message);
      if (result.unknown) {
        const many = result.unknown > 1;
        notes.push(`${result.unknown} piece${many ? "s" : ""} of the text `
          + `${many ? "are" : "is"} outside the vocabulary (shown as <unk>): `
          + `the model never saw ${many ? "these characters" : "this character"}.`);
      }
      if (result.confidence < LOW_CONFIDENCE || result.unknown) {
        notes.push(`Low confidence (below ${LOW_CONFIDENCE}, `
          + "where about 1 caption in 20 falls): this text is unlike the image "
          + "captions the model learned from (Multi30k: one-sentence descriptions "
          + "of photos). Expect a poor translation.");
      }
      $(".tx-note").textContent = notes.join(" ");
      $(".tx-note").hidden = !notes.length;
      if (result.attention) {
        showAttention(result);
      } else {
        $(".tx-attention").textContent =
          `The attention maps are drawn for texts of at most ${MAX_MAP} pieces.`;
      }
      setStatus("done", "done");
    }

    // the attention explorer (explorer.js) on the sentences translated here,
    // newest first
    function showAttention(result) {
      const shell = root.querySelector("template.tx-explorer");
      const code = root.querySelector("script.tx-explorer-script");
      if (!shell || !code) return;
      const {digits, small} = JSON.parse(shell.dataset.packing);
      const list = history[result.direction] = history[result.direction] || [];
      list.unshift(packSentence(result, digits, small));
      list.length = Math.min(list.length, 8);
      const names = [result.direction,
        ...Object.keys(history).filter(d => d !== result.direction)];
      const box = document.createElement("div");
      box.id = shell.dataset.id;
      box.className = "attnx";
      box.append(shell.content.cloneNode(true));
      // explorer_html's direction menu
      const menu = box.querySelector("select[name=direction]");
      names.forEach((name, i) => menu.add(new Option(name, i)));
      const data = document.createElement("script");
      data.type = "application/json";
      data.className = "attnx-data";
      data.textContent =
        JSON.stringify(names.map(name => ({name, sentences: history[name]})));
      box.append(data);
      $(".tx-attention").replaceChildren(box);
      // runs as it joins the page, in box
      const run = document.createElement("script");
      run.textContent = code.textContent;
      box.append(run);
    }

    showExamples();
    textBox.value = (config.examples[source()] || [""])[0];
    idle();
  }

  function mountAll() {
    document.querySelectorAll(".transformer-translator").forEach(mount);
  }

  window.transformerTranslator = {translate, mount, mountAll, debug};
  window.transformerTranslate =
    (direction, text, options) => translate(direction, text, options);
  window.transformerDebug = debug;
  mountAll();
})();
