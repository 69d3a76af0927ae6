// The shipped translators in the reader's browser (chapter 14, appendix 18): reading
// the files that src/transformer/weights/ ships, as they are (manifest.json, the
// safetensors weights, int8 rows with float16 scales, and the SentencePiece model),
// loading a direction's model, and translating with transformer.js, which must be on
// the page first. book/_ext/translator_assets.py writes each shipped file F into the
// built book as F.js, a script that holds F's bytes, because a page opened from disk
// may not fetch files; this script adds those scripts only when a translation is
// first asked for.
// It also holds the in-domain check and the sentence splitter of domain.py: a text is
// translated sentence by sentence, and flagged where it does not look like a caption.
// translator.js (the page) loads transformer.js, then this file; this one leaves
// window.transformerPretrained: {translate, debug, isLoaded, UNK_ID, pace, breathe}.
//
//   function                 mirrors (src/transformer/, or the library named)
//   fromBase64, hex          (bytes)
//   sha256ByHand, sha256     hashlib.sha256, as pretrained.verified uses it
//   float16, halves          numpy's float16
//   readSafetensors          safetensors.safe_open
//   unpackWeights            pretrained.unpack_weights
//   protoFields              protobuf's wire format
//   readModelProto, checkSentencePiece, readSentencePiece
//                            sentencepiece's model loading (tokenizer.py's processor)
//   readCharsmap, longestRule, normalize
//                            sentencepiece's normalizer.cc
//   mergeQueue, bpeEncode, idsOfSymbols
//                            sentencepiece's bpe_model.cc Encode (tokenizer.encode)
//   decodeIds                sentencepiece's Decode (tokenizer.decode)
//   captionTokens, readCounts, captionCheck
//                            domain.caption_tokens, domain.read_counts, CaptionCheck
//   otherLanguage, reverseOf domain.other_language, pretrained.reverse_of
//   betterDirection          Pretrained.better_direction, on one text
//   strip                    str.strip (Python's whitespace, not JavaScript's)
//   endsSentence, splitSentences
//                            domain.ends_sentence, domain.split_sentences
//   loadFile, verified       pretrained.verified, on the asset scripts
//   shippedEntry             pretrained.shipped_entry
//   domainOf, loadDomain     pretrained.domain_of
//   warmUp                   (the JIT's first compile, on a tiny made-up model)
//   loadTranslator           pretrained.load_pretrained
//   sourceIds, translateSentence
//                            evaluation.translate, on one sentence
//   translate, summary       Pretrained.translate (domain.translate_texts),
//                            Pretrained.out_of_domain and better_direction, with what
//                            the page shows; sentence by sentence, paced
//                            (transformer.js's paced)
(() => {
  "use strict";
  const T = window.transformerModel;  // transformer.js
  if (!T) throw new Error("pretrained.js needs transformer.js on the page first");
  const {UNK_ID, BOS_ID} = T;
  const script = document.currentScript;
  // the assets' folder: this script's
  const BASE = new URL(".", script && script.src ? script.src : location.href).href;
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
    const w = new Uint32Array(64);  // the message schedule
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
  // little-endian bytes. Returns name -> {dtype, shape, bytes}.
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

  function halves(tensor) {  // a float16 tensor's values, flat
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
  // product is exact in both.) Returns name -> {shape, data (flat, row-major)}.
  function unpackWeights(tensors) {
    const weights = {};
    for (const [name, tensor] of Object.entries(tensors)) {
      if (name.endsWith(":scale")) continue;
      const size = tensor.shape.reduce((a, b) => a * b, 1), w = new Float32Array(size);
      if (tensor.dtype === "I8") {
        const q = new Int8Array(tensor.bytes.buffer, tensor.bytes.byteOffset, size);
        const scale = halves(tensors[`${name}:scale`]);  // (rows,)
        const cols = tensor.shape[1];  // q, w: (rows, cols)
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
  // denormalizer_spec (5); the specs as field number -> value
  function readModelProto(bytes) {
    const proto = {pieces: [], types: [], scores: [],
      trainer: new Map(), normalizer: new Map(), denormalizer: new Map()};
    for (const [number, , value] of protoFields(bytes)) {
      if (number === 1) {  // SentencePiece: piece (1), score (2), type (3)
        const piece = new Map(protoFields(value).map(([n, , v]) => [n, v]));
        proto.pieces.push(UTF8.decode(piece.get(1)));
        const score = piece.get(2);
        proto.scores.push(piece.has(2)
          ? new DataView(score.buffer, score.byteOffset, 4).getFloat32(0, true) : 0);
        proto.types.push(piece.get(3) || NORMAL);
      } else if (number === 2 || number === 3 || number === 5) {
        const spec =
          {2: proto.trainer, 3: proto.normalizer, 5: proto.denormalizer}[number];
        for (const [n, , v] of protoFields(value)) spec.set(n, v);
      }
    }
    return proto;
  }

  // Throws where the model uses what this reader does not do. TrainerSpec: model_type
  // (3; 2 = BPE), treat_whitespace_as_suffix (24), byte_fallback (35),
  // unk_id/bos_id/eos_id/pad_id (40-43)
  function checkSentencePiece({types, trainer, normalizer, denormalizer}) {
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
    if (String(specials) !== String([UNK_ID, BOS_ID, T.EOS_ID, T.PAD_ID])) {
      problems.push(`special ids ${specials}`);
    }
    if (problems.length) {
      throw new Error(`the SentencePiece model has ${problems.join(", ")}; `
        + "this page's reader does not");
    }
  }

  // The vocabulary: pieces, types, scores (by id), the normal pieces' ids, and how to
  // normalize a text.
  function readSentencePiece(bytes) {
    const proto = readModelProto(bytes);
    checkSentencePiece(proto);
    const {pieces, types, scores, trainer, normalizer} = proto;
    // proto2 default: true
    const bool = (spec, n) => (spec.has(n) ? spec.get(n) === 1 : true);
    const toId = new Map();  // the normal pieces, which BPE merges into
    pieces.forEach((p, id) => { if (types[id] === NORMAL) toId.set(p, id); });
    return {
      pieces, types, scores, toId,
      // TrainerSpec's unk_surface (44)
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

  // The candidate merges {score, left, right, size} in a binary heap: pop() gives the
  // best score, the leftmost on a tie.
  function mergeQueue() {
    const heap = [];
    const better = (a, b) =>
      a.score > b.score || (a.score === b.score && a.left < b.left);
    const swap = (i, j) => { [heap[i], heap[j]] = [heap[j], heap[i]]; };
    const push = item => {
      heap.push(item);
      for (let i = heap.length - 1; i > 0;) {
        const parent = (i - 1) >> 1;
        if (!better(heap[i], heap[parent])) break;
        swap(i, parent);
        i = parent;
      }
    };
    const pop = () => {
      const top = heap[0], last = heap.pop();
      if (!heap.length) return top;
      heap[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1, r = l + 1;
        let best = i;
        if (l < heap.length && better(heap[l], heap[best])) best = l;
        if (r < heap.length && better(heap[r], heap[best])) best = r;
        if (best === i) break;
        swap(i, best);
        i = best;
      }
      return top;
    };
    return {push, pop, isEmpty: () => !heap.length};
  }

  // bpe_model.cc's Encode: start from the characters, and merge the adjacent pair whose
  // merge is the best-scored piece (ties: the leftmost) until no adjacent pair forms a
  // piece. Returns {ids, pieces} (idsOfSymbols).
  function bpeEncode(vocab, normalized) {
    const symbols = Array.from(normalized);  // one a character (code point)
    // a linked list of the symbols left: prev[i], next[i] (-1 at the ends)
    const n = symbols.length, prev = new Int32Array(n), next = new Int32Array(n);
    for (let i = 0; i < n; i++) { prev[i] = i - 1; next[i] = i + 1 < n ? i + 1 : -1; }
    const queue = mergeQueue();
    const candidate = (left, right) => {
      if (left === -1 || right === -1) return;
      const piece = symbols[left] + symbols[right], id = vocab.toId.get(piece);
      if (id !== undefined) {
        queue.push({score: vocab.scores[id], left, right, size: piece.length});
      }
    };
    for (let i = 1; i < n; i++) candidate(i - 1, i);
    while (!queue.isEmpty()) {
      const {left, right, size} = queue.pop();
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
    return idsOfSymbols(vocab, symbols, n ? 0 : -1, next);
  }

  // The merged symbols' ids and pieces, following next[] from `first`; as
  // sentencepiece_processor.cc does, characters outside the vocabulary become <unk>,
  // one <unk> for a run of them.
  function idsOfSymbols(vocab, symbols, first, next) {
    const ids = [], pieces = [];
    for (let i = first; i !== -1; i = next[i]) {
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

  // ---------------------------------------------------------------- the in-domain check

  // domain.RULE: the manifest's name for the check below
  const RULE = "caption_cost";

  // domain.caption_tokens: each maximal run of letters, and each ? or !, of the text
  // NFC-normalized and lowercased
  const captionTokens = text =>
    text.normalize("NFC").toLowerCase().match(/\p{L}+|[?!]/gu) ?? [];

  // domain.read_counts: a words file's "token<TAB>count" lines as token -> count
  const readCounts = text => new Map(text.split("\n").filter(line => line)
    .map(line => line.split("\t")).map(([token, n]) => [token, Number(n)]));

  // domain.CaptionCheck on a words file's text: cost(text), the mean over its tokens of
  // ln(total) - ln(count + 1) (Infinity without tokens), and flags(text): cost above
  // the threshold, never for a blank text. Summed left to right, as Python 3.11's sum.
  function captionCheck(words, threshold) {
    const counts = readCounts(words);
    let total = 0;
    for (const n of counts.values()) total += n;
    const logTotal = Math.log(total);
    const cost = text => {
      const tokens = captionTokens(text);
      if (!tokens.length) return Infinity;
      let sum = 0;
      for (const t of tokens) sum += logTotal - Math.log((counts.get(t) ?? 0) + 1);
      return sum / tokens.length;
    };
    const flags = text => strip(text) !== "" && cost(text) > threshold;
    return {cost, flags, threshold};
  }

  // domain.other_language: whether a text reads as a caption of the other language: the
  // check of its own language flags it, the other language's passes it
  const otherLanguage = (own, other, text) => own.flags(text) && !other.flags(text);

  // pretrained.reverse_of: "de-en" for "en-de"
  const reverseOf = direction => direction.split("-").reverse().join("-");

  // Pretrained.better_direction on one text: the reverse direction where the text
  // reads as a caption of the target language (otherLanguage, with the checks of the
  // source language, own, and of the target, other), else null; null without both
  const betterDirection = (direction, own, other, text) =>
    (own && other && otherLanguage(own, other, text) ? reverseOf(direction) : null);

  // ---------------------------------------------------------------- sentences

  // Python's whitespace (str.isspace, and \s in its re), which JavaScript's \s and trim
  // differ from in a few characters (U+001C-001F and U+0085 are, U+FEFF is not)
  const WS = "\\t-\\r \\x1c-\\x1f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f"
    + "\\u205f\\u3000";
  const EDGES = new RegExp(`^[${WS}]+|[${WS}]+$`, "gu");
  const strip = text => text.replace(EDGES, "");  // str.strip

  // domain.OPENERS: what may open the next sentence, besides a capital or a digit
  const OPENERS = "\"'“„‚‘«»([¿¡";
  const LEADING_OPENERS = /^["'“„‚‘«»(\[¿¡]+/u;  // str.lstrip(OPENERS)
  // domain.CANDIDATE: (a word)(a run of ENDS, . ! ? …)(CLOSERS, the closing quotes and
  // brackets that stay with the sentence), then whitespace before more text
  const CANDIDATE = new RegExp(
    `([^${WS}]*?)([.!?…]+)(["'”“’‘»«)\\]]*)[${WS}]+(?=[^${WS}])`, "gu");
  const ABBREVIATIONS = new Set(("mr mrs ms dr prof st jr sr vs etc cf approx fig inc "
    + "ltd mt jan feb mar apr jun jul aug sep sept oct nov dec usw nr ca bzw vgl hr fr "
    + "str evtl ggf inkl bspw sog jh abs tel").split(" "));
  // Python's [^\W\d_]: letters, and numbers that are not decimal digits (Ⅻ, ²)
  const INITIALS = /^(?:[\p{L}\p{Nl}\p{No}]\.)*[\p{L}\p{Nl}\p{No}]$/u;  // "j", "e.g"
  const ORDINAL = /^\p{Nd}{1,3}$/u;  // "am 3. Mai"
  const STARTS = /^[\p{Lu}\p{Lt}\p{Nd}]$/u;  // a capital, a title case or a digit

  // domain.ends_sentence: whether `marks` after `word` end a sentence, `following`
  // the character after the whitespace
  function endsSentence(word, marks, following) {
    const starts = STARTS.test(following) || OPENERS.includes(following);
    if (!starts || marks !== ".") return starts;
    const bare = word.replace(LEADING_OPENERS, "").toLowerCase();
    return !(ABBREVIATIONS.has(bare) || INITIALS.test(bare) || ORDINAL.test(bare));
  }

  // domain.split_sentences: the sentences of `text`, in order, each stripped; none for
  // a blank text
  function splitSentences(text) {
    const sentences = [];
    let start = 0;
    for (const m of text.matchAll(CANDIDATE)) {
      const end = m.index + m[0].length;  // the next sentence's first character
      if (endsSentence(m[1], m[2], String.fromCodePoint(text.codePointAt(end)))) {
        const closed = m.index + m[1].length + m[2].length + m[3].length;
        sentences.push(strip(text.slice(start, closed)));
        start = end;
      }
    }
    const last = strip(text.slice(start));
    return last ? [...sentences, last] : sentences;
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

  // pretrained.shipped_entry: of the direction's models (CPU- and GPU-trained), the one
  // with the best check BLEU (the first, on a tie)
  function shippedEntry(shipped, direction) {
    const models = shipped[direction];
    if (!models) {
      throw new Error(`no model shipped for "${direction}"; `
        + `shipped: ${Object.keys(shipped).join(", ")}`);
    }
    return Object.values(models).reduce(
      (best, e) => (e.check.bleu_lc > best.check.bleu_lc ? e : best));
  }

  // pretrained.domain_of: the entry's in-domain check (captionCheck), its words file
  // checked against the manifest's SHA-256 first; null for an entry shipped without one
  async function domainOf(entry) {
    if (!entry.domain) return null;
    const {rule, words, threshold} = entry.domain;
    if (rule !== RULE) {
      throw new Error(`unknown in-domain rule "${rule}" (this page knows "${RULE}"); `
        + "reload the book, or update it");
    }
    const bytes = await memo(`words ${words}`,
      async () => verified(words, await loadFile(words), entry.domain.sha256));
    return captionCheck(UTF8.decode(bytes), threshold);
  }

  // the in-domain check of a direction's shipped model, without loading its weights
  const loadDomain = direction => memo(`domain ${direction}`,
    async () => domainOf(shippedEntry(await manifest(), direction)));

  // the in-domain check of the direction's target language, as load_pretrained takes
  // it: the reverse direction's, null where that direction is not shipped; loaded only
  // for a text that the direction's own check flags
  const loadTargetDomain = async direction => {
    const reverse = reverseOf(direction);
    return (await manifest())[reverse] ? loadDomain(reverse) : null;
  };

  // The decoding the entry was shipped with (decoding.Decoding: beam_size, alpha), and
  // the most tokens beyond the source's length: the entry's extra_length where it has
  // one, else decoding.EXTRA_LENGTH, as decoding.length_limits takes it.
  const decodingOf = entry => ({extra_length: T.EXTRA_LENGTH, ...entry.decoding});

  // A made-up model of the shipped shape but tiny (d_model 8, 16 pieces), translated a
  // few times while the weights download: the JIT compiles the kernels on it, so that
  // the reader's first sentence runs compiled code from its start.
  function warmUp(decoding) {
    return memo("warm-up", async () => {
      const config = {d_model: 8, n_heads: 2, d_ff: 16, n_layers: 1, max_len: 24,
        src_vocab_size: 16, tgt_vocab_size: 16, share_embeddings: true,
        norm_first: false};
      let seed = 1;
      const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647 - 0.5;
      const weights = {};
      for (const [name, shape] of Object.entries(T.parameterShapes(config))) {
        weights[name] = {shape,
          data: new Float32Array(shape.reduce((a, b) => a * b, 1)).map(random)};
      }
      const model = T.buildModel(config, weights, "warm-up"), ids = [4, 5, 6, 7];
      for (let i = 0; i < 30; i++) {
        // the (n_layers, n_heads, S, S) weights every tenth time
        const weights = i % 10 ? null : new Float64Array(2 * 4 * 4);
        const memory = T.encode(model, ids, weights);
        const best = await T.beamSearch(model, ids, memory, decoding);
        if (i % 10 === 0) T.decoderAttention(model, memory, ids.length, best.ids);
      }
    });
  }

  // pretrained.load_pretrained: the model, vocabulary, decoding and in-domain check
  // shipped for a direction, every file checked against the manifest's SHA-256 first.
  // `timings`: seconds of each stage.
  function loadTranslator(direction) {
    return memo(`translator ${direction}`, async () => {
      const start = performance.now(), timings = {};
      const lap = (name, since) => {
        timings[name] = (performance.now() - since) / 1000;
        return performance.now();
      };
      const entry = shippedEntry(await manifest(), direction);
      const decoding = decodingOf(entry), domain = loadDomain(direction);
      domain.catch(() => {});  // its failure is reported where it is awaited, below
      const vocab = memo(`vocabulary ${entry.tokenizer}`, async () => readSentencePiece(
        await verified(entry.tokenizer, await loadFile(entry.tokenizer),
          entry.tokenizer_sha256)));
      // the browser fetches and parses it meanwhile
      const file = loadFile(entry.weights);
      let t = performance.now();
      await warmUp(decoding);
      t = lap("warm_up", t);
      const bytes = await file;
      t = lap("load", t);
      await verified(entry.weights, bytes, entry.weights_sha256);
      t = lap("sha256", t);
      const source = `${entry.weights} (SHA-256 ${entry.weights_sha256})`;
      const model = T.buildModel(
        entry.model_config, unpackWeights(readSafetensors(bytes)), source);
      t = lap("unpack", t);
      const translator =
        {direction, model, vocab: await vocab, decoding, domain: await domain};
      lap("vocabulary", t);
      return Object.assign(translator,
        {timings, seconds: (performance.now() - start) / 1000});
    });
  }

  // whether a direction's model is loaded, or loading
  const isLoaded = direction => once.has(`translator ${direction}`);

  // ---------------------------------------------------------------- translating

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

  // attention_maps.attention_maps as [layer][head][query][key] arrays: "encoder"
  // (S, S) from the weights encode wrote, (n_layers, n_heads, S, S) flat; "decoder"
  // and "cross" recomputed, teacher-forced on outIds, paced
  async function attentionMaps(model, memory, encoderWeights, S, outIds) {
    const grid = (l, h) => Array.from({length: S}, (_, i) => {
      const row = ((l * model.n_heads + h) * S + i) * S;
      return Array.from(encoderWeights.subarray(row, row + S));
    });
    return {
      encoder: model.p.encoder.map((_, l) =>
        Array.from({length: model.n_heads}, (_, h) => grid(l, h))),
      ...await T.paced(T.decoderAttentionSteps(model, memory, S, outIds)),
    };
  }

  // one sentence's result before it is translated: its source, ids and pieces
  function emptyResult(translator, sentence, src) {
    const {model, vocab} = translator;
    return {source: sentence, translation: "", sourceIds: src.ids, outputIds: [],
      sourcePieces: src.ids.map(id => vocab.pieces[id]), outputPieces: [],
      score: null, confidence: null, truncated: src.truncated,
      sourceLength: src.pieces, maxLength: model.max_len,
      unknown: src.ids.filter(id => id === UNK_ID).length, seconds: 0, attention: null};
  }

  // evaluation.translate on one sentence, with the shipped decoding, and what the page
  // shows: the pieces, the score log P / lp(|Y|), the confidence (mean log p a target
  // token), the seconds it took, and every layer's and head's attention,
  // [layer][head][query][key] arrays as attention_maps gives them (none where the
  // source or the output is longer than upTo pieces)
  async function translateSentence(translator, sentence, upTo) {
    const start = performance.now(), {model, vocab, decoding} = translator;
    const src = sourceIds(translator, sentence), S = src.ids.length;
    const result = emptyResult(translator, sentence, src);
    if (!S) return result;  // "" as evaluation.translate gives for an empty line
    const encoderWeights =  // (n_layers, n_heads, S, S)
      S > upTo ? null : new Float64Array(model.n_layers * model.n_heads * S * S);
    const memory = await T.paced(T.encodeSteps(model, src.ids, encoderWeights));
    const best = await T.beamSearch(model, src.ids, memory, decoding);
    Object.assign(result, {outputIds: best.ids,
      outputPieces: best.ids.map(id => vocab.pieces[id]),
      translation: decodeIds(vocab, best.ids), score: best.score,
      confidence: best.logP / best.ids.length});
    result.seconds = (performance.now() - start) / 1000;
    if (encoderWeights && best.ids.length <= upTo) {
      result.attention =
        await attentionMaps(model, memory, encoderWeights, S, best.ids);
    }
    return result;
  }

  // what the page says of a whole text's sentences: nothing to translate, or which
  // sentences were cut to the model's max_len
  function messageOn(sentences, maxLength) {
    if (!sentences.some(s => s.sourceIds.length)) {
      return "There is nothing to translate: the text is empty or only spaces.";
    }
    const one = sentences.length === 1;
    return sentences.filter(s => s.truncated).map(s => `${one ? "The text"
      : `Sentence ${sentences.indexOf(s) + 1}`} is ${s.sourceLength} pieces long; `
      + `the model reads at most ${maxLength}${one ? "" : " a sentence"}, `
      + `so only ${one ? "the" : "its"} first ${maxLength} were translated.`).join(" ");
  }

  // the text's result from its sentences' (Pretrained.translate joins their
  // translations with a space) and its in-domain check (Pretrained.out_of_domain), with
  // the direction to translate in instead (Pretrained.better_direction), else null:
  // `target`, the target language's check, is loaded where the text is flagged
  function summary(translator, text, sentences, target, {seconds, loadSeconds}) {
    const {direction, domain, model} = translator;
    return {direction, text, translation: sentences.map(s => s.translation).join(" "),
      outOfDomain: domain ? domain.flags(text) : false,
      betterDirection: betterDirection(direction, domain, target, text),
      cost: domain ? domain.cost(text) : null,
      threshold: domain ? domain.threshold : null, sentences,
      truncated: sentences.some(s => s.truncated),
      unknown: sentences.reduce((n, s) => n + s.unknown, 0),
      maxLength: model.max_len, seconds, loadSeconds,
      message: messageOn(sentences, model.max_len)};
  }

  // Pretrained.translate on one text: its sentences (splitSentences) translated one by
  // one (translateSentence), as the package translates them in a batch, the page given
  // back to the browser between steps (transformer.js's paced). Returns {direction,
  // text, translation, outOfDomain, betterDirection, cost, threshold, sentences (each
  // translateSentence's, with its source), truncated, unknown, maxLength, seconds,
  // loadSeconds, message}. options.attention false: no attention maps;
  // options.attentionUpTo: none for a sentence longer than that many pieces;
  // options.progress({done, total, sentences}): called before the first sentence and
  // after each, with the results so far; options.signal: an AbortSignal, checked
  // between sentences (aborted: the Promise rejects with its reason).
  function translate(direction, text, options = {}) {
    return inTurn(async () => {
      if (typeof text !== "string") {
        throw new TypeError(
          "transformerTranslate(direction, text) takes the text as a string");
      }
      T.pace.start();
      const loadStart = performance.now(), translator = await loadTranslator(direction);
      const loadSeconds = (performance.now() - loadStart) / 1000;
      const upTo = options.attention === false ? 0 : options.attentionUpTo || Infinity;
      const start = performance.now(), sentences = [], parts = splitSentences(text);
      const progress = options.progress || (() => {});
      progress({done: 0, total: parts.length, sentences});
      for (const sentence of parts) {
        options.signal?.throwIfAborted();
        sentences.push(await translateSentence(translator, sentence, upTo));
        progress({done: sentences.length, total: parts.length, sentences});
        await T.breathe();
      }
      const seconds = (performance.now() - start) / 1000;
      const flagged = translator.domain && translator.domain.flags(text);
      const target = flagged ? await loadTargetDomain(direction) : null;
      const result =
        summary(translator, text, sentences, target, {seconds, loadSeconds});
      T.pace.stop();
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
      Array.from(T.encode((await loadTranslator(direction)).model, ids)),
    // log p(. | BOS, x) of the first step, PAD and BOS -inf (sent as null)
    firstStepLogProbs: async (direction, ids) => {
      const {model} = await loadTranslator(direction);
      const state = T.decoderState(model, T.encode(model, ids), ids.length, 1, 1);
      T.decodeStep(model, state, [BOS_ID]);
      const lse = T.logSumExp(model, state.logits, 0);
      return Array.from(state.logits,
        (v, i) => (i === T.PAD_ID || i === BOS_ID ? null : v - lse));
    },
    // log P(out | src) teacher-forced, and the beam's score log P / lp(|out|)
    score: async (direction, ids, outIds) => {
      const {model, decoding} = await loadTranslator(direction);
      const state = T.decoderState(
        model, T.encode(model, ids), ids.length, 1, outIds.length);
      let logP = 0;
      [BOS_ID, ...outIds.slice(0, -1)].forEach((token, t) => {
        T.decodeStep(model, state, [token]);
        logP += state.logits[outIds[t]] - T.logSumExp(model, state.logits, 0);
      });
      return {logP, score: logP / T.lp(outIds.length, decoding.alpha)};
    },
    sha256: async (bytes, byHand = false) =>
      (byHand ? sha256ByHand(new Uint8Array(bytes)) : sha256(new Uint8Array(bytes))),
    // domain.split_sentences of each text
    splitSentences: async texts => texts.map(splitSentences),
    // of each text: its caption_tokens, its cost and whether out_of_domain flags it;
    // loads the direction's words file only, not its weights
    captionCheck: async (direction, texts) => {
      const domain = await loadDomain(direction);
      if (!domain) throw new Error(`the ${direction} model has no in-domain check`);
      return texts.map(text => ({tokens: captionTokens(text), cost: domain.cost(text),
        outOfDomain: domain.flags(text)}));
    },
    // of each text, the direction Pretrained.better_direction names, or null; loads the
    // words files of both languages only
    betterDirection: async (direction, texts) => {
      const own = await loadDomain(direction);
      const other = await loadTargetDomain(direction);
      return texts.map(text => betterDirection(direction, own, other, text));
    },
    // the longest run of work between two breaks of transformer.js's pacing (ms) and
    // the breaks, since the last reset
    pace: async (reset = false) => {
      const {longest, breaks} = T.pace;
      if (reset) Object.assign(T.pace, {longest: 0, breaks: 0});
      return {longest, breaks};
    },
  };

  window.transformerPretrained =
    {translate, debug, isLoaded, UNK_ID, pace: T.pace, breathe: T.breathe};
})();
