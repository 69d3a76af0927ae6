// The SentencePiece tokenizer of the shipped translators in the reader's browser
// (chapter 1's tokenizer.py, appendix 18): the model file read as protobuf, its
// normalization rules, BPE encoding and decoding, as sentencepiece computes them.
// It needs common.js (the token ids) and leaves window.transformerTokenizer.
//
//   function                 mirrors (src/transformer/, or the library named)
//   protoFields              protobuf's wire format
//   readModelProto, checkSentencePiece, readSentencePiece
//                            sentencepiece's model loading (tokenizer.py's processor)
//   readCharsmap, longestRule, normalize
//                            sentencepiece's normalizer.cc
//   mergeQueue, bpeEncode, idsOfSymbols
//                            sentencepiece's bpe_model.cc Encode (tokenizer.encode)
//   decodeIds                sentencepiece's Decode (tokenizer.decode)
(() => {
  "use strict";
  const common = window.transformerCommon;  // common.js
  if (!common) throw new Error("sentencepiece.js needs common.js on the page first");
  const {PAD_ID, UNK_ID, BOS_ID, EOS_ID} = common;
  const UTF8 = new TextDecoder(), ENCODE_UTF8 = new TextEncoder();

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
    if (String(specials) !== String([UNK_ID, BOS_ID, EOS_ID, PAD_ID])) {
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


  window.transformerTokenizer = {readSentencePiece, normalize, encodeText, decodeIds};
})();
