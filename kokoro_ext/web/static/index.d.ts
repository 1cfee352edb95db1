// Types of the package's public API (tts.js and the modules it re-exports from), checked
// by `tsc --noEmit` (tests/test_web_package.py).  Audio is float32 mono at SAMPLE_RATE.

/** Samples per second of the audio. */
export declare const SAMPLE_RATE: 24000;

/** A language text.js reads. */
export type Language = "en-us" | "en-gb";

/** A word of the text: offsets into it, and the phonemes said for it. */
export interface Word {
  text: string;
  start: number;
  end: number;
  phonemes: string;
}

/** A word a chunk reports (a written stretch: "$16.50" once) and when it is said, in
 * seconds from the chunk's start; start and end are offsets into the text (null: text
 * the front end added). */
export interface TimedWord {
  text: string;
  start: number | null;
  end: number | null;
  startTime: number;
  endTime: number;
}

/** What a call speaks with. */
export interface SpeakOptions {
  /** A voice of `listVoices()`, a blend ("af_bella(2)+af_sky(1)"), or the build's own. */
  voice?: string;
  /** 1 is the model's pace; 2 twice as fast. */
  speed?: number;
  /** The harmonic source's noise (torch.manual_seed). */
  seed?: number;
  /** Default: the voice's first letter ("b": en-gb, else en-us). */
  language?: Language;
}

/** One chunk of speech, as it is ready. */
export interface Chunk {
  /** The text it says: a stretch of the text given. */
  text: string;
  phonemes: string;
  ids: Int32Array;
  words: TimedWord[];
  audio: Float32Array;
  /** Frames per token. */
  durations: Int32Array;
  frames: number;
  /** Seconds of silence before it: after a sentence 0.3, a clause 0.15, ...; 0 first. */
  pause: number;
}

export interface Generated {
  audio: Float32Array;
  chunks: Chunk[];
}

/** The most a call of the build takes (the manifest's limits). */
export interface Limits {
  tokens: number;
  frames: number;
}

/** A word chunks may be cut after: its text as read (with the whitespace after it), its
 * phonemes, and the stretch of the original text it comes from (null: added text). */
export interface Group {
  text: string;
  phonemes: string;
  start: number | null;
  end: number | null;
}

/** A front end: text -> its words with their phonemes (default: text.js's); `groups`,
 * where given, are what chunks are cut between (else `words`). */
export type Phonemize = (
  text: string,
  options: { language: Language; vocab: Record<string, number>; base: URL },
) => Promise<{ words: Word[]; groups?: Group[] }>;

export interface LoadOptions {
  log?: (message: string) => void;
  phonemize?: Phonemize;
  /** The most threads a wasm build's stages run on (default: navigator.hardwareConcurrency;
   * one where the page is not cross-origin isolated). */
  threads?: number;
  /** A wasm build's stages' environment ("NAME=VALUE"): a kernel's setting to try. */
  env?: string[];
}

export interface WorkerOptions {
  /** The synthesis in a Web Worker (worker.js): the page's thread only posts messages. */
  worker: true;
  /** The URL of tvmjs.js the worker loads (default: the one beside tts.js, else a build's). */
  tvmjs?: string;
  /** As LoadOptions.threads. */
  threads?: number;
}

/** Text to speak: all of it, or its pieces as they come (an LLM's reply). */
export type Text = string | AsyncIterable<string>;

/** What both KokoroTTS and its worker give: speech of text, and the voices. */
export interface Speaker {
  readonly device: "webgpu" | "wasm";
  readonly limits: Limits;
  /** The builds passed over for this one, and why. */
  readonly skipped: { base: string; reason: string }[];
  /** The WebGPU adapter, or null (a wasm build). */
  readonly adapterInfo: { vendor?: string; architecture?: string } | null;
  /** The voices the build ships, by name. */
  listVoices(): Promise<string[]>;
  /** Each chunk of `text` as it is spoken (a sentence, or part of a long one); pieces
   * of an async iterable are spoken sentence by sentence as they complete. */
  stream(text: Text, options?: SpeakOptions): AsyncGenerator<Chunk, void, undefined>;
  /** All of `text`: its audio joined (with the chunks' pauses), and the chunks. */
  generate(text: Text, options?: SpeakOptions): Promise<Generated>;
}

/** A loaded build (kokoro.js's Build), as much of it as a page reads. */
export interface Build {
  readonly base: URL;
  readonly device: "webgpu" | "wasm";
  /** The threads each stage runs on, at most (a wasm build's; 1 for WebGPU). */
  readonly threads: number;
  /** The builds loadBuild passed over, and why. */
  readonly skipped: { base: string; reason: string }[];
  readonly gpu: { adapterInfo?: { vendor?: string; architecture?: string } } | null;
  readonly manifest: { limits: Limits; [key: string]: unknown };
}

export declare class KokoroTTS implements Speaker {
  /**
   * Load the build at `base` (a folder's URL), or the first of a list of folders that
   * runs in this browser (["webgpu/", "wasm/"]).  In the page, load the build's
   * `tvmjs.js` first, as a classic script; with `worker: true` the worker loads it.
   */
  static load(base?: string | string[], options?: LoadOptions): Promise<KokoroTTS>;
  static load(base: string | string[], options: WorkerOptions): Promise<KokoroWorker>;
  readonly build: Build;
  readonly device: "webgpu" | "wasm";
  readonly limits: Limits;
  readonly skipped: { base: string; reason: string }[];
  readonly adapterInfo: { vendor?: string; architecture?: string } | null;
  listVoices(): Promise<string[]>;
  stream(text: Text, options?: SpeakOptions): AsyncGenerator<Chunk, void, undefined>;
  generate(text: Text, options?: SpeakOptions): Promise<Generated>;
  /** A voice's pack (510 x 256 float32): a name, a blend, or the build's own. */
  voice(spec?: string): Promise<Float32Array>;
  /** Token ids (kokoro's boundary 0 at both ends) -> audio, through the four stages. */
  synthesizeIds(
    ids: ArrayLike<number>,
    options?: Omit<SpeakOptions, "language">,
  ): Promise<{ audio: Float32Array; durations: Int32Array; frames: number }>;
}

/** A KokoroTTS in a Web Worker: the same methods; chunks' audio comes back transferred. */
export declare class KokoroWorker implements Speaker {
  static start(base?: string | string[], options?: { tvmjs?: string }): Promise<KokoroWorker>;
  readonly base: URL;
  readonly device: "webgpu" | "wasm";
  readonly limits: Limits;
  readonly skipped: { base: string; reason: string }[];
  readonly adapterInfo: { vendor?: string; architecture?: string } | null;
  listVoices(): Promise<string[]>;
  stream(text: Text, options?: SpeakOptions): AsyncGenerator<Chunk, void, undefined>;
  generate(text: Text, options?: SpeakOptions): Promise<Generated>;
  /** Stop the worker. */
  terminate(): void;
}

/** Where a text still arriving has its complete sentences: the offset after the last
 * sentence end and the whitespace after it (0: none yet). */
export declare function sentenceEnd(text: string): number;

/** A chunk needs more frames than a call of the build takes. */
export declare class FrameLimitError extends Error {
  readonly frames: number;
  readonly limit: number;
}

/** "af_bella(2)+af_sky(1)" -> [["af_bella", 2/3], ["af_sky", 1/3]]: weights summing to 1. */
export declare function parseBlend(spec: string): [string, number][];
/** A voice name's language, by its first letter. */
export declare function languageOf(voice?: string): Language;
/** 16-bit PCM WAV of `audio`. */
export declare function wavBlob(audio: Float32Array, rate?: number): Blob;

/** The chunks' audio joined, each after its `pause` of silence. */
export declare function joinChunks(chunks: Pick<Chunk, "audio" | "pause">[]): Float32Array;
/** The weighted mean of voice packs, summed in float64 and rounded once. */
export declare function mixVoices(parts: [Float32Array, number][]): Float32Array;
/** Most voices in one blend. */
export declare const MAX_BLEND: 16;

/** How a chunk ends, which sets the pause after it. */
export type Break = "paragraph" | "sentence" | "clause" | "word" | "phoneme";
/** Seconds of silence after a chunk that ends with each break. */
export declare const PAUSES: Readonly<Record<Break, number>>;
/** A chunk's words and how it ends. */
export interface Piece {
  words: Group[];
  end: Break;
}
/** Words -> the chunks the Python Synthesizer makes of them: sentences (ends read in
 * `text`, the original), each packed evenly in at most `limit` phonemes. */
export declare function chunkWords(words: Group[], limit: number, text?: string): Piece[];
/** A chunk halved at the word boundary nearest its middle; null for a single phoneme. */
export declare function splitInTwo(piece: Piece): [Piece, Piece] | null;
/** The words a chunk reports and their times in its audio, from its durations. */
export declare function wordTimes(
  words: Group[],
  durations: ArrayLike<number>,
  vocab: Record<string, number>,
  secondsPerFrame: number,
  reported?: { original: string; last: [number, number] | null; glued: ([number, number] | null)[] } | null,
  lead?: number,
): TimedWord[];
