// The in-domain check and the sentence splitter of domain.py in the reader's browser
// (chapter 14, appendix 18): a text is translated sentence by sentence, and flagged
// where it does not look like a caption. This file leaves window.transformerDomain.
//
//   function                 mirrors (src/transformer/)
//   captionTokens, readCounts, captionCheck
//                            domain.caption_tokens, domain.read_counts, CaptionCheck
//   otherLanguage, reverseOf domain.other_language, pretrained.reverse_of
//   betterDirection          Pretrained.better_direction, on one text
//   strip                    str.strip (Python's whitespace, not JavaScript's)
//   endsSentence, splitSentences
//                            sentences.ends_sentence, sentences.split_sentences
(() => {
  "use strict";

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

  // sentences.ends_sentence: whether `marks` after `word` end a sentence, `following`
  // the character after the whitespace
  function endsSentence(word, marks, following) {
    const starts = STARTS.test(following) || OPENERS.includes(following);
    if (!starts || marks !== ".") return starts;
    const bare = word.replace(LEADING_OPENERS, "").toLowerCase();
    return !(ABBREVIATIONS.has(bare) || INITIALS.test(bare) || ORDINAL.test(bare));
  }

  // sentences.split_sentences: the sentences of `text`, in order, each stripped; none for
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


  window.transformerDomain = {RULE, captionTokens, readCounts, captionCheck, otherLanguage,
    reverseOf, betterDirection, strip, splitSentences};
})();
