// A WebGPU build's stages in node, on Dawn (npm `webgpu`: Dawn's node bindings), for a
// machine with a GPU and no browser: the same kokoro.js and tvmjs a page runs.
//
//   node webgpu_node.mjs BUILD WEBGPU_PACKAGE
//
// Reads requests from stdin, one JSON line each, and answers each with one JSON line:
//   {"stage": name, "inputs": [{"file", "dtype", "shape"}], "outputs": folder}
//     -> {"outputs": [{"file", "dtype", "shape"}], "seconds": the call, "adapter": ...}
//     or {"error": message}
// The arrays travel as files of their raw bytes (little-endian, C order).
import { readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const [build, webgpuPackage] = process.argv.slice(2);
// stdout carries the answers alone: what tvmjs and Dawn log goes to stderr
const answer = ((write) => (value) => write(`${JSON.stringify(value)}\n`))(
  process.stdout.write.bind(process.stdout));
console.log = console.info = console.warn = console.error;
const require = createRequire(import.meta.url);
const { create, globals } = require(path.resolve(webgpuPackage));
Object.assign(globalThis, globals);
const gpu = create([]);
Object.defineProperty(globalThis, "navigator", {
  value: { gpu, hardwareConcurrency: 1, userAgent: `node ${process.version}` },
  configurable: true,
});
// kokoro.js fetches the build's files by URL: here, files
const networkFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const target = new URL(url);
  if (target.protocol !== "file:") return networkFetch(url, init);
  try {
    return new Response(await readFile(fileURLToPath(target)));
  } catch {
    return new Response(null, { status: 404, statusText: "no such file" });
  }
};
const base = pathToFileURL(path.resolve(build) + path.sep);
// tvmjs.js is a UMD script (the build's package.json makes .js files ES modules there)
const tvmjsModule = { exports: {} };
new Function("module", "exports", "require", "__dirname",
  await readFile(new URL("tvmjs.js", base), "utf8"))(
  tvmjsModule, tvmjsModule.exports, require, fileURLToPath(base));
globalThis.tvmjs = tvmjsModule.exports;
const { loadBuild } = await import(new URL("kokoro.js", base).href);

const TYPES = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array };
let loaded;

async function handle(request) {
  loaded ??= loadBuild(base.href);
  const tvmBuild = await loaded;
  const inputs = await Promise.all(request.inputs.map(async ({ file, dtype, shape }) => {
    const bytes = await readFile(file);
    const Type = TYPES[dtype];
    if (Type === undefined) throw new Error(`input dtype ${dtype} is not supported`);
    // a copy of its own at offset 0: node's Buffer may sit unaligned in a shared pool
    return { data: new Type(new Uint8Array(bytes).buffer), shape };
  }));
  const started = performance.now();
  const outputs = await tvmBuild.run(request.stage, inputs);
  const seconds = (performance.now() - started) / 1000;
  const written = await Promise.all(outputs.map(async (output, i) => {
    const file = path.join(request.outputs, `${request.stage}-${i}.bin`);
    const { data } = output;
    await writeFile(file, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    return { file, dtype: output.dtype, shape: output.shape };
  }));
  const info = tvmBuild.gpu?.adapterInfo ?? {};
  return { outputs: written, seconds, adapter: [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" ") };
}

let queue = Promise.resolve();
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  queue = queue.then(async () => {
    try {
      answer(await handle(JSON.parse(line)));
    } catch (error) {
      answer({ error: String(error?.stack ?? error) });
    }
  });
}).on("close", () => queue.then(() => process.exit(0)));
