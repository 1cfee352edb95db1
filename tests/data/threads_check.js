// Runs tests/data/threads_check.cc's stress in node: the module instantiated as kokoro.js
// instantiates a wasm stage (shared memory, kx_main_thread, _initialize), and its
// threads as kokoro.js starts them, each in a node worker running wasm-thread.js itself
// (through a shim of the Web Worker API).  Prints a JSON line of the results.
//   node threads_check.js MODULE.wasm WASM_THREAD_JS THREADS LAUNCHES TASKS
const { Worker, isMainThread, parentPort, workerData } = require("worker_threads");
const fs = require("fs");

if (!isMainThread) {
  // wasm-thread.js as a Web Worker sees it
  globalThis.self = {
    postMessage: (message) => parentPort.postMessage(message),
    set onmessage(handler) {
      parentPort.on("message", (data) => handler({ data }));
    },
  };
  eval(fs.readFileSync(workerData.script, "utf8"));
} else {
  const [file, script, threads, launches, tasks] = process.argv.slice(2);
  const module = new WebAssembly.Module(fs.readFileSync(file));
  const memory = new WebAssembly.Memory({ initial: 2560, maximum: 32768, shared: true });
  let exports;
  const env = {
    memory,
    __emscripten_init_main_thread_js: (self) => exports.kx_main_thread(self),
    emscripten_check_blocking_allowed: () => {},
    emscripten_notify_memory_growth: () => {},
    __cxa_thread_atexit: () => 0,
  };
  const imports = { env, wasi_snapshot_preview1: {} };
  for (const { module: space, name, kind } of WebAssembly.Module.imports(module)) {
    if (kind === "function" && imports[space][name] === undefined) {
      imports[space][name] = () => { throw new Error(`${space}.${name} called`); };
    }
  }
  exports = new WebAssembly.Instance(module, imports).exports;
  exports._initialize();
  const started = [];
  for (let i = 0; i < Number(threads) - 1; i++) {
    const stack = exports.kx_alloc(1 << 20, 16), tls = exports.kx_alloc(Math.max(exports.kx_tls_size(), 1), Math.max(exports.kx_tls_align(), 4));
    const worker = new Worker(__filename, { workerData: { script } });
    started.push(new Promise((resolve, reject) => {
      worker.on("message", (m) => (m.ready ? resolve() : reject(new Error(m.error))));
      worker.on("error", reject);
    }));
    worker.postMessage({ module, memory, stackTop: stack + (1 << 20), tls });
  }
  Promise.all(started).then(async () => {
    while (exports.kx_threads() < Number(threads)) await new Promise((wake) => setTimeout(wake, 5));
    const errors = exports.stress(Number(launches), Number(tasks));
    console.log(JSON.stringify({ errors, threads: exports.kx_threads(), seen: exports.seen_threads(),
      tasks: exports.last_tasks() }));
    process.exit(0);
  });
}
