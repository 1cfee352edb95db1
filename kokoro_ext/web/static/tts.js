// Text to speech in the browser with a `--target webgpu` build: kokoro.js runs the stages,
// host.js the steps between them, a front end turns text into phonemes (text.js).
//
//   const tts = await KokoroTTS.load("./");
//   const { audio } = await tts.generate("Hello world.", { voice: "af_heart" });
//   for await (const chunk of tts.stream(longText)) play(chunk.audio);
//
// Audio is float32 at 24 kHz.  The build's folder holds the stages, `config.json` (the
// vocabulary), `voice.npy` (the build's default voice) and `voices/<name>.bin` (the voice
// packs a build found fetched: kokoro-js's format, raw float32 [510, 1, 256]).

import { loadBuild } from "./kokoro.js";
import { align, durations, sourceNoise, STYLE_WIDTH, voiceStyle } from "./host.js";
import { phonemesToIds, phonemize as textPhonemize } from "./text.js";

export const SAMPLE_RATE = 24000;
const HALF = STYLE_WIDTH / 2;

/** A .npy file's float32 data (little-endian, C order). */
function npyFloat32(buffer) {
  const bytes = new Uint8Array(buffer);
  if (String.fromCharCode(...bytes.slice(1, 6)) !== "NUMPY") throw new Error("not a .npy file");
  const view = new DataView(buffer);
  const headerLength = bytes[6] === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = bytes[6] === 1 ? 10 + headerLength : 12 + headerLength;
  const header = new TextDecoder().decode(bytes.slice(bytes[6] === 1 ? 10 : 12, start));
  if (!header.includes("'<f4'") || header.includes("'fortran_order': True")) {
    throw new Error(`voice.npy must be little-endian float32 in C order: ${header}`);
  }
  return new Float32Array(buffer.slice(start));
}

/** "af_bella(2)+af_sky(1)" or "af_bella+af_sky" -> [[name, weight]], weights summing to 1. */
export function parseBlend(spec) {
  const parts = spec.split("+").map((part) => {
    const match = /^\s*([a-z]{2}_[a-z0-9]+)\s*(?:\(\s*([0-9.]+)\s*\))?\s*$/.exec(part);
    if (!match) throw new Error(`voice ${JSON.stringify(part)} is not a name like af_heart or af_bella(2)`);
    const weight = match[2] === undefined ? 1 : Number(match[2]);
    if (!(weight > 0) || !Number.isFinite(weight)) throw new Error(`voice weight ${match[2]} must be > 0`);
    return [match[1], weight];
  });
  const total = parts.reduce((sum, [, w]) => sum + w, 0);
  return parts.map(([name, w]) => [name, w / total]);
}

export class KokoroTTS {
  #packs = new Map(); // voice spec -> Promise of its pack

  constructor(build, config, phonemize) {
    Object.assign(this, { build, config, phonemize });
    const { limits, geometry } = build.manifest;
    Object.assign(this, { limits, geometry, device: build.device });
  }

  /**
   * Load the build at `base` (a folder's URL, or a list of them in order of preference,
   * e.g. ["./", "../wasm/"]: kokoro.js's loadBuild).  `phonemize(text, {language, vocab, base})` ->
   * {words: [{text, phonemes, start, end}]} is the front end (default: text.js's).
   */
  static async load(base = "./", { log = () => {}, phonemize = textPhonemize } = {}) {
    const build = await loadBuild(base, { log }); // a list: the first build that runs here
    const response = await fetch(new URL("config.json", build.base));
    if (!response.ok) throw new Error(`config.json: HTTP ${response.status}`);
    return new KokoroTTS(build, await response.json(), phonemize);
  }

  async #fetch(file) {
    const response = await fetch(new URL(file, this.build.base));
    if (!response.ok) throw new Error(`${file}: HTTP ${response.status}`);
    return response.arrayBuffer();
  }

  /** The voice pack (Float32Array [510 x 256]) of a name, a blend, or the build's own. */
  async voice(spec) {
    const key = spec ?? "";
    if (!this.#packs.has(key)) this.#packs.set(key, this.#loadVoice(spec));
    return this.#packs.get(key);
  }

  /** The names of the voices the build ships (`voices.json`; [] for a build without). */
  async listVoices() {
    const response = await fetch(new URL("voices.json", this.build.base));
    if (response.status === 404) return [];
    if (!response.ok) throw new Error(`voices.json: HTTP ${response.status}`);
    return response.json();
  }

  async #loadVoice(spec) {
    if (spec === undefined || spec === "") return npyFloat32(await this.#fetch("voice.npy"));
    const parts = await Promise.all(
      parseBlend(spec).map(async ([name, weight]) => [
        new Float32Array(await this.#fetch(`voices/${name}.bin`).catch(() => {
          throw new Error(`unknown voice ${name}: the build's voices/ has no ${name}.bin`);
        })),
        weight,
      ]),
    );
    const mixed = new Float32Array(parts[0][0].length);
    for (const [pack, weight] of parts) pack.forEach((v, i) => (mixed[i] += weight * v));
    return mixed;
  }

  /** Token ids (with boundary 0s) -> {audio, durations, frames}: the four stages, in order. */
  async synthesizeIds(ids, { voice, speed = 1, seed = 0 } = {}) {
    const tokens = ids.length;
    if (tokens > this.limits.tokens) {
      throw new Error(`${tokens} tokens: a call takes at most ${this.limits.tokens}; split the text`);
    }
    const style = voiceStyle(await this.voice(voice), tokens - 2);
    const decoderStyle = style.slice(0, HALF), predictorStyle = style.slice(HALF);
    const run = (stage, inputs) => this.#run(stage, inputs);

    const text = await run("text", {
      input_ids: { data: Int32Array.from(ids), shape: [1, tokens] },
      lengths: { data: Int32Array.of(tokens), shape: [1] },
      style: { data: predictorStyle, shape: [1, HALF] },
    });
    const frameCounts = durations(text.duration.data, speed);
    const frames = frameCounts.reduce((a, b) => a + b, 0);
    if (frames > this.limits.frames) throw new FrameLimitError(frames, this.limits.frames);
    const lengths = { data: Int32Array.of(frames), shape: [1] };
    const [, , channels] = text.d.shape; // d: [1, tokens, C]
    const prosody = await run("prosody", {
      en: { data: align(transpose(text.d.data, tokens, channels), channels, frameCounts, frames),
            shape: [1, channels, frames] },
      lengths,
      style: { data: predictorStyle, shape: [1, HALF] },
    });
    const { samples_per_frame: perFrame, harmonics } = this.geometry;
    const source = await run("source", {
      F0: prosody.F0,
      lengths,
      noise: { data: sourceNoise(seed, perFrame * frames, harmonics),
               shape: [1, perFrame * frames, harmonics] },
    });
    const [, textChannels] = text.t_en.shape; // t_en: [1, C, tokens]
    const decoder = await run("decoder", {
      asr: { data: align(text.t_en.data, textChannels, frameCounts, frames),
             shape: [1, textChannels, frames] },
      F0: prosody.F0,
      N: prosody.N,
      lengths,
      style: { data: decoderStyle, shape: [1, HALF] },
      spectrum: source.spectrum,
    });
    return { audio: decoder.audio.data, durations: frameCounts, frames };
  }

  /** Run `stage` on inputs by name; its outputs by name, each checked finite. */
  async #run(stage, inputs) {
    const signature = this.build.manifest.stages[stage].signature;
    const outputs = await this.build.run(stage, signature.inputs.map(([name]) => inputs[name]));
    const named = {};
    signature.outputs.forEach(([name], i) => {
      if (!outputs[i].data.every(Number.isFinite)) {
        throw new Error(`the ${stage} stage returned non-finite values in ${name}: the build is broken`);
      }
      named[name] = outputs[i];
    });
    return named;
  }

  /**
   * Each chunk of `text` as it is spoken: {text, phonemes, ids, words, audio, durations}.
   * A chunk is a sentence (split at words where it needs more tokens or frames than a
   * call takes: the build's limits);
   * words: [{text, start, end, startTime, endTime}], offsets into `text`, times in s.
   */
  async *stream(text, { voice, speed = 1, seed = 0, language } = {}) {
    language ??= languageOf(voice);
    const vocab = this.config.vocab;
    const { words } = await this.phonemize(text, { language, vocab, base: this.build.base });
    const pending = chunkWords(words, this.limits.tokens - 2, vocab);
    while (pending.length) {
      const chunk = pending.shift();
      const phonemes = chunk.map((w) => w.phonemes).join("").trim();
      const ids = phonemesToIds(phonemes, vocab);
      if (ids.length <= 2) continue;
      let spoken;
      try {
        spoken = await this.synthesizeIds(ids, { voice, speed, seed });
      } catch (error) {
        // more frames than a call takes: its halves, between words, as Python's halve does
        if (!(error instanceof FrameLimitError) || chunk.length < 2) throw error;
        pending.unshift(...splitInTwo(chunk, vocab));
        continue;
      }
      yield {
        text: text.slice(chunk[0].start, chunk.at(-1).end),
        phonemes,
        ids,
        words: wordTimes(chunk, spoken.durations, vocab, this.geometry.samples_per_frame / SAMPLE_RATE),
        ...spoken,
      };
    }
  }

  /** The whole of `text`: {audio, chunks}. */
  async generate(text, options = {}) {
    const chunks = [];
    for await (const chunk of this.stream(text, options)) chunks.push(chunk);
    const audio = new Float32Array(chunks.reduce((n, c) => n + c.audio.length, 0));
    let at = 0;
    for (const chunk of chunks) audio.set(chunk.audio, (at += chunk.audio.length) - chunk.audio.length);
    return { audio, chunks };
  }
}

/** A chunk's audio would take more frames than a call of the build takes. */
export class FrameLimitError extends Error {
  constructor(frames, limit) {
    super(`${frames} frames: a call takes at most ${limit}; split the text`);
    Object.assign(this, { frames, limit });
  }
}

/** Words -> two chunks, cut at the word boundary nearest the middle by tokens. */
export function splitInTwo(words, vocab) {
  const size = (ws) => phonemesToIds(ws.map((w) => w.phonemes).join("").trim(), vocab).length - 2;
  const total = size(words);
  let cut = 1;
  for (let c = 2; c < words.length; c++) {
    if (Math.abs(2 * size(words.slice(0, c)) - total) < Math.abs(2 * size(words.slice(0, cut)) - total)) cut = c;
  }
  return [words.slice(0, cut), words.slice(cut)];
}

/** A sentence ends in a word whose phonemes end in . ! or ? (closing quotes aside). */
const SENTENCE_END = /[.!?][\]"”»)]*\s*$/;

/** Words -> chunks of at most `maxTokens` tokens: a sentence each (the first audio comes
 * after the first sentence), a sentence too long split between words. */
export function chunkWords(words, maxTokens, vocab) {
  const tokens = (ws) => phonemesToIds(ws.map((w) => w.phonemes).join("").trim(), vocab).length - 2;
  const chunks = [];
  let sentence = [];
  const flush = () => {
    let chunk = [];
    for (const word of sentence) {
      if (chunk.length && tokens([...chunk, word]) > maxTokens) chunks.push(chunk), (chunk = []);
      if (tokens([word]) > maxTokens) {
        throw new Error(`"${word.text}" alone needs ${tokens([word])} tokens, more than a call takes (${maxTokens})`);
      }
      chunk.push(word);
    }
    if (chunk.length) chunks.push(chunk);
    sentence = [];
  };
  for (const word of words) {
    sentence.push(word);
    if (SENTENCE_END.test(word.phonemes)) flush();
  }
  flush();
  return chunks;
}

/** Each word's time in its chunk's audio, from the durations of its tokens. */
function wordTimes(words, frameCounts, vocab, secondsPerFrame) {
  let token = 1; // after the leading boundary token
  let frame = frameCounts[0];
  const out = [];
  words.forEach((word, i) => {
    // the chunk's phonemes are its words' joined and trimmed: the first word's leading
    // and the last word's trailing spaces are not tokens
    let said = word.phonemes;
    if (i === 0) said = said.trimStart();
    if (i === words.length - 1) said = said.trimEnd();
    const own = phonemesToIds(said, vocab).length - 2;
    const spaces = phonemesToIds(said.match(/\s*$/)[0], vocab).length - 2;
    const start = frame;
    for (let k = 0; k < own; k++) {
      frame += frameCounts[token + k];
      if (k === own - spaces - 1) out.push({ ...word, startTime: start * secondsPerFrame, endTime: frame * secondsPerFrame });
    }
    if (own - spaces <= 0) out.push({ ...word, startTime: start * secondsPerFrame, endTime: start * secondsPerFrame });
    token += own;
  });
  return out;
}

/** [rows, cols] -> [cols, rows]. */
function transpose(data, rows, cols) {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
  return out;
}

/** A voice name's language, as kokoro reads its first letter (a: American, b: British). */
export function languageOf(voice) {
  const first = (voice ?? "a").trim()[0];
  return first === "b" ? "en-gb" : "en-us";
}

/** 16-bit PCM WAV of float32 `audio`, as a Blob. */
export function wavBlob(audio, rate = SAMPLE_RATE) {
  const buffer = new ArrayBuffer(44 + 2 * audio.length);
  const view = new DataView(buffer);
  const text = (at, s) => [...s].forEach((c, i) => view.setUint8(at + i, c.charCodeAt(0)));
  text(0, "RIFF"); view.setUint32(4, 36 + 2 * audio.length, true); text(8, "WAVEfmt ");
  view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, rate, true); view.setUint32(28, 2 * rate, true);
  view.setUint16(32, 2, true); view.setUint16(34, 16, true);
  text(36, "data"); view.setUint32(40, 2 * audio.length, true);
  audio.forEach((v, i) => view.setInt16(44 + 2 * i, Math.max(-1, Math.min(1, v)) * 32767, true));
  return new Blob([buffer], { type: "audio/wav" });
}
