// Kokoro's compiled stages in the browser: a build of `python -m kokoro_ext.build
// --target webgpu` (or `--target wasm`: the stages on the CPU, for browsers without
// WebGPU), loaded with tvmjs (TVM's JavaScript runtime, `tvmjs.js` beside the build,
// loaded first as a classic script: it defines the global `tvmjs`).
//
//   const build = await loadBuild("./");          // the build's folder, as a URL
//   const [F0, N] = await build.run("prosody", [en, lengths, style]);
//
// A site offering both builds passes their folders in order of preference:
// `loadBuild(["webgpu/", "wasm/"])` loads the first this browser can run;
// `build.device` says which ("webgpu" or "wasm"), `build.skipped` why the others not.
//
// A tensor is {data: Float32Array | Int32Array, shape: number[]}.  The four stages are
// one WebAssembly module (their host code, each stage's symbols under its prefix, and
// TVM's web runtime), run by one tvmjs instance on one GPUDevice.  A stage's weights
// are fetched once (the large ones as float16: decodeWeights widens them), uploaded to
// the GPU once, and passed to its `main` after the inputs, in the order the manifest lists.
// A wasm build's stages run on tvm.cpu(), in the module's WebAssembly memory; its token
// ids and lengths are int64, and an Int32Array given for them is widened.  That memory
// is shared: where the page is cross-origin isolated, the stages run on a pool of
// threads, the module instantiated again in Web Workers (wasm-thread.js) on the same
// memory (cpp/web/threads.cc); `loadBuild(base, {threads})` sizes the pool (default:
// navigator.hardwareConcurrency), `build.threads` says what it got.  Its int8
// weights (--weight-dtype auto: the checkpoint's int8 codes, with float32 scales beside
// them) stay int8 there: the kernels dequantize them as they read them.

const DTYPES = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array, int8: Int8Array };
const CPU_DEVICE = 1;  // the host device: DLPack's kDLCPU

/** float32 of each float16 bit pattern (all exact). */
let HALF;
function halfTable() {
  if (HALF) return HALF;
  HALF = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 31, frac = h & 1023;
    HALF[h] = sign * (exp === 0 ? frac * 2 ** -24
      : exp === 31 ? (frac ? NaN : Infinity) : (1 + frac / 1024) * 2 ** (exp - 15));
  }
  return HALF;
}

/** The arrays of a stage's weights file (`buffer`, an ArrayBuffer) as typed arrays of
 * their manifest entries' dtypes, those on a wire format widened to float32 as
 * kokoro_ext.run.wire decodes them: float16 exactly, int8 as the float32 product of the
 * code and its row's scale (exact in a double, then rounded once to float32). */
export function decodeWeights(buffer, tensors, file = "weights") {
  return tensors.map((tensor, i) => decodeWeight(buffer, tensor, i, file));
}

/** Tensor `i` of decodeWeights. */
function decodeWeight(buffer, [shape, dtype, offset, wire], i, file) {
  const Type = DTYPES[dtype];
  if (Type === undefined) throw new Error(`${file}: dtype ${dtype} is not supported`);
  const count = shape.reduce((a, b) => a * b, 1);
  if (wire === undefined) return new Type(buffer, offset, count);
  if (dtype !== "float32") throw new Error(`${file}: tensor ${i} of ${dtype} on a wire format`);
  const out = new Float32Array(count);
  if (wire.dtype === "float16") {
    const half = halfTable(), bits = new Uint16Array(buffer, offset, count);
    for (let k = 0; k < count; k++) out[k] = half[bits[k]];
  } else if (wire.dtype === "int8" && Number.isInteger(wire.scales)) {
    const codes = new Int8Array(buffer, offset, count);
    const scales = new Float32Array(buffer, wire.scales, shape[0]);
    const row = count / shape[0];
    for (let r = 0, k = 0; r < shape[0]; r++) {
      const scale = scales[r];
      for (let end = k + row; k < end; k++) out[k] = codes[k] * scale;
    }
  } else {
    throw new Error(`${file}: tensor ${i} is stored as ${JSON.stringify(wire)}, a wire ` +
      "format this page does not decode (float16, int8 with scales): the build is newer " +
      "than this kokoro.js; serve the kokoro.js the build wrote");
  }
  return out;
}

/** "webgpu", "wasm" (llvm for wasm32: the CPU in the browser) or undefined. */
function deviceOf(manifest) {
  const target = manifest.target ?? {};
  if (target.kind === "webgpu") return "webgpu";
  if (target.kind === "llvm" && target.mtriple?.startsWith("wasm32")) return "wasm";
  return undefined;
}

/** The build's manifest, checked for what this module can run. */
async function fetchManifest(base) {
  const response = await fetch(new URL("manifest.json", base));
  if (!response.ok) throw new Error(`${base}manifest.json: HTTP ${response.status}`);
  const manifest = await response.json();
  if (deviceOf(manifest) === undefined) {
    throw new Error(`this build is for ${manifest.target?.kind} ` +
      `${manifest.target?.mtriple ?? ""}: a browser runs a --target webgpu or wasm build`);
  }
  return manifest;
}

/** The GPUDevice with the limits the build records, or an Error saying why not. */
async function gpuDevice(manifest) {
  if (typeof navigator === "undefined" || !navigator.gpu) {
    throw new Error("this browser has no WebGPU (navigator.gpu is undefined)");
  }
  // tvmjs throws a long message of its own where no adapter is found
  const output = await tvmjs.detectGPUDevice().catch(() => undefined);
  if (output === undefined) {
    throw new Error("this browser's WebGPU has no adapter (WebGPU is off, or no GPU it can use)");
  }
  const limits = manifest.requires?.limits ?? {};
  for (const [name, value] of Object.entries(limits)) {
    if (output.device.limits[name] < value) {
      throw new Error(`this GPU's ${name} is ${output.device.limits[name]}, the build needs ${value}`);
    }
  }
  return output;
}

/** A module of one SIMD instruction (wasm-feature-detect's): valid where the browser's
 * WebAssembly has 128-bit SIMD, which a wasm build's code needs. */
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3,
  2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11]);

/** Whether this browser's WebAssembly has shared memory (the threads proposal). */
function hasSharedMemory() {
  try {
    return new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true }).buffer !== undefined;
  } catch {
    return false;
  }
}

/** An Error saying what of the manifest's WebAssembly features this browser lacks. */
function checkWasm(manifest) {
  const features = manifest.requires?.wasm_features ?? [];
  if (features.includes("simd128") && !WebAssembly.validate(SIMD_PROBE)) {
    throw new Error("this browser's WebAssembly has no SIMD (simd128)");
  }
  if (features.includes("threads") && !hasSharedMemory()) {
    throw new Error("this browser's WebAssembly has no shared memory (threads)");
  }
}

/** The threads a wasm stage may run on: `requested` (default: the cores), one where
 * workers cannot share memory (a page not cross-origin isolated: no SharedArrayBuffer). */
function wasmThreads(requested) {
  if (requested !== undefined && !(Number.isInteger(requested) && requested >= 1)) {
    throw new Error(`threads must be a whole number of at least 1, got ${requested}`);
  }
  if (!globalThis.crossOriginIsolated || typeof Worker === "undefined") return 1;
  return Math.min(requested ?? (navigator.hardwareConcurrency || 1), 64);
}

/** WASI for a stage on imported memory (tvmjs's polyfill reads an exported one): what
 * TVM's web runtime calls, its output to `log`, its environment `env` ("NAME=VALUE"). */
function wasi(memory, log, env = []) {
  const view = () => new DataView(memory.buffer);
  const decoder = new TextDecoder(), encoder = new TextEncoder();
  const strings = env.map((s) => encoder.encode(`${s}\0`));
  let line = "";
  return {
    fd_write(fd, iovs, count, written) {
      const v = view();
      let n = 0;
      for (let i = 0; i < count; i++) {
        const ptr = v.getUint32(iovs + 8 * i, true), len = v.getUint32(iovs + 8 * i + 4, true);
        // a copy: TextDecoder takes no view of shared memory
        line += decoder.decode(new Uint8Array(memory.buffer, ptr, len).slice());
        n += len;
      }
      const lines = line.split("\n");
      line = lines.pop();
      for (const text of lines) log(text);
      v.setUint32(written, n, true);
      return 0;
    },
    clock_time_get(id, precision, out) {
      const ms = id === 0 ? Date.now() : performance.now();
      view().setBigUint64(out, BigInt(Math.round(ms * 1e6)), true);
      return 0;
    },
    environ_sizes_get(count, size) {
      view().setUint32(count, strings.length, true);
      view().setUint32(size, strings.reduce((n, s) => n + s.length, 0), true);
      return 0;
    },
    environ_get(pointers, buffer) {
      const v = view(), bytes = new Uint8Array(memory.buffer);
      strings.forEach((s, i) => {
        v.setUint32(pointers + 4 * i, buffer, true);
        bytes.set(s, buffer);
        buffer += s.length;
      });
      return 0;
    },
    fd_close: () => 0,
    fd_read: () => 8, // EBADF: a stage reads no file
    fd_seek: () => 8,
    proc_exit(code) {
      throw new Error(`the stage exited with status ${code}`);
    },
  };
}

/** A worker's stack: the kernels' deepest frames are a few kB; the TVM-generated
 * parallel loops put larger buffers in the heap. */
const THREAD_STACK = 1 << 20;

/** `count` Web Workers running `module`'s thread loop on `memory` (wasm-thread.js), once
 * each has started; those that fail to start are left out (the stage runs on fewer). */
async function startThreads(module, memory, exports, count, log) {
  const tlsSize = Math.max(exports.kx_tls_size(), 1), tlsAlign = Math.max(exports.kx_tls_align(), 4);
  const started = [];
  for (let i = 0; i < count; i++) {
    const stack = exports.kx_alloc(THREAD_STACK, 16), tls = exports.kx_alloc(tlsSize, tlsAlign);
    if (!stack || !tls) break;
    const worker = new Worker(new URL("./wasm-thread.js", import.meta.url), { name: `kokoro wasm thread ${i + 1}` });
    started.push(new Promise((resolve) => {
      worker.onmessage = ({ data }) => {
        if (data.ready) return resolve(worker);
        log(`wasm thread ${i + 1}: ${data.error}`);
        worker.terminate();
        return resolve(null);
      };
      worker.onerror = (event) => {
        log(`wasm thread ${i + 1} did not start: ${event.message}`);
        resolve(null);
      };
    }));
    worker.postMessage({ module, memory, stackTop: stack + THREAD_STACK, tls });
  }
  return (await Promise.all(started)).filter((worker) => worker !== null);
}

/** tvmjs's instance of a stage linked with shared, imported memory (`spec`: its pages,
 * from the manifest), and its threads: `threads - 1` workers besides the caller. */
async function instantiateShared(bytes, spec, threads, log, env) {
  const memory = new WebAssembly.Memory({ initial: spec.initial_pages, maximum: spec.maximum_pages, shared: true });
  let exports;
  const provider = {
    imports: {
      env: {
        memory,
        // the -mt libc's first constructor: the page's thread state and its
        // thread-local storage (emscripten's glue would set them)
        __emscripten_init_main_thread_js: (self) => exports.kx_main_thread(self),
        emscripten_check_blocking_allowed: () => {},
        emscripten_unwind_to_js_event_loop: () => {  // the -mt libc's exit
          throw new Error("the stage exited");
        },
      },
      wasi_snapshot_preview1: wasi(memory, log, env),
    },
    start: (instance) => {
      exports = instance.exports;
      exports._initialize(); // the static constructors, once
    },
  };
  const tvm = await tvmjs.instantiate(bytes, provider, log);
  let workers = [];
  if (threads > 1) {
    const module = await WebAssembly.compile(bytes);  // V8 reuses the instance's code
    workers = await startThreads(module, memory, tvm.exports, threads - 1, log);
  }
  return { tvm, workers };
}

/** `tensor` (of `tvm`) with `bytes` as its contents.  A CPU tensor's go straight into the
 * module's memory: tvmjs's copyFromRawBytes passes them through its call stack, a JS
 * buffer and a block of the module's memory that grow to twice the largest copy and are
 * kept for good (the decoder's 10 MB upsampling weight left 20 MB of each). */
function copyIn(tvm, tensor, bytes) {
  if (tensor.device.deviceType !== CPU_DEVICE || !tensor.getCPUDataAddress) {
    return tensor.copyFromRawBytes(bytes);
  }
  if (bytes.byteLength !== tensor.numStorageBytes()) {
    throw new Error(`${bytes.byteLength} bytes for a tensor of ${tensor.numStorageBytes()}`);
  }
  new Uint8Array(tvm.memory.memory.buffer, tensor.getCPUDataAddress(), bytes.byteLength).set(bytes);
  return tensor;
}

/** A typed array's bytes, without a copy. */
const bytesOf = (array) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);

class Stage {
  constructor(name, module, device, vm, main, weights, entry) {
    Object.assign(this, { name, module, device, vm, main, weights, entry, tvm: module.tvm });
  }

  /** The threads it runs on: its module's workers and the caller. */
  get threads() {
    return this.module.workers.length + 1;
  }

  /** Run the stage on `inputs` (in the signature's order); its outputs, on the CPU. */
  run(inputs) {
    return exclusive(this.module, () => this.#run(inputs));
  }

  async #run(inputs) {
    const { tvm, entry } = this;
    const device = this.device;
    const signature = entry.signature;
    if (inputs.length !== signature.inputs.length) {
      throw new Error(`stage ${this.name} takes ${signature.inputs.length} inputs, got ${inputs.length}`);
    }
    tvm.beginScope();
    try {
      const args = inputs.map((input, i) => {
        const [name, dtype] = signature.inputs[i];
        if (dtype === "int64" && input.data instanceof Int32Array) {
          input = { ...input, data: BigInt64Array.from(input.data, (v) => BigInt(v)) };
        }
        if (!(input.data instanceof DTYPES[dtype])) {
          throw new Error(`input ${name} must be a ${DTYPES[dtype].name}`);
        }
        return copyIn(tvm, tvm.empty(input.shape, dtype, device), bytesOf(input.data));
      });
      let result = this.main(...args, ...this.weights);
      const outputs = [];
      const count = result.size ? result.size() : 1;
      for (let i = 0; i < count; i++) {
        const tensor = result.size ? result.get(i) : result;
        const host = tvm.empty(tensor.shape, tensor.dtype, tvm.cpu());
        host.copyFrom(tensor);
        outputs.push(host);
      }
      await device.sync();
      return outputs.map((host) => ({
        data: host.toArray().slice(),
        shape: host.shape.slice(),
        dtype: host.dtype,
      }));
    } finally {
      tvm.endScope();
    }
  }
}

/** `task()` once the module's earlier tasks are done: one stage call or load at a time
 * in a module, whose tvmjs scopes (a stack of the instance's) span their awaits. */
function exclusive(module, task) {
  const done = module.queue.then(task);
  module.queue = done.catch(() => {});
  return done;
}

/** The Relax VM of the stage whose symbols `lib` holds (its module's system library
 * under the stage's prefix) on `device`, its storage from TVM's naive allocator.
 * tvmjs's createVirtualMachine takes the pooled one, which keeps every freed buffer for
 * a request of exactly its size: each chunk of a new length adds its tensors to the pool,
 * until a wasm32 instance's 2 GB (or the GPU's memory) runs out. */
function createVirtualMachine(tvm, lib, device) {
  const NAIVE_ALLOCATOR = 1;  // tvmjs's VMAllocatorKind, not exported
  const vm = lib.getFunction("vm_load_executable")();
  const int = (v) => new tvmjs.Scalar(v, "int");
  vm.getFunction("vm_initialization")(int(device.deviceType), int(device.deviceId),
    int(NAIVE_ALLOCATOR), int(CPU_DEVICE), int(0), int(NAIVE_ALLOCATOR));
  return vm;
}

export class Build {
  constructor(base, manifest, gpu, log, threads, env = []) {
    Object.assign(this, { base, manifest, gpu, log, env, stages: {}, modules: {}, gpuErrors: [] });
    // the threads a wasm build runs on (1 for a webgpu build; undefined: the cores)
    this.threads = gpu ? 1 : wasmThreads(threads);
    this.device = deviceOf(manifest);  // "webgpu" or "wasm" (gpu null)
    this.skipped = [];  // [{base, reason}]: the candidates loadBuild passed over
    // WebGPU reports an invalid shader or pipeline as an event, and the kernel then
    // writes nothing: a stage's outputs are only good if none came meanwhile.
    gpu?.device.addEventListener("uncapturederror", (event) => {
      this.gpuErrors.push(event.error.message);
    });
  }

  #checkGpu(what) {
    if (this.gpuErrors.length) {
      const errors = this.gpuErrors.splice(0);
      throw new Error(`WebGPU failed in ${what}: ${errors[0]}` +
        (errors.length > 1 ? ` (and ${errors.length - 1} more)` : ""));
    }
  }

  /** The loaded stage `name` (loaded on first use). */
  async stage(name) {
    if (this.stages[name] === undefined) this.stages[name] = this.#load(name);
    return this.stages[name];
  }

  /** The instance of the module `file` (the stages' one module: each stage's symbols
   * under its prefix), started once: {tvm, workers, queue}. */
  module(file) {
    if (this.modules[file] === undefined) this.modules[file] = this.#instantiate(file);
    return this.modules[file];
  }

  async #instantiate(file) {
    const wasm = new Uint8Array(await this.#fetch(file));
    const memory = this.manifest.requires?.wasm_memory;
    const { tvm, workers } = memory?.shared
      ? await instantiateShared(wasm, memory, this.threads, this.log, this.env)
      : { tvm: await tvmjs.instantiate(wasm, tvmjs.createPolyfillWASI(), this.log), workers: [] };
    if (this.gpu) tvm.initWebGPU(this.gpu.device);
    return { tvm, workers, queue: Promise.resolve() };
  }

  async #fetch(file) {
    const response = await fetch(new URL(file, this.base));
    if (!response.ok) throw new Error(`${file}: HTTP ${response.status}`);
    return response.arrayBuffer();
  }

  async #load(name) {
    const entry = this.manifest.stages[name];
    if (entry === undefined) throw new Error(`the build has no stage ${name}`);
    const [module, weights] = await Promise.all([this.module(entry.file), this.#fetch(entry.weights.file)]);
    return exclusive(module, () => this.#setUp(name, module, entry, weights));
  }

  /** The stage `name` (`entry`) of `module`: its VM, `main` and `weights` (the file's
   * bytes) in the module's instance. */
  async #setUp(name, module, entry, weights) {
    const tvm = module.tvm;
    const device = this.gpu ? tvm.webgpu() : tvm.cpu();
    // what outlives this scope is detached from it: the VM, main and the weights
    tvm.beginScope();
    try {
      const lib = tvm.getGlobalFunc("ffi.SystemLib")(entry.prefix ?? "");
      const vm = tvm.detachFromCurrentScope(createVirtualMachine(tvm, lib, device));
      const main = tvm.detachFromCurrentScope(vm.getFunction("main"));
      // one tensor widened at a time: a float32 copy of the whole file never exists; one
      // stored as it is goes from the file's bytes to the module's memory without a copy
      // of its own (tvmjs's copyFrom makes one)
      const arrays = entry.weights.tensors.map((spec, i) => {
        const tensor = tvm.detachFromCurrentScope(tvm.empty(spec[0], spec[1], device));
        return copyIn(tvm, tensor, bytesOf(decodeWeight(weights, spec, i, entry.weights.file)));
      });
      await device.sync();
      return new Stage(name, module, device, vm, main, arrays, entry);
    } finally {
      tvm.endScope();
    }
  }

  /** Run stage `name` on `inputs`; its outputs. */
  async run(name, inputs) {
    const stage = await this.stage(name);
    this.#checkGpu(`loading ${name}`);
    const outputs = await stage.run(inputs);
    await this.gpu?.device.queue.onSubmittedWorkDone();
    this.#checkGpu(name);
    return outputs;
  }
}

/** Load the build at `base` (a URL of its folder, ending in "/"), or the first of an
 * array of such folders this browser runs (a webgpu build needs WebGPU; a wasm build
 * runs anywhere); an Error with every candidate's reason if none.  `threads`: the most
 * threads a wasm build's stages run on (default: the cores; one where the page is not
 * cross-origin isolated); `env`: a wasm build's stages' environment ("NAME=VALUE", e.g.
 * a kernel's setting: docs/kernels.md). */
export async function loadBuild(base, { log = () => {}, threads, env = [] } = {}) {
  wasmThreads(threads);  // refuses a bad count before any candidate is tried
  const skipped = [];
  for (const candidate of Array.isArray(base) ? base : [base]) {
    try {
      const url = new URL(candidate, globalThis.location?.href);
      const manifest = await fetchManifest(url);
      if (deviceOf(manifest) === "wasm") checkWasm(manifest);
      const gpu = deviceOf(manifest) === "webgpu" ? await gpuDevice(manifest) : null;
      const build = new Build(url, manifest, gpu, log, threads, env);
      build.skipped = skipped;
      return build;
    } catch (error) {
      if (!Array.isArray(base)) throw error;
      skipped.push({ base: candidate, reason: error.message });
    }
  }
  throw new Error(`no build runs here: ${skipped.map((s) => `${s.base}: ${s.reason}`).join("; ")}`);
}
