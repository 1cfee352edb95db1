// Text to speech in the browser with a `--target webgpu` or `wasm` build: kokoro.js runs
// the stages, host.js the steps between them, a front end turns text into phonemes
// (text.js), chunking.js cuts it into chunks and times the words as the Python runtime
// does; with `worker: true` all of it runs in a Web Worker (worker.js).
//
//   const tts = await KokoroTTS.load("./");
//   const { audio } = await tts.generate("Hello world.", { voice: "af_heart" });
//   for await (const chunk of tts.stream(longText)) play(chunk.audio, chunk.pause);
//
// Audio is float32 at 24 kHz.  The build's folder holds the stages, `config.json` (the
// vocabulary), `voice.npy` (the build's default voice) and `voices/<name>.bin` (the voice
// packs a build found fetched: kokoro-js's format, raw float32 [510, 1, 256]).

import { loadBuild } from "./kokoro.js";
import { align, durations, sourceNoise, STYLE_WIDTH, voiceStyle } from "./host.js";
import { phonemesToIds, phonemize as textPhonemize } from "./text.js";
import { chunkWords, isAbbreviation, PAUSES, piecePhonemes, reportedWords, speakable, splitInTwo,
  unsaid, wordTimes } from "./chunking.js";

export { chunkWords, PAUSES, splitInTwo, wordTimes };

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

/** Most voices in one blend (voices.MAX_BLEND). */
export const MAX_BLEND = 16;
const VOICE_NAME = /^[a-z]{2}_[a-z0-9]+$/;
// one part of a blend: a name, then optionally a weight in parentheses (voices._PART)
const PART = /^(?<name>[^()+-]*?)\s*(?:\((?<weight>[^()]*)\))?$/;
// a number as Python's float() reads one (digits may be grouped by _), not inf or nan
const DECIMAL = /^[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?$/;
const LANGUAGE_NAMES = { a: "American English", b: "British English", e: "Spanish", f: "French",
  h: "Hindi", i: "Italian", j: "Japanese", p: "Brazilian Portuguese", z: "Mandarin Chinese" };

/** A voice name's language code (its first letter, for <code><f|m>_name), or null. */
function voiceLanguage(name) {
  if (name.length < 3 || name[2] !== "_" || !"fm".includes(name[1])) return null;
  return Object.hasOwn(LANGUAGE_NAMES, name[0].toLowerCase()) ? name[0].toLowerCase() : null;
}

/** Math.fsum's exactly rounded sum (Shewchuk's partials). */
function fsum(values) {
  const partials = [];
  for (let x of values) {
    let i = 0;
    for (let y of partials) {
      if (Math.abs(x) < Math.abs(y)) [x, y] = [y, x];
      const high = x + y, low = y - (high - x);
      if (low) partials[i++] = low;
      x = high;
    }
    partials.length = i;
    partials.push(x);
  }
  let n = partials.length, high = 0;
  if (n) {
    high = partials[--n];
    let low = 0;
    while (n > 0) {
      const x = high, y = partials[--n];
      high = x + y;
      low = y - (high - x);
      if (low) break;
    }
    // half-way cases: round as the partials below say
    if (n > 0 && ((low < 0 && partials[n - 1] < 0) || (low > 0 && partials[n - 1] > 0))) {
      const y = low * 2, x = high + y;
      if (y === x - high) high = x;
    }
  }
  return high;
}

/** `spec` cut at each + and - outside parentheses: [sign, text] of each part (voices._terms). */
function terms(spec) {
  const out = [];
  let sign = 1, start = 0, depth = 0;
  for (let i = 0; i < spec.length; i++) { // the marks are ASCII: UTF-16 indices do
    const char = spec[i];
    if (char === "(") depth += 1;
    else if (char === ")") depth = Math.max(depth - 1, 0);
    else if ((char === "+" || char === "-") && depth === 0) {
      out.push([sign, spec.slice(start, i)]);
      [sign, start] = [char === "+" ? 1 : -1, i + 1];
    }
  }
  out.push([sign, spec.slice(start)]);
  return out;
}

/** "af_bella(2)+af_sky(1)", "af_bella+af_sky", "af_bella-af_sky" or "af_heart" -> [[name,
 * weight]] as kokoro_ext.run.voices.parse_blend reads it (Kokoro-FastAPI's syntax): the
 * weights divided by their sum, a voice after - subtracted (its weight negative); an Error
 * for an empty or unreadable part, a name that is not a voice name, a weight that is not
 * a positive number, more than MAX_BLEND voices, or voices of different languages. */
export function parseBlend(spec) {
  const show = (value) => JSON.stringify(value);
  const pieces = terms(spec);
  if (pieces.length > MAX_BLEND) throw new Error(`voice blend ${show(spec)} has ${pieces.length} voices; at most ${MAX_BLEND}`);
  const found = pieces.map(([sign, piece]) => {
    const match = PART.exec(piece.trim());
    if (match === null || !match.groups.name) {
      const what = piece.trim() ? `the part ${show(piece.trim())}` : "an empty part";
      throw new Error(`cannot read ${what} of voice blend ${show(spec)}: write voices as ` +
        "af_bella+af_sky, with weights as af_bella(2)+af_sky(1), or subtract one as af_bella-af_sky");
    }
    const { name, weight: text } = match.groups;
    const weight = text === undefined ? 1
      : DECIMAL.test(text.trim()) ? Number(text.trim().replaceAll("_", "")) : NaN;
    if (!(Number.isFinite(weight) && weight > 0)) {
      throw new Error(`the weight of ${show(name)} in voice blend ${show(spec)} must be a positive number, got ${show(text.trim())}`);
    }
    if (!VOICE_NAME.test(name)) {
      throw new Error(`unknown voice ${show(name)}: a voice is named like af_heart` +
        (pieces.length > 1 ? ` (in the voice blend ${show(spec)})` : ""));
    }
    return [name, weight, sign];
  });
  let first = null;
  for (const [name] of found) {
    const code = voiceLanguage(name);
    if (code === null) continue;
    if (first === null) first = [name, code];
    else if (code !== first[1]) {
      throw new Error(`voice blend ${show(spec)} mixes languages: ${first[0]} is ` +
        `${LANGUAGE_NAMES[first[1]]}, ${name} is ${LANGUAGE_NAMES[code]}; the language picks ` +
        "how the text is read, so a blend's voices must share it");
    }
  }
  // scaled by the largest first: sums stay finite
  const top = Math.max(...found.map(([, weight]) => weight));
  const total = fsum(found.map(([, weight]) => weight / top));
  return found.map(([name, weight, sign]) => [name, sign * weight / top / total]);
}

/** The weighted sum of [pack, weight] pairs, summed in float64 and rounded once
 * (voices.mix); a single voice's pack as it is. */
export function mixVoices(parts) {
  if (parts.length === 1) return parts[0][0];
  const total = new Float64Array(parts[0][0].length);
  for (const [pack, weight] of parts) pack.forEach((v, i) => (total[i] += v * weight));
  return Float32Array.from(total);
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
   * {words, groups} is the front end (default: text.js's).  `worker: true`: the synthesis
   * in a Web Worker (worker.js), behind the same methods (a KokoroWorker); `tvmjs` is the
   * URL of tvmjs.js it loads (default: the one beside this module, else a build's).
   * `threads`, `env`: the most threads a wasm build's stages run on, their environment
   * (kokoro.js's loadBuild).
   */
  static async load(base = "./", { log = () => {}, phonemize = textPhonemize, worker = false, tvmjs, threads, env } = {}) {
    if (worker) {
      if (phonemize !== textPhonemize) throw new Error("a worker runs text.js's front end: no phonemize option");
      return KokoroWorker.start(base, { tvmjs, threads });
    }
    const build = await loadBuild(base, { log, threads, env }); // a list: the first build that runs here
    const response = await fetch(new URL("config.json", build.base));
    if (!response.ok) throw new Error(`config.json: HTTP ${response.status}`);
    return new KokoroTTS(build, await response.json(), phonemize);
  }

  async #fetch(file) {
    const response = await fetch(new URL(file, this.build.base));
    if (!response.ok) throw new Error(`${file}: HTTP ${response.status}`);
    return response.arrayBuffer();
  }

  /** The builds loadBuild passed over, and why ([{base, reason}]). */
  get skipped() {
    return this.build.skipped;
  }

  /** The WebGPU adapter's {vendor, architecture}, or null (a wasm build). */
  get adapterInfo() {
    const info = this.build.gpu?.adapterInfo;
    return info ? { vendor: info.vendor, architecture: info.architecture } : null;
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
    return mixVoices(parts);
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
   * Each chunk of `text` as it is spoken: {text, phonemes, ids, words, audio, durations,
   * frames, pause}.  Chunks are the Python Synthesizer's: sentences, packed evenly within
   * the build's token limit, a chunk past its frame limit halved between words; each
   * chunk's seed is `seed` plus its index, and `pause` the seconds of silence before it
   * (after a sentence 0.3, a clause 0.15, ...; 0 before the first).
   * words: [{text, start, end, startTime, endTime}], offsets into `text`, times in
   * seconds of the chunk's audio.
   * `text` may also be an async iterable of strings (an LLM's reply as it comes): each
   * sentence is spoken once it is complete (its end mark and the space after it have
   * come: sentenceEnd), the rest when the iterable ends; offsets are into the text so far.
   */
  async *stream(text, { voice, speed = 1, seed = 0, language } = {}) {
    language ??= languageOf(voice);
    const said = { index: 0, previous: null, offset: 0 }; // across a stream's pieces
    if (typeof text === "string") {
      yield* this.#speak(text, { voice, speed, seed, language }, said);
    } else {
      let pending = "";
      for await (const piece of text) {
        pending += piece;
        const cut = sentenceEnd(pending);
        if (cut === 0) continue;
        yield* this.#speak(pending.slice(0, cut), { voice, speed, seed, language }, said);
        said.offset += cut;
        pending = pending.slice(cut);
      }
      if (pending.trim()) yield* this.#speak(pending, { voice, speed, seed, language }, said);
    }
    if (said.index === 0) {
      throw new Error(`nothing to say in ${typeof text === "string" ? JSON.stringify(text.slice(0, 60)) : "the text"}: ` +
        "it has no words, only punctuation or symbols without a pronunciation");
    }
  }

  async *#speak(text, { voice, speed, seed, language }, said) {
    if (!text.trim()) return;
    const vocab = this.config.vocab;
    // the words chunks are cut between (a front end without them: its words)
    const { groups, words } = await this.phonemize(text, { language, vocab, base: this.build.base });
    const pending = chunkWords(groups ?? words, this.limits.tokens - 2, text);
    const reported = reportedWords(text);
    const secondsPerFrame = this.geometry.samples_per_frame / SAMPLE_RATE;
    const shift = (at) => (at === null || at === undefined ? at : at + said.offset);
    while (pending.length) {
      const piece = pending.shift();
      if (!speakable(piece, vocab)) {
        unsaid(reported, piece.words);
        continue;
      }
      const phonemes = piecePhonemes(piece);
      const ids = phonemesToIds(phonemes, vocab);
      let spoken;
      try {
        spoken = await this.synthesizeIds(ids, { voice, speed, seed: seed + said.index });
      } catch (error) {
        // more frames than a call takes: its halves, as the Python side halves it
        const halves = error instanceof FrameLimitError ? splitInTwo(piece) : null;
        if (halves === null) throw error;
        pending.unshift(...halves);
        continue;
      }
      const pause = said.previous === null ? 0 : PAUSES[said.previous];
      said.previous = piece.end;
      said.index += 1;
      const timed = wordTimes(piece.words, spoken.durations, vocab, secondsPerFrame, reported);
      yield {
        text: piece.words.map((w) => w.text).join("").trim(),
        phonemes,
        ids,
        words: timed.map((w) => ({ ...w, start: shift(w.start), end: shift(w.end) })),
        pause,
        ...spoken,
      };
    }
  }

  /** The whole of `text`: {audio, chunks}, the chunks' audio joined with their pauses. */
  async generate(text, options = {}) {
    const chunks = [];
    for await (const chunk of this.stream(text, options)) chunks.push(chunk);
    return { audio: joinChunks(chunks), chunks };
  }
}

/** Where a text that is still arriving has its complete sentences: the offset after the
 * last sentence end (. ! ? or …, closing quotes, then whitespace; not after "Dr." or a
 * single letter) or line break and the whitespace after it; 0 if none yet. */
export function sentenceEnd(text) {
  let cut = 0;
  for (const match of text.matchAll(/[.!?…]+[)"'”’\]]*\s+|\n\s*/gu)) {
    const before = text.slice(0, match.index + 1);
    if (match[0][0] === "." && isAbbreviation(before)) continue;
    cut = match.index + match[0].length;
  }
  return cut;
}

/** The synthesis of a KokoroTTS in a Web Worker (worker.js), behind the same methods:
 * `KokoroTTS.load(base, { worker: true })`.  The main thread posts messages and gets each
 * chunk's audio as a transferred Float32Array. */
export class KokoroWorker {
  #worker;
  #next = 0;
  #pending = new Map(); // id -> {resolve, reject} of a call, or a stream's {push}

  constructor(worker) {
    this.#worker = worker;
    worker.onmessage = ({ data }) => this.#pending.get(data.id)?.(data);
    worker.onerror = (event) => {
      const error = new Error(`the worker failed: ${event.message ?? event}`);
      for (const settle of this.#pending.values()) settle({ error: error.message });
    };
  }

  /** A worker with the build at `base` loaded (KokoroTTS.load's `base`). */
  static async start(base = "./", { tvmjs, threads } = {}) {
    const here = globalThis.location?.href;
    const bases = (Array.isArray(base) ? base : [base]).map((b) => new URL(b, here).href);
    const worker = new KokoroWorker(new Worker(new URL("./worker.js", import.meta.url)));
    // tvmjs: the one given, else the one beside this module (a build's folder), else a build's
    const scripts = tvmjs ? [new URL(tvmjs, here).href]
      : [...new Set([new URL("tvmjs.js", import.meta.url).href, ...bases.map((b) => new URL("tvmjs.js", b).href)])];
    const loaded = await worker.#call({ op: "load", base: Array.isArray(base) ? bases : bases[0],
      tvmjs: scripts, threads });
    // the builds passed over, named as the caller named them
    const named = new Map(bases.map((b, i) => [b, Array.isArray(base) ? base[i] : base]));
    const skipped = loaded.skipped.map((s) => ({ ...s, base: named.get(s.base) ?? s.base }));
    Object.assign(worker, loaded, { skipped, base: new URL(loaded.base) });
    return worker;
  }

  #call(message) {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, (data) => {
        this.#pending.delete(id);
        if ("error" in data) reject(new Error(data.error));
        else resolve(data.result);
      });
      this.#worker.postMessage({ id, ...message });
    });
  }

  /** The voices the build ships, by name. */
  listVoices() {
    return this.#call({ op: "voices" });
  }

  /** As KokoroTTS.stream: each chunk as the worker has it; `text` a string or an async
   * iterable of strings, whose pieces are posted to the worker as they come. */
  async *stream(text, options = {}) {
    const id = this.#next++;
    const queue = [];
    let wake = null;
    this.#pending.set(id, (data) => {
      queue.push(data);
      wake?.();
    });
    const pieces = typeof text === "string" ? null : text;
    this.#worker.postMessage({ id, op: "stream", text: pieces ? undefined : text, options });
    let finished = false, feeding = null;
    if (pieces) {
      feeding = (async () => {
        for await (const piece of pieces) {
          if (finished) return;
          this.#worker.postMessage({ id, op: "piece", text: String(piece) });
        }
        this.#worker.postMessage({ id, op: "end" });
      })().catch((error) => queue.push({ error: `the text failed: ${error.message ?? error}` }));
    }
    try {
      for (;;) {
        while (queue.length) {
          const data = queue.shift();
          if ("error" in data) throw new Error(data.error);
          if (data.done) return;
          yield data.chunk;
        }
        await new Promise((resolve) => (wake = resolve));
      }
    } finally {
      finished = true;
      this.#pending.delete(id);
      this.#worker.postMessage({ id, op: "cancel" });
      await feeding;
    }
  }

  /** As KokoroTTS.generate. */
  async generate(text, options = {}) {
    const chunks = [];
    for await (const chunk of this.stream(text, options)) chunks.push(chunk);
    return { audio: joinChunks(chunks), chunks };
  }

  /** Stop the worker. */
  terminate() {
    this.#worker.terminate();
  }
}

/** The chunks' audio, each after its pause's silence (synthesizer.join). */
export function joinChunks(chunks) {
  const gaps = chunks.map((c) => Math.round(c.pause * SAMPLE_RATE));
  const audio = new Float32Array(chunks.reduce((n, c, i) => n + gaps[i] + c.audio.length, 0));
  let at = 0;
  chunks.forEach((c, i) => {
    audio.set(c.audio, (at += gaps[i]));
    at += c.audio.length;
  });
  return audio;
}

/** A chunk's audio would take more frames than a call of the build takes. */
export class FrameLimitError extends Error {
  constructor(frames, limit) {
    super(`${frames} frames: a call takes at most ${limit}; split the text`);
    Object.assign(this, { frames, limit });
  }
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
