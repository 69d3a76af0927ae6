// The shipped files as they are, in the reader's browser (chapter 14, appendix 18): the
// files of src/transformer/weights/ (manifest.json, the safetensors weights with int8
// rows and float16 scales, the SentencePiece model, the words files), each written
// into the built book by book/_ext/translator_assets.py as F.js, a script that holds
// F's bytes in base64, because a page opened from disk may not fetch files; loadFile
// adds such a script (by translator.js's loader) only when a translation asks for it,
// and verified checks the bytes against the manifest's SHA-256. This file leaves
// window.transformerShipped.
//
//   function                 mirrors (src/transformer/, or the library named)
//   fromBase64, hex          (bytes)
//   sha256ByHand, sha256     hashlib.sha256, as pretrained.verified uses it
//   float16, halves          numpy's float16
//   readSafetensors          safetensors.safe_open
//   unpackWeights            pretrained.unpack_weights
//   loadFile, verified       pretrained.verified, on the asset scripts
(() => {
  "use strict";
  const UTF8 = new TextDecoder();

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


  // ---------------------------------------------------------------- loading

  const assets = window.__transformerAssets = window.__transformerAssets || {};

  // The bytes of a shipped file, through the script NAME.js beside translator.js
  // (file:// pages may not fetch files, but they may run scripts), added by its loader
  async function loadFile(name) {
    await window.transformerTranslator.loadScript(`${name}.js`, true);
    const text = assets[name];
    delete assets[name];
    if (typeof text !== "string") throw new Error(`${name}.js did not hold ${name}`);
    return fromBase64(text);
  }

  async function verified(name, bytes, expected) {  // pretrained.verified
    const actual = await sha256(bytes);
    if (actual !== expected) {
      throw new Error(`${name} is damaged or altered: `
        + `its SHA-256 is ${actual}, expected ${expected}`);
    }
    return bytes;
  }


  window.transformerShipped = {fromBase64, hex, sha256ByHand, sha256, float16,
    readSafetensors, unpackWeights, loadFile, verified, UTF8};
})();
