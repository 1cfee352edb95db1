// A text's words in chunks one call of the stages takes, and each word's time in its
// chunk's audio: the Python runtime's rules, which tests/test_web_chunking.py holds this
// module to (kokoro_ext/text/chunking.py: sentences, pack_evenly, split_in_two;
// kokoro_ext/text/timing.py and kokoro_ext/run/timestamps.py: token_words, times).
//
// A word is {text, phonemes, start, end} (text.js's words: offsets into the text, its
// phonemes with the whitespace after them).  A piece is {words, end}: a chunk's words and
// how it ends ("paragraph", "sentence", "clause", "word" or "phoneme"), which sets the
// pause before the next chunk.  Sizes are phoneme symbols (code points), as in Python.

/** Seconds of silence after a chunk that ends with each break (chunking.PAUSES). */
export const PAUSES = { paragraph: 0.6, sentence: 0.3, clause: 0.15, word: 0.05, phoneme: 0 };
/** Symbols that are not sounds: pauses and intonation (synthesizer.SILENT_SYMBOLS). */
export const SILENT = new Set(" ;:,.!?¡¿—…\"«»“”()→↓↗↘");
/** Frames by which the audio leads the sums of the durations (timestamps.LEAD_FRAMES). */
export const LEAD_FRAMES = 3;

const CLAUSE_END = new Set(",;:—…");
const CLAUSE_SPLIT = new Set(";:");
// punctuation that may end a sentence, then closing quotes (split_sentences' _SENTENCE)
const SENTENCE_MARK = /[.!?…;:]+[)"'”’\]]*$/u;
const ABBREVIATIONS = new Set(("mr mrs ms dr prof sr jr st mt vs etc fig no vol ca approx " +
  "dept inc ltd co e.g i.e a.m p.m u.s").split(" "));
// one phoneme: stress marks before it, length and other marks after it (chunking._PHONEME)
const PHONEME = /[ˈˌ]*[\s\S][ːʰʲ\u0303]*/gu;

const length = (s) => [...s].length;
const joined = (words) => words.map((w) => w.phonemes).join("");
/** Phoneme symbols the words take in a chunk, surrounding whitespace excluded. */
export const size = (words) => length(joined(words).trim());
/** The break after a word: a clause end if its phonemes end with clause punctuation, or
 * it has none (Python's `"" in CLAUSE_END`: a word of only spaces, "---"). */
const wordEnd = (word) => {
  const last = [...word.phonemes.trimEnd()].at(-1);
  return last === undefined || CLAUSE_END.has(last) ? "clause" : "word";
};

/** A chunk's phonemes: its words', joined and trimmed. */
export function piecePhonemes(piece) {
  return joined(piece.words).trim();
}

/** Words -> sentences, each {words, end}: a sentence ends after punctuation (. ! ? … ; :
 * and closing quotes) followed by a space or the end, except after a one-letter word or
 * an abbreviation ("Dr."), and at a line break (two: a paragraph); ; and : end a clause. */
export function sentences(words, text = "") {
  const out = [];
  let current = [];
  words.forEach((word, i) => {
    current.push(word);
    const next = words[i + 1];
    const gap = next === undefined || word.end === null || next.start === null ? ""
      : text.slice(word.end, next.start);
    const trailing = word.phonemes.slice(word.phonemes.trimEnd().length);
    const said = word.phonemes.trimEnd();
    const mark = SENTENCE_MARK.exec(said);
    const atMark = mark && (trailing || next === undefined || /^\s/.test(gap)) &&
      !(said.endsWith(".") && isAbbreviation(word.text) && !gap.includes("\n"));
    // line breaks: in the text between the words, or (the same ones) after the phonemes
    const lines = Math.max((gap.match(/\n/g) ?? []).length, (trailing.match(/\n/g) ?? []).length);
    if (next === undefined || atMark || lines) {
      const end = lines >= 2 ? "paragraph"
        : atMark && CLAUSE_SPLIT.has(said.replace(/[)"'”’\]]+$/u, "").at(-1)) ? "clause" : "sentence";
      out.push({ words: current, end });
      current = [];
    }
  });
  return out;
}

/** Whether the last word of `text` is one whose period ends no sentence ("Dr.", "A."). */
export function isAbbreviation(text) {
  const word = (text.trim().split(/\s+/).at(-1) ?? "").toLowerCase().replace(/\.+$/, "")
    .replace(/^[("'“‘]+/u, "");
  return (length(word) === 1 && /\p{L}/u.test(word)) || ABBREVIATIONS.has(word);
}

/** Words -> pieces of at most `limit` phoneme symbols (chunking.pack): a piece ends after
 * the last clause punctuation that fits if that keeps it a third of `limit` long, else
 * after the last word that fits; a word longer than `limit` is cut between phonemes. */
export function pack(words, limit, end = "sentence") {
  if (!(limit >= 1)) throw new Error(`chunk limit must be at least 1 phoneme, got ${limit}`);
  const pieces = [];
  let current = [];
  const queue = [...words];
  while (queue.length) {
    const word = queue.shift();
    if (length((joined(current) + word.phonemes).trim()) <= limit) {
      current.push(word);
      continue;
    }
    if (!current.length) { // a single word longer than a chunk
      const parts = cutWord(word, limit);
      for (const part of parts.slice(0, -1)) pieces.push({ words: [part], end: "phoneme" });
      current = [parts.at(-1)];
      continue;
    }
    const cut = clauseCut(current, limit);
    pieces.push({ words: current.slice(0, cut), end: wordEnd(current[cut - 1]) });
    current = current.slice(cut);
    queue.unshift(word);
  }
  if (current.length) pieces.push({ words: current, end });
  return pieces;
}

/** `pack` into as many pieces as it makes, as even as they can be (chunking.pack_evenly). */
export function packEvenly(words, limit, end = "sentence") {
  const pieces = pack(words, limit, end);
  const cutInWord = (ps) => ps.some((p) => p.end === "phoneme");
  if (pieces.length < 2 || cutInWord(pieces)) return pieces;
  let low = Math.max(1, Math.floor(size(words) / pieces.length)), high = limit, best = pieces;
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    const candidate = pack(words, middle, end);
    if (candidate.length <= pieces.length && !cutInWord(candidate)) [best, high] = [candidate, middle];
    else low = middle + 1;
  }
  return best;
}

function clauseCut(words, limit) {
  for (let cut = words.length; cut > 0; cut--) {
    if (wordEnd(words[cut - 1]) === "clause" && size(words.slice(0, cut)) * 3 >= limit) return cut;
  }
  return words.length;
}

const units = (phonemes) => phonemes.match(PHONEME) ?? [];

function cutWord(word, limit) {
  const trailing = word.phonemes.slice(word.phonemes.trimEnd().length);
  const parts = [];
  let current = "";
  for (const unit of units(word.phonemes.trim())) {
    if (current && length(current) + length(unit) > limit) parts.push(current), (current = "");
    current += unit;
  }
  parts.push(current + trailing);
  // the text goes with the first part; the rest are the same word's, at its end
  return parts.map((phonemes, i) => (i === 0 ? { ...word, phonemes }
    : { text: "", phonemes, start: null, end: null }));
}

/** Words -> pieces of at most `limit` phoneme symbols: each sentence packed evenly (the
 * Synthesizer's chunks of the same words). */
export function chunkWords(words, limit, text = "") {
  return sentences(words, text).flatMap((s) => packEvenly(s.words, limit, s.end));
}

/** A piece halved at the word boundary nearest its middle by phonemes (a single word at
 * a phoneme boundary); null for a single phoneme (chunking.split_in_two). */
export function splitInTwo(piece) {
  const { words } = piece;
  if (words.length === 1) {
    const [word] = words;
    const all = units(word.phonemes.trim());
    if (all.length < 2) return null;
    const half = Math.floor(all.length / 2);
    const trailing = word.phonemes.slice(word.phonemes.trimEnd().length);
    return [
      { words: [{ ...word, phonemes: all.slice(0, half).join("") }], end: "phoneme" },
      { words: [{ text: "", phonemes: all.slice(half).join("") + trailing, start: null, end: null }],
        end: piece.end },
    ];
  }
  const total = size(words);
  let cut = 1;
  for (let c = 2; c < words.length; c++) {
    if (Math.abs(2 * size(words.slice(0, c)) - total) < Math.abs(2 * size(words.slice(0, cut)) - total)) cut = c;
  }
  return [{ words: words.slice(0, cut), end: wordEnd(words[cut - 1]) },
          { words: words.slice(cut), end: piece.end }];
}

/** Whether a piece has a sound to synthesize (not only punctuation). */
export function speakable(piece, vocab) {
  return [...piecePhonemes(piece)].some((p) => Object.hasOwn(vocab, p) && !SILENT.has(p));
}

/** What the chunks of one text reported so far (timing.OriginalWords): a stretch of the
 * text split over two chunks is reported by the first. */
export function reportedWords(original) {
  return { original, last: null, glued: [] };
}

/** A chunk not said (only punctuation): its words' text may be glued to the next word. */
export function unsaid(reported, words) {
  for (const w of words) if (w.text.trim()) reported.glued.push(span(w));
}

const span = (w) => (w.start === null || w.start === undefined || !(w.end > w.start) ? null : [w.start, w.end]);
// overlapping, or written without a character between them
const touch = (a, b) => a !== null && b !== null && a[0] <= b[1] && b[0] <= a[1];
const overlap = (a, b) => a !== null && b !== null && a[0] < b[1] && b[0] < a[1];
const union = (spans) => {
  const found = spans.filter((s) => s !== null);
  return found.length ? [Math.min(...found.map((s) => s[0])), Math.max(...found.map((s) => s[1]))] : null;
};

/** The stretches of `source` the spans cover, in order, overlapping or touching ones
 * once (spans.original). */
function originalText(spans, source) {
  let out = "", stretch = null;
  for (const s of spans) {
    if (s === null) continue;
    if (stretch !== null && s[0] <= stretch[1] && s[1] >= stretch[0]) {
      stretch = [Math.min(stretch[0], s[0]), Math.max(stretch[1], s[1])];
      continue;
    }
    if (stretch !== null) out += source.slice(stretch[0], stretch[1]);
    stretch = s;
  }
  if (stretch !== null) out += source.slice(stretch[0], stretch[1]);
  return stretch === null && !out ? null : out;
}

/**
 * The words a chunk reports and when each is said in its audio (timing.token_words,
 * timestamps.times): a word lasts from its first sounding token to its last, every edge
 * LEAD_FRAMES earlier (not before the chunk's start), in seconds rounded to the
 * microsecond.  With `reported` (reportedWords: one for a text's chunks in order), the
 * words of one written stretch ("$16.50" said as four words) are one entry that reports
 * the stretch of the original text, punctuation glued to a word goes with it, and a
 * stretch the chunk before reported is reported by its normalized text; without it,
 * each word reports its own text.  A word with no sound is left out; one with no text
 * (the rest of a word cut in two) extends the word before it.  `durations`: frames per
 * token, boundaries included.
 */
export function wordTimes(words, durations, vocab, secondsPerFrame, reported = null, lead = LEAD_FRAMES) {
  const all = joined(words);
  const start = length(all) - length(all.trimStart()), stop = length(all.trimEnd());
  let position = 0, token = 1; // token 0 is kokoro's leading boundary
  const entries = []; // {text, first, last, said: spans, span, word}
  const glued = reported !== null ? reported.glued : [];
  for (const word of words) {
    let first = null, last = null;
    for (const symbol of word.phonemes) {
      // the tokens phonemesToIds makes of the trimmed chunk, one per vocab symbol
      if (start <= position && position < stop && Object.hasOwn(vocab, symbol)) {
        if (!SILENT.has(symbol)) {
          first ??= token;
          last = token;
        }
        token += 1;
      }
      position += 1;
    }
    const text = word.text.trim();
    let own = reported !== null && text ? span(word) : null;
    const previous = entries.at(-1);
    if (first === null) { // only punctuation: no sound of its own
      if (own !== null && previous && touch(previous.span, own)) {
        previous.said.push(own);
        previous.span = union([previous.span, own]);
      } else if (own !== null) {
        glued.push(own);
      }
      continue;
    }
    if (!text) {
      if (previous) previous.last = last;
      glued.length = 0;
      continue;
    }
    let said = [own];
    if (own !== null && glued.length && touch(glued.at(-1), own)) {
      said = [...glued, own];
      own = union(said);
    }
    glued.length = 0;
    if (own !== null && previous && touch(previous.span, own)) {
      previous.last = last;
      previous.said.push(...said);
      previous.span = union([previous.span, own]);
      continue;
    }
    entries.push({ text, first, last, said, span: own, word });
  }
  if (token + 1 !== durations.length) {
    throw new Error(`${token + 1} tokens in the words, ${durations.length} durations`);
  }
  const shift = Math.min(lead, durations[0]);
  const edges = [-shift];
  for (const d of durations) edges.push(edges.at(-1) + d);
  const time = (frame) => Math.round(frame * secondsPerFrame * 1e6) / 1e6;
  return entries.map((e) => {
    let text = e.text, start = e.word.start, end = e.word.end;
    if (e.span !== null && !overlap(e.span, reported.last)) { // else the chunk before's
      text = (originalText(e.said, reported.original) ?? text).trim();
      reported.last = e.span;
      [start, end] = e.span;
    }
    return { text, start, end, startTime: time(edges[e.first]), endTime: time(edges[e.last + 1]) };
  });
}
