// One thread of a wasm stage's pool (kokoro.js startThreads; cpp/web/threads.cc): the
// stage's module instantiated again on its shared memory, given its own stack and
// thread-local storage, then waiting in kx_worker for the tasks of parallel loops.  It
// never returns; the page terminates the worker.  A classic worker: it imports nothing.
//
// Message in: {module, memory, stackTop, tls}.  Out: {ready: true} as it starts waiting,
// or {error} if it cannot start or traps (the launch waiting for it then fails).

self.onmessage = ({ data: { module, memory, stackTop, tls } }) => {
  let exports;
  try {
    // the thread loop calls no import: any call is a fault, reported as such
    const imports = {};
    for (const { module: space, name, kind } of WebAssembly.Module.imports(module)) {
      imports[space] ??= {};
      if (kind === "memory") imports[space][name] = memory;
      else if (name === "emscripten_notify_memory_growth" || name === "__cxa_thread_atexit") {
        imports[space][name] = () => 0;
      } else {
        imports[space][name] = () => {
          throw new Error(`${space}.${name} called on a wasm thread`);
        };
      }
    }
    // no _initialize: the page's instance ran the static constructors on this memory
    exports = new WebAssembly.Instance(module, imports).exports;
    exports.stackRestore(stackTop);
    exports.kx_thread_init(tls);
  } catch (error) {
    self.postMessage({ error: `could not start: ${error?.message ?? error}` });
    return;
  }
  self.postMessage({ ready: true });
  try {
    exports.kx_worker();
  } catch (error) {
    exports.kx_worker_failed();
    self.postMessage({ error: `trapped: ${error?.message ?? error}` });
  }
};
