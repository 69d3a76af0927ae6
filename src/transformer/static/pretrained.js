// The shipped translators in the reader's browser (chapter 14, appendix 18): loading a
// direction's model, vocabulary, decoding and in-domain check from the shipped files
// (shipped.js reads them, sentencepiece.js the vocabulary, domain.js the check), and
// translating a text sentence by sentence with transformer.js. translator.js (the page)
// loads common.js, layers.js, transformer.js, shipped.js, sentencepiece.js and
// domain.js, then this file; this one leaves window.transformerPretrained:
// {translate, debug, isLoaded, UNK_ID, pace, breathe}.
//
//   function                 mirrors (src/transformer/)
//   shippedEntry             pretrained.shipped_entry
//   domainOf, loadDomain     pretrained.domain_of
//   warmUp                   (the JIT's first compile, on a tiny made-up model)
//   loadTranslator           pretrained.load_pretrained
//   sourceIds, translateSentence
//                            evaluation.translate, on one sentence
//   translate, summary       Pretrained.translate (sentences.translate_texts),
//                            Pretrained.out_of_domain and better_direction, with what
//                            the page shows; sentence by sentence, paced
//                            (transformer.js's paced)
(() => {
  "use strict";
  const T = window.transformerModel;  // transformer.js
  const files = window.transformerShipped;  // shipped.js
  const tokenizer = window.transformerTokenizer;  // sentencepiece.js
  const domains = window.transformerDomain;  // domain.js
  if (!T || !files || !tokenizer || !domains) {
    throw new Error("pretrained.js needs transformer.js, shipped.js, sentencepiece.js "
      + "and domain.js on the page first");
  }
  const {UNK_ID, BOS_ID} = T;
  const {UTF8, sha256, sha256ByHand, readSafetensors, unpackWeights} = files;
  const {loadFile, verified} = files;
  const {readSentencePiece, normalize, encodeText, decodeIds} = tokenizer;
  const {RULE, captionTokens, captionCheck, reverseOf, betterDirection} = domains;
  const {splitSentences} = domains;

  // ---------------------------------------------------------------- loading

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
    // sentences.split_sentences of each text
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
