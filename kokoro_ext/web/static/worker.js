// The synthesis of `KokoroTTS.load(base, { worker: true })`, in a Web Worker: the page's
// main thread only posts messages, and each chunk's audio comes back as a transferred
// Float32Array.  A classic worker: tvmjs (a UMD script) comes in by importScripts, the
// ES modules by import().
//
// Messages in: {id, op: "load", base, tvmjs: [URLs to try], threads?} | {id, op: "voices"} |
//   {id, op: "stream", text?, options} (no text: pieces follow as {id, op: "piece", text}
//   then {id, op: "end"}) | {id, op: "cancel"}.
// Messages out: {id, result} | {id, chunk} | {id, done: true} | {id, error}.

let tts = null;
const streams = new Map(); // id -> {pieces: queue of strings or null (the end), wake, cancelled}

const reply = (message, transfer = []) => self.postMessage(message, transfer);

/** The text pieces of stream `id` as they arrive. */
async function* pieces(id) {
  const state = streams.get(id);
  for (;;) {
    while (state.pieces.length) {
      const piece = state.pieces.shift();
      if (piece === null) return;
      yield piece;
    }
    await new Promise((wake) => (state.wake = wake));
  }
}

async function speak({ id, text, options }) {
  const state = { pieces: [], wake: null, cancelled: false };
  streams.set(id, state);
  try {
    for await (const chunk of tts.stream(text ?? pieces(id), options)) {
      if (state.cancelled) break;
      reply({ id, chunk }, [chunk.audio.buffer]);
    }
    reply({ id, done: true });
  } finally {
    streams.delete(id);
  }
}

async function handle(message) {
  const { id, op } = message;
  if (op === "load") {
    // the first of the candidate tvmjs.js that loads (every build ships the same one)
    const failed = [];
    for (const url of message.tvmjs) {
      try {
        importScripts(url);
        break;
      } catch (error) {
        failed.push(error.message);
      }
    }
    if (failed.length === message.tvmjs.length) throw new Error(`no tvmjs.js loads: ${failed.join("; ")}`);
    const { KokoroTTS } = await import("./tts.js");
    tts = await KokoroTTS.load(message.base, { threads: message.threads });
    const { device, limits, skipped, adapterInfo } = tts;
    return reply({ id, result: { device, limits, skipped, adapterInfo, base: tts.build.base.href } });
  }
  if (op === "voices") return reply({ id, result: await tts.listVoices() });
  if (op === "stream") return speak(message);
  const state = streams.get(id);
  if (state === undefined) return undefined;
  if (op === "piece") state.pieces.push(message.text);
  else if (op === "end") state.pieces.push(null);
  else if (op === "cancel") state.cancelled = true, state.pieces.push(null);
  state.wake?.();
  return undefined;
}

self.onmessage = ({ data }) => {
  handle(data).catch((error) => reply({ id: data.id, error: String(error?.message ?? error) }));
};
