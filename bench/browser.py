"""Kokoro-82M in one headless Chromium: kokoro-js (onnxruntime-web, wasm) against this
project's wasm build, the same int8 weights, text by text.

    PYTHONPATH=. python bench/browser.py --wasm DIR [--webgpu DIR] [--texts word,hello,...]
                 [--engines kokoro-js,kokoro-js-cores,tvm-wasm] [--only ENGINE=TEXT,...] [--timeout 600]
                 [--warm-up word|none] [--save-audio DIR] [--out bench/results] [--name browser]
                 [--wasm-env NAME=VALUE ...]

Engines, each on a fresh page (a new browser context: no cache, no Cache Storage, a
renderer process of its own) of the same Chromium (Debian's, headless, through
kokoro_ext.tools.browser.Browser), served from 127.0.0.1 with cross-origin isolation
(COOP/COEP, as kokoro_ext.web.server serves every build):

  kokoro-js   npm kokoro-js (the version configs/voices-v1.0.json pins, the one
              kokoro_ext.build.fetch takes the voices from), its browser bundle
              ``dist/kokoro.web.js`` (transformers.js 3.5.1 and onnxruntime-web inside),
              ``KokoroTTS.from_pretrained(MODEL_ID, {dtype: "q8", device: "wasm"})``, then
              ``tts.stream(splitter, {voice})`` with a closed TextSplitterStream (kokoro-js
              1.2.1's ``stream(string)`` never ends: it does not close the stream it makes).
              No request leaves the machine: the page's fetch() of huggingface.co's files
              for MODEL_ID is pointed at a local model folder made once in the cache
              (~/.cache/kokoro-tvm-ext/bench-browser/, served with the page; Playwright
              aborts any other request off 127.0.0.1): ``onnx/model_quantized.onnx`` is
              the fetched ``kokoro-v1.0.int8.onnx`` with its graph input ``tokens``
              renamed ``input_ids`` and its output ``audio`` renamed ``waveform`` (the
              names kokoro-js feeds and reads; same weights, same nodes), ``config.json``
              the project's Kokoro config with transformers.js's model type,
              ``tokenizer.json`` made from the config's vocab (one token per phoneme
              symbol, "$" = 0 on both ends, as kokoro's own), and ``voices/af_heart.bin``
              the fetched voice pack (kokoro-js's own file).  onnxruntime-web's wasm
              (``ort-wasm-simd-threaded.jsep.{mjs,wasm}``, from npm
              @huggingface/transformers 3.5.1, the version the bundle would fetch them
              for) is served from the same origin (``env.wasmPaths``).  Every chunk's
              token ids (kokoro-js's tokenizer on its phonemes) are checked against
              kokoro_ext.text.g2p.phonemes_to_ids on the same phonemes.
  kokoro-js-cores  the same with a thread per core: onnxruntime-web takes half the cores
              the page reports (``navigator.hardwareConcurrency``), at most 4, and kokoro-js
              exposes no thread setting, so the page reports twice the cores (what a
              machine of twice the cores would run); kokoro-js at its fastest here.
  tvm-wasm    ``--wasm DIR``, a ``--target wasm`` build: its tts.js, ``KokoroTTS.load``
              then ``tts.stream(text, {voice})`` (text.js's front end).
  tvm-webgpu  ``--webgpu DIR`` (optional), the same page API: Chromium's WebGPU here is
              SwiftShader on the CPU, so it is reported for correctness, not speed
              (by default it speaks only ``word``: ``--only tvm-webgpu=...``).

``--wasm-env NAME=VALUE`` (repeatable): the tvm engines' stages get these variables as
their environment (WASI ``environ``, which otherwise holds emscripten's defaults), read by
the build's kernels as a native process's: e.g. ``KOKORO_EXT_WINOGRAD_CACHE_MB`` on a build
made before its default changed, without building it again.

Per engine: cold load (the page's import of the engine to ready, every fetch and compile
in it: kokoro-js's ``from_pretrained``; the build's ``KokoroTTS.load`` then every stage's
``build.stage(name)``, which a build would otherwise do on the stage's first use), one
warm-up run (``--warm-up``, default the text ``word``: first-call costs, the voice's fetch,
text.js's lexicon; timed and reported apart: "cold first audio" is load + its first
chunk), then each text once (``--repeat`` N: medians).  Per
(engine, text): time to first audio (the stream's first chunk, from the call) and total
time (the stream's end), measured in the page with performance.now(); the audio's length,
RMS and peak; the chunks (text, phonemes, ids) each engine spoke.

Memory: the peak RSS of the page's renderer process (VmHWM in /proc, the kernel's
high-water mark: JS heap, WebAssembly memories, workers' threads of that process
included), reset (``5`` into /proc/PID/clear_refs) before each text, so that it is what
speaking that text took on top of the loaded engine; and the main thread's JS heap
(CDP ``Performance.getMetrics`` JSHeapUsedSize) after each text.  For this project's
engines, where it goes: the WebAssembly memory of the build's module (kokoro.js runs the
four stages in one module, one instance and memory: ``memory.buffer.byteLength``) once
loaded (before the warm-up) and after each text; a memory never shrinks, so it is the
high-water mark so far (its pages never touched are not in the RSS); and the most of its
heap in use at once while speaking the text (``kx_heap``: what the weights, tensors and
kernels' scratch took, against what they made the memory grow to).
The renderer is the process of the type "renderer" (CDP ``SystemInfo.getProcessInfo``) that
spent the most CPU time over the load and warm-up; its VmHWM then is the load's and
warm-up's peak.
Download: the sum of the response bodies' Content-Length over every response the
engine's page received (all from the local server), listed per file in the JSON: the
bytes on the wire, as kokoro_ext.web.server sends both engines' files, gzip-encoded for
the text-like types (``.wasm``, ``.js``, ``.mjs``, ``.json``, ``.html``), as static hosts
do, and as they are for the rest (weights, ``.onnx``, voices).

A cell that takes longer than ``--timeout`` seconds says "timed out", its page is
closed and that engine's later texts are not run.  The page is watched between its
awaits (a single WebAssembly call, e.g. a stage, runs to its end first), and its renderer
is killed KILL_GRACE_S after the limit if it is still busy then.  Writes ``NAME.json``, ``NAME.txt``
(the tables, ratios of each tvm engine to each kokoro-js engine) and ``NAME.png`` to ``--out``
(bench/harness.write_results), with the machine.  Needs chromium, npm (kokoro-js and
transformers.js's wasm, once) and the fetched model (python -m kokoro_ext.build.fetch).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from harness import machine_record, one_line, write_results  # noqa: E402
from user import TEXTS  # noqa: E402

VOICE = "af_heart"
SAMPLE_RATE = 24000
#: The model id kokoro-js's documentation loads; its voices' URL is fixed to it.
MODEL_ID = "onnx-community/Kokoro-82M-v1.0-ONNX"
HF = "https://huggingface.co/"
#: transformers.js as npm publishes it: the version kokoro-js's bundle is built from
#: (its ``env.version``), whose dist/ holds the onnxruntime-web wasm the bundle fetches.
TRANSFORMERS_PACKAGE = "@huggingface/transformers@3.5.1"
TRANSFORMERS_SHA256 = "b8e9d201f92c7e2001de3601ef47d5a257985921f8f6ffc76734a5ec021bb53e"
ORT_FILES = ("ort-wasm-simd-threaded.jsep.mjs", "ort-wasm-simd-threaded.jsep.wasm")
ENGINES = {
    "kokoro-js": "kokoro-js (onnxruntime-web wasm, q8), its default threads",
    "kokoro-js-cores": "kokoro-js (onnxruntime-web wasm, q8), a thread per core",
    "tvm-wasm": "TVM wasm (kokoro_ext)",
    "tvm-webgpu": "TVM WebGPU (SwiftShader: correctness only)",
}
#: The kokoro-js engines: onnxruntime-web's threads at its default (half the cores the
#: page reports, at most 4), and one per core (the page reports twice the cores).
KOKORO_JS = {"kokoro-js": "default", "kokoro-js-cores": "cores"}
#: Seconds past --timeout after which a page still busy has its renderer killed.
KILL_GRACE_S = 60
#: What a page of the bench is before an engine is loaded in it.
BENCH_HTML = """<!doctype html><meta charset="utf-8"><title>kokoro browser bench</title>
<script type="module">window.kokoroPage = { ready: true };</script>
"""

# -- kokoro-js's files, made once in the cache -------------------------------------------


def kokoro_js_dir() -> Path:
    from kokoro_ext.build import fetch
    from kokoro_ext.run import cache

    pins = fetch.voice_pins()
    return cache.cache_dir() / "bench-browser" / f"{pins['package']}-{pins['version']}"


def tokenizer_files(vocab: dict[str, int]) -> tuple[dict, dict]:
    """(tokenizer.json, tokenizer_config.json) for transformers.js: the text's characters
    outside the vocab removed (Replace), every character a token (Split on the empty
    regex), each looked up in the vocab (a model without a type: transformers.js's legacy
    word-level one), "$" (id 0) before and after (TemplateProcessing)."""
    symbols = {"$": 0, **vocab}
    escaped = "".join("\\" + c if c in "\\]^-[" else c for c in symbols)
    special = {"SpecialToken": {"id": "$", "type_id": 0}}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 0, "content": "$", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "Replace", "pattern": {"Regex": f"[^{escaped}]"}, "content": ""},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": ""}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special, {"Sequence": {"id": "A", "type_id": 0}}, special],
            "pair": [special, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}, special],
            "special_tokens": {"$": {"id": "$", "ids": [0], "tokens": ["$"]}},
        },
        "decoder": None,
        "model": {"vocab": symbols},
    }
    config = {"model_max_length": 512, "pad_token": "$", "unk_token": "$",
              "tokenizer_class": "PreTrainedTokenizer", "clean_up_tokenization_spaces": False}
    return tokenizer, config


def renamed_model(source: Path, target: Path) -> None:
    """``source`` (kokoro-v1.0.int8.onnx) with input tokens -> input_ids and output
    audio -> waveform, the names kokoro-js uses; nothing else changes."""
    import onnx

    model = onnx.load(str(source))
    names = {"tokens": "input_ids", "audio": "waveform"}
    for value in [*model.graph.input, *model.graph.output]:
        value.name = names.get(value.name, value.name)
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    got = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
    if got != (["input_ids", "style", "speed"], ["waveform"]):
        raise RuntimeError(f"{source.name} has inputs/outputs {got} after renaming, expected "
                           "input_ids, style, speed -> waveform")
    partial = target.with_suffix(".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(partial))
    partial.replace(target)


def prepare_kokoro_js(log=print) -> Path:
    """The folder kokoro-js's page is served from, made once: kokoro.web.js, ort/ (the
    wasm), model/ (what huggingface.co would serve for MODEL_ID) and voices/."""
    from kokoro_ext import KOKORO_82M_CONFIG
    from kokoro_ext.build import fetch
    from kokoro_ext.build.web import runtime
    from kokoro_ext.run import cache

    pins = fetch.voice_pins()
    directory = kokoro_js_dir()
    done = directory / "ready.json"
    if done.is_file():
        return directory
    log(f"kokoro-js: making {directory} (once) ...")
    directory.mkdir(parents=True, exist_ok=True)
    package = f"{pins['package']}@{pins['version']}"
    bundle = runtime.npm_file(package, pins["tarball_sha256"], "dist/kokoro.web.js",
                              "kokoro-js-web")
    source = bundle.read_text()
    version = TRANSFORMERS_PACKAGE.rsplit("@", 1)[1]
    if f'version:"{version}"' not in source:
        raise RuntimeError(f"{package}'s kokoro.web.js is not built from transformers.js {version}")
    shutil.copyfile(bundle, directory / "kokoro.web.js")
    (directory / "ort").mkdir(exist_ok=True)
    for file in ORT_FILES:
        got = runtime.npm_file(TRANSFORMERS_PACKAGE, TRANSFORMERS_SHA256, f"dist/{file}",
                               f"transformers-{version}-{file.replace('.', '-')}")
        shutil.copyfile(got, directory / "ort" / file)
    model_dir = directory / "model"
    fetched = cache.cache_dir()
    model = fetch.fetch_model(fetched, log)
    renamed_model(model, model_dir / "onnx" / "model_quantized.onnx")
    config = json.loads(KOKORO_82M_CONFIG.read_text())
    tokenizer, tokenizer_config = tokenizer_files(config["vocab"])
    config = {"model_type": "style_text_to_speech_2",
              "architectures": ["StyleTextToSpeech2Model"], **config}
    for name, value in (("config.json", config), ("tokenizer.json", tokenizer),
                        ("tokenizer_config.json", tokenizer_config)):
        (model_dir / name).write_text(json.dumps(value, ensure_ascii=False, indent=1) + "\n")
    voices = fetch.fetch_voices(fetched / cache.VOICES, log)
    (model_dir / "voices").mkdir(exist_ok=True)
    shutil.copyfile(voices / f"{VOICE}.bin", model_dir / "voices" / f"{VOICE}.bin")
    (directory / "index.html").write_text(BENCH_HTML)
    done.write_text(json.dumps({"kokoro-js": package, "transformers.js": TRANSFORMERS_PACKAGE,
                                "model": model.name, "model_sha256": fetch.MODEL_SHA256}) + "\n")
    return directory


# -- in the page -------------------------------------------------------------------------

#: Starts ``window.benchTask`` (an async function body of ``arg``) and returns at once;
#: the bench waits for ``benchTask.done`` (a page busy in WebAssembly still times out).
_START = """([body, arg]) => {
  const task = window.benchTask = { done: false, error: null, value: null };
  const run = new Function("arg", "return (async () => {" + body + "})()");
  setTimeout(() => {  // after this call returns: a long first step must not hold it
    run(arg).then((v) => { task.value = v; }, (e) => { task.error = String(e?.stack ?? e); })
            .finally(() => { task.done = true; });
  }, 0);
}"""

#: Workers counted (onnxruntime-web's threads are workers), then the engine loaded as
#: ``window.bench = {stream(text, voice) -> chunks {text, phonemes, ids?, audio}}``.
_COUNT_WORKERS = """
  window.benchWorkers = 0;
  const Base = window.Worker;
  window.Worker = class extends Base {
    constructor(...a) { super(...a); window.benchWorkers += 1; }
  };
"""

LOAD_KOKORO_JS = _COUNT_WORKERS + """
  const hf = arg.hf + arg.model + "/resolve/main/", fetch0 = window.fetch;
  window.fetch = (input, init) => {  // huggingface.co's files from model/ here
    const url = typeof input === "string" ? input : input.href ?? input.url;
    return url.startsWith(hf) ? fetch0(arg.base + "model/" + url.slice(hf.length), init)
                              : fetch0(input, init);
  };
  const cores = navigator.hardwareConcurrency;
  if (arg.threads === "cores") {  // onnxruntime-web takes half of what the page reports
    Object.defineProperty(Navigator.prototype, "hardwareConcurrency", { get: () => 2 * cores });
  }
  const t0 = performance.now();
  const kjs = await import(arg.base + "kokoro.web.js");
  kjs.env.wasmPaths = arg.base + "ort/";
  const tts = await kjs.KokoroTTS.from_pretrained(arg.model, { dtype: "q8", device: "wasm" });
  const ms = performance.now() - t0;
  window.bench = {
    tts,
    async *stream(text, voice) {
      const splitter = new kjs.TextSplitterStream();
      splitter.push(text);
      splitter.close();
      for await (const c of tts.stream(splitter, { voice })) {
        yield { text: c.text, phonemes: c.phonemes, audio: c.audio.audio };
      }
    },
    ids(phonemes) {
      return Array.from(tts.tokenizer(phonemes, { truncation: true }).input_ids.data, Number);
    },
  };
  const threads = Math.min(4, Math.ceil(navigator.hardwareConcurrency / 2));  // its rule
  return { load_ms: ms, device: `wasm (onnxruntime-web, ${threads} threads)` };
"""

LOAD_TVM = _COUNT_WORKERS + """
  const t0 = performance.now();
  await new Promise((ok, fail) => {
    const s = document.createElement("script");
    s.src = arg.base + "tvmjs.js";
    s.onload = ok;
    s.onerror = () => fail(new Error("cannot load tvmjs.js"));
    document.head.append(s);
  });
  const { KokoroTTS } = await import(arg.base + "tts.js");
  // --wasm-env: each wasm stage's environment (its WASI environ)
  const tts = await KokoroTTS.load(arg.base, { env: arg.env ?? [] });
  // every stage now, as from_pretrained does (the build would load each on first use)
  for (const name of Object.keys(tts.build.manifest.stages)) await tts.build.stage(name);
  const ms = performance.now() - t0;
  window.bench = {
    tts,
    async *stream(text, voice) {
      for await (const c of tts.stream(text, { voice })) yield c;
    },
  };
  return { load_ms: ms, device: tts.build.device };
"""

#: One text through the engine's stream; chunks kept in ``window.benchChunks``.
SPEAK = """
  const chunks = window.benchChunks = [];
  const t0 = performance.now();
  for await (const c of window.bench.stream(arg.text, arg.voice)) {
    chunks.push({ t: performance.now() - t0, ...c });
  }
  const total = performance.now() - t0;
  return {
    total_ms: total,
    chunks: chunks.map((c) => {
      let sum = 0, peak = 0;
      for (const v of c.audio) { sum += v * v; peak = Math.max(peak, Math.abs(v)); }
      return { t_ms: c.t, text: c.text, phonemes: c.phonemes,
               ids: c.ids ? Array.from(c.ids, Number) : (window.bench.ids?.(c.phonemes) ?? null),
               samples: c.audio.length, sum_squares: sum, peak };
    }),
  };
"""

#: The last text's audio, base64 float32 (for --save-audio).
AUDIO = """() => {
  const chunks = window.benchChunks;
  const audio = new Float32Array(chunks.reduce((n, c) => n + c.audio.length, 0));
  let at = 0;
  for (const c of chunks) { audio.set(c.audio, at); at += c.audio.length; }
  const bytes = new Uint8Array(audio.buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}"""

#: MB of the WebAssembly memory of each module the build has loaded (kokoro.js: the
#: stages' one module, one instance and memory; a memory never shrinks, so this is its
#: high-water mark), or null for an engine without the build's stages (kokoro-js).
MODULE_MEMORY = """async () => {
  const build = window.bench?.tts?.build;
  if (!build?.modules) return null;
  const sizes = {};
  for (const [file, module] of Object.entries(build.modules)) {
    sizes[file] = (await module).tvm.memory.memory.buffer.byteLength / 2 ** 20;
  }
  return sizes;
}"""

# The most each wasm module's heap held at once since the last call (cpp/web/threads.cc
# kx_heap: its allocations, against the memory they made it grow to), reset as it reads.
MODULE_HEAP = """async () => {
  const build = window.bench?.tts?.build;
  if (!build?.modules) return null;
  const most = {};
  for (const [file, module] of Object.entries(build.modules)) {
    const kx_heap = (await module).tvm.exports.kx_heap;
    if (!kx_heap) return null;
    most[file] = kx_heap(1) / 2 ** 20;
    kx_heap(3);
  }
  return most;
}"""

ENVIRONMENT = """() => ({
  crossOriginIsolated: self.crossOriginIsolated,
  hardwareConcurrency: navigator.hardwareConcurrency,
  userAgent: navigator.userAgent,
  workers: window.benchWorkers ?? 0,
  threads: window.bench?.tts?.build?.threads ?? null,  // a tvm build's: its pool
})"""


class TimedOut(Exception):
    pass


def reason(error: BaseException) -> str:
    """"timed out after N s", or the error in one line."""
    return str(error) if isinstance(error, TimedOut) else one_line(error)


def task(page, body: str, arg, timeout_s: float, pid: int | None = None):
    """``body`` run in ``page`` (an async function of ``arg``); its value, RuntimeError with
    the page's error, or TimedOut.  The page is polled between its awaits: a WebAssembly
    call that runs on is waited for, then counted as timed out; ``pid`` (the page's
    renderer), if known, is killed KILL_GRACE_S after the limit, so that none hangs."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    killed = []

    def kill() -> None:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass

    limit = f"timed out after {timeout_s:g} s"
    killer = threading.Timer(timeout_s + KILL_GRACE_S, kill) if pid else None
    started = time.perf_counter()
    if killer:
        killer.start()
    try:
        page.evaluate(_START, [body, arg])
        page.wait_for_function("() => window.benchTask.done", polling=200,
                               timeout=timeout_s * 1000)
        result = page.evaluate("() => window.benchTask")
    except PlaywrightTimeout as err:
        raise TimedOut(limit) from err
    except PlaywrightError as err:
        if killed:
            raise TimedOut(f"{limit} (its renderer killed {KILL_GRACE_S:g} s later)") from err
        raise RuntimeError(one_line(err)) from err
    finally:
        if killer:
            killer.cancel()
    if time.perf_counter() - started > timeout_s:
        raise TimedOut(f"{limit} (a WebAssembly call ran to "
                       f"{time.perf_counter() - started:.0f} s)")
    if result["error"]:
        raise RuntimeError(result["error"])
    return result["value"]


# -- the renderer process's memory -------------------------------------------------------


def renderer_cpu(cdp) -> dict[int, float]:
    """Chromium's renderer processes: pid -> CPU seconds so far."""
    info = cdp.send("SystemInfo.getProcessInfo")["processInfo"]
    return {p["id"]: p["cpuTime"] for p in info if p["type"] == "renderer"}


def status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak(pid: int) -> bool:
    """VmHWM := VmRSS for ``pid`` (Linux; refused without the rights)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def mb(kb: int | None) -> float | None:
    return None if kb is None else kb / 1024


def module_memory_mb(page) -> dict[str, float] | None:
    """MB of each module's WebAssembly memory (MODULE_MEMORY); None for kokoro-js."""
    try:
        return page.evaluate(MODULE_MEMORY)
    except Exception:  # noqa: BLE001 - a figure the bench can do without
        return None


def module_heap_mb(page) -> dict[str, float] | None:
    """MB of each wasm module's heap in use at most since the last call (MODULE_HEAP)."""
    try:
        return page.evaluate(MODULE_HEAP)
    except Exception:  # noqa: BLE001 - a figure the bench can do without
        return None


def js_heap_mb(page) -> float | None:
    try:
        session = page.context.new_cdp_session(page)
        session.send("Performance.enable")
        metrics = {m["name"]: m["value"] for m in session.send("Performance.getMetrics")["metrics"]}
        session.detach()
        return metrics.get("JSHeapUsedSize", 0) / 2**20
    except Exception:  # noqa: BLE001 - a metric the bench can do without
        return None


# -- one engine --------------------------------------------------------------------------


def run_engine(browser, cdp, engine: str, base: str, texts: list[str], args,
               log=print) -> dict:
    """Load ``engine`` on a fresh page, warm it up, speak ``texts``; its results."""
    result: dict = {"texts": {}, "downloads": {}, "blocked": []}
    page = browser.open_page(browser.server.url + "bench.html")
    cpu = renderer_cpu(cdp)
    pid = None
    responses = result["downloads"]

    def on_response(response):
        length = response.headers.get("content-length")
        url = response.url
        if url.startswith(browser.server.url):
            url = url[len(browser.server.url):]
        responses[url] = responses.get(url, 0) + (int(length) if length else 0)

    page.on("response", on_response)
    page.route(lambda url: not url.startswith(browser.server.url),  # no network
               lambda r: (result["blocked"].append(r.request.url), r.abort()))
    loader = LOAD_KOKORO_JS if engine in KOKORO_JS else LOAD_TVM
    try:
        log(f"{engine}: loading ...")
        loaded = task(page, loader, {"base": base, "model": MODEL_ID, "hf": HF,
                                     "threads": KOKORO_JS.get(engine),
                                     "env": args.wasm_env}, args.timeout)
        result["load_s"] = loaded["load_ms"] / 1000
        result["device"] = loaded["device"]
        log(f"{engine}: loaded in {result['load_s']:.1f} s ({result['device']})")
        result["load_module_memory_mb"] = module_memory_mb(page)
        result["load_js_heap_mb"] = js_heap_mb(page)
        if args.warm_up != "none":
            got = task(page, SPEAK, {"text": TEXTS[args.warm_up], "voice": VOICE}, args.timeout)
            result["warm_up"] = {"text": args.warm_up, "total_s": got["total_ms"] / 1000,
                                 "first_audio_s": got["chunks"][0]["t_ms"] / 1000}
            log(f"{engine}: warm-up ({args.warm_up}) {got['total_ms'] / 1000:.1f} s")
        result["environment"] = page.evaluate(ENVIRONMENT)
        # the page's renderer: the one that has worked the most since the page opened
        spent = {p: t - cpu.get(p, 0.0) for p, t in renderer_cpu(cdp).items()}
        pid = max(spent, key=spent.get) if spent else None
        result["renderer_pid"] = pid
        result["load_peak_rss_mb"] = mb(status_kb(pid, "VmHWM")) if pid else None
    except (TimedOut, RuntimeError) as err:
        result["error"] = reason(err) + (" (loading)" if "load_s" not in result else " (warm-up)")
        log(f"{engine}: {result['error']}")
        result["texts"] = {name: {"error": "not run: " + result["error"]} for name in texts}
        close(page)
        return result
    for name in texts:
        if "error" in result:
            result["texts"][name] = {"error": "not run: " + result["error"]}
            continue
        result["texts"][name] = cell = speak(page, engine, name, pid, args, log)
        if cell.get("error", "").startswith("timed out"):
            result["error"] = f"timed out on {name}"
    result["download_bytes"] = sum(responses.values())
    result["environment"] = {**result.get("environment", {}), "workers": _workers(page)}
    close(page)
    return result


def close(page) -> None:
    try:
        page.close()
    except Exception:  # noqa: BLE001 - a page whose renderer was killed
        pass


def _workers(page) -> int | None:
    try:
        return page.evaluate("() => window.benchWorkers ?? 0")
    except Exception:  # noqa: BLE001 - a closed or crashed page
        return None


def speak(page, engine: str, name: str, pid: int | None, args, log=print) -> dict:
    """One text, ``args.repeat`` times: medians, the last run's chunks and audio."""
    runs = []
    peaks = []
    module_heap_mb(page)  # from here
    for _ in range(args.repeat):
        reset = reset_peak(pid) if pid else False
        try:
            got = task(page, SPEAK, {"text": TEXTS[name], "voice": VOICE}, args.timeout, pid)
        except (TimedOut, RuntimeError) as err:
            log(f"{engine} {name}: {reason(err)}")
            return {"error": reason(err)}
        runs.append(got)
        peaks.append(mb(status_kb(pid, "VmHWM")) if pid else None)
    got = runs[-1]
    chunks = got["chunks"]
    samples = sum(c["samples"] for c in chunks)
    firsts = [r["chunks"][0]["t_ms"] / 1000 for r in runs if r["chunks"]]
    cell = {
        "first_audio_s": statistics.median(firsts) if firsts else None,
        "total_s": statistics.median(r["total_ms"] / 1000 for r in runs),
        "runs": [{"first_audio_s": r["chunks"][0]["t_ms"] / 1000 if r["chunks"] else None,
                  "total_s": r["total_ms"] / 1000} for r in runs],
        "peak_rss_mb": max((p for p in peaks if p is not None), default=None),
        "peak_reset": reset,
        "js_heap_mb": js_heap_mb(page),
        "module_memory_mb": module_memory_mb(page),
        "module_heap_mb": module_heap_mb(page),
        "audio_s": samples / SAMPLE_RATE,
        "rms": (sum(c["sum_squares"] for c in chunks) / max(samples, 1)) ** 0.5,
        "peak": max((c["peak"] for c in chunks), default=0.0),
        "chunks": [{k: c[k] for k in ("t_ms", "text", "phonemes", "ids", "samples")}
                   for c in chunks],
    }
    cell["ids_match"] = ids_match(cell["chunks"])
    if args.save_audio:
        import numpy as np

        from kokoro_ext.run.wav import write_wav

        audio = np.frombuffer(base64.b64decode(page.evaluate(AUDIO)), np.float32)
        args.save_audio.mkdir(parents=True, exist_ok=True)
        write_wav(args.save_audio / f"{engine}-{name}.wav", audio, SAMPLE_RATE)
    log(f"{engine} {name}: first audio {fmt(cell['first_audio_s'], '.2f')} s, total "
        f"{cell['total_s']:.2f} s, {cell['audio_s']:.2f} s of audio, {len(chunks)} chunks, "
        f"peak RSS {cell['peak_rss_mb'] or 0:.0f} MB")
    return cell


def ids_match(chunks: list[dict]) -> bool | None:
    """Whether every chunk's ids are kokoro_ext's for its phonemes (None: none given)."""
    import warnings

    from kokoro_ext import KOKORO_82M_CONFIG
    from kokoro_ext.text.g2p import phonemes_to_ids

    vocab = json.loads(KOKORO_82M_CONFIG.read_text())["vocab"]
    if any(c["ids"] is None for c in chunks):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return all(c["ids"] == phonemes_to_ids(c["phonemes"], vocab) for c in chunks)


# -- the run -----------------------------------------------------------------------------


def machine(browser) -> dict:
    packages = ("apache-tvm", "playwright", "onnx", "numpy", "matplotlib")
    return {**machine_record(packages), "chromium": browser._browser.version}


def run(args, log=print) -> dict:
    from kokoro_ext.tools.browser import Browser

    from kokoro_ext.build import fetch

    pins = fetch.voice_pins()
    engines = {}
    for engine in args.engines:
        directory = {"tvm-wasm": args.wasm, "tvm-webgpu": args.webgpu}.get(engine)
        if engine not in KOKORO_JS and directory is None:
            continue
        engines[engine] = directory
    result = {"engines": list(engines), "texts": args.texts, "voice": VOICE,
              "repeat": args.repeat, "warm_up": args.warm_up, "timeout_s": args.timeout,
              "wasm_env": args.wasm_env,
              "load_average_start": os.getloadavg(),
              "text_words": {t: len(TEXTS[t].split()) for t in args.texts},
              "labels": {e: ENGINES[e] for e in engines},
              "versions": {"kokoro-js": f"{pins['package']}@{pins['version']}",
                           "transformers.js": TRANSFORMERS_PACKAGE},
              "builds": {e: str(Path(d).resolve()) for e, d in engines.items() if d},
              "results": {}}
    with tempfile.TemporaryDirectory(prefix="kokoro-browser-bench-") as tmp:
        site = Path(tmp)
        (site / "bench.html").write_text(BENCH_HTML)
        for engine, directory in engines.items():
            if engine in KOKORO_JS:
                try:
                    directory = prepare_kokoro_js(log)
                except Exception as err:  # noqa: BLE001 - reported, the others go on
                    result["results"][engine] = {"error": one_line(err), "texts": {}}
                    log(f"skipped kokoro-js: {one_line(err)}")
                    continue
            (site / engine).symlink_to(Path(directory).resolve(), target_is_directory=True)
        with Browser(site, timeout_s=args.timeout, load=False) as browser:
            result["machine"] = machine(browser)
            cdp = browser._browser.new_browser_cdp_session()
            for engine in engines:
                if engine in result["results"]:
                    continue
                texts = args.only.get(engine, args.texts)
                result["results"][engine] = run_engine(
                    browser, cdp, engine, browser.server.url + engine + "/",
                    [t for t in args.texts if t in texts], args, log)
            result["machine"]["load_average_end"] = os.getloadavg()
    return result


# -- tables and chart --------------------------------------------------------------------

METRICS = (
    ("first_audio_s", "time to first audio (s), warm", "8.2f"),
    ("total_s", "total time (s), warm", "8.2f"),
    ("peak_rss_mb", "renderer peak RSS speaking the text (MB)", "8.0f"),
    ("js_heap_mb", "JS heap after the text (MB, main thread)", "8.1f"),
    ("audio_s", "audio (s)", "8.2f"),
)


def fmt(value, spec: str) -> str:
    width = int(spec.rstrip("dfs").split(".")[0] or 0)
    return f"{value:{spec}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def failure(cell: dict | None) -> str:
    """A failed cell in a few words (its reason is listed under the tables)."""
    error = (cell or {}).get("error")
    if error is None:
        return "-"
    return next((w for w in ("timed out", "not run") if error.startswith(w)), "failed")


def format_tables(result: dict) -> str:
    m, engines, texts = result["machine"], result["engines"], result["texts"]
    res = result["results"]
    lines = [
        f"Kokoro-82M in headless Chromium {m['chromium']}: {m['cpu']}, {m['cores']} cores, "
        f"load {' '.join(f'{x:.1f}' for x in result['load_average_start'])} at start, "
        f"{' '.join(f'{x:.1f}' for x in m['load_average_end'])} at the end; voice "
        f"{result['voice']}, {result['repeat']} run(s) per text after a warm-up on "
        f"{result['warm_up']!r}",
        "",
    ]
    for engine in engines:
        lines.append(f"  {engine:16} {result['labels'][engine]}"
                     + (f": {result['builds'][engine]}" if engine in result["builds"] else ""))
    if result.get("wasm_env"):
        lines.append(f"  the tvm engines' stages ran with {' '.join(result['wasm_env'])}")
    lines += ["", f"{'engine':16} {'load s':>8} {'warm-up s':>9} {'cold 1st audio s':>16} "
                  f"{'download MB':>11} {'peak MB':>8} {'workers':>7} {'isolated':>8}  device"]
    for engine in engines:
        r = res.get(engine, {})
        env = r.get("environment", {})
        warm_up = r.get("warm_up", {})
        cold = (r["load_s"] + warm_up["first_audio_s"]
                if "load_s" in r and "first_audio_s" in warm_up else None)
        lines.append(
            f"{engine:16} {fmt(r.get('load_s'), '8.1f')} "
            f"{fmt(warm_up.get('total_s'), '9.1f')} {fmt(cold, '16.1f')} "
            f"{fmt(r.get('download_bytes', 0) / 1e6 if 'download_bytes' in r else None, '11.1f')} "
            f"{fmt(r.get('load_peak_rss_mb'), '8.0f')} {fmt(env.get('workers'), '7d')} "
            f"{str(env.get('crossOriginIsolated', '-')):>8}  {r.get('device', r.get('error', ''))}")
    # each of this project's engines against each kokoro-js engine of the run
    pairs = [(e, b) for e in engines if e not in KOKORO_JS for b in engines if b in KOKORO_JS]
    width = max([16, *(len(f"{e} / {b}") for e, b in pairs)]) + 1
    for key, title, spec in METRICS:
        lines += ["", title,
                  f"{'text':10} {'words':>5} " + " ".join(f"{e:>15}" for e in engines)
                  + "".join(f" {e + ' / ' + b:>{width}}" for e, b in pairs)]
        for text in texts:
            cells = [res.get(e, {}).get("texts", {}).get(text) for e in engines]
            row = f"{text:10} {result['text_words'][text]:5d} "
            row += " ".join(f"{fmt(c.get(key), spec):>15}" if c and "error" not in c else
                            f"{failure(c):>15}" for c in cells)
            for e, b in pairs:
                a = (res.get(e, {}).get("texts", {}).get(text) or {}).get(key)
                base = (res.get(b, {}).get("texts", {}).get(text) or {}).get(key)
                row += f" {fmt(a / base if a is not None and base else None, f'{width}.2f')}"
            lines.append(row)
    lines += module_memory_table(result)
    lines += ["", "what each engine spoke (chunks: phonemes; ids: kokoro_ext's ids for them)"]
    for text in texts:
        for engine in engines:
            cell = res.get(engine, {}).get("texts", {}).get(text)
            if not cell or "error" in cell:
                continue
            match = {True: "ids = kokoro_ext's", False: "ids DIFFER from kokoro_ext's",
                     None: "no ids"}[cell["ids_match"]]
            lines.append(f"  [{text}] {engine}: {len(cell['chunks'])} chunks, {match}, "
                         f"RMS {cell['rms']:.3f}, peak {cell['peak']:.2f}")
            for c in cell["chunks"][:3]:
                lines.append(f"      {c['phonemes'][:100]}")
            if len(cell["chunks"]) > 3:
                lines.append(f"      ... {len(cell['chunks']) - 3} more")
    lines += ["", "load: the engine's import, fetches, compiles, every stage/session made; "
              f"warm-up: the first call ({result['warm_up']!r}; voice, lexicon); cold 1st audio: "
              "load + the warm-up's first chunk; peak MB: the renderer's over load and warm-up.",
              "first audio: the stream's first chunk, from the call; total: its end "
              "(performance.now() in the page).  Peak RSS: the page's renderer process "
              "(VmHWM, reset before the text); JS heap: CDP Performance.getMetrics "
              "JSHeapUsedSize.  Download: Content-Length of every response the engine's page "
              "received (load and warm-up included; on the wire: .wasm, .js, .json gzipped).  "
              "workers: Workers the page started "
              "(onnxruntime-web's threads); isolated: crossOriginIsolated."]
    for engine in engines:
        r = res.get(engine, {})
        for text, cell in r.get("texts", {}).items():
            if "error" in cell:
                lines.append(f"{engine} {text}: {cell['error']}")
        if "error" in r and not r.get("texts"):
            lines.append(f"{engine}: {r['error']}")
        if r.get("blocked"):
            lines.append(f"{engine}: blocked requests (no network): {', '.join(r['blocked'][:5])}")
    return "\n".join(lines)


def module_memory_table(result: dict) -> list[str]:
    """Per engine with stages (this project's), MB of each module's WebAssembly memory
    when loaded and after each text, and the most of its heap in use at once: where the
    renderer's memory goes.  [] if none has any."""
    lines = []
    for engine in result["engines"]:
        r = result["results"].get(engine, {})
        rows = [("loaded", r.get("load_module_memory_mb"))]
        rows += [(text, (r.get("texts", {}).get(text) or {}).get("module_memory_mb"))
                 for text in result["texts"]]
        heaps = [(text, (r.get("texts", {}).get(text) or {}).get("module_heap_mb"))
                 for text in result["texts"]]
        modules = list(dict.fromkeys(name for _, sizes in rows + heaps for name in sizes or {}))
        if not modules:
            continue
        width = max(8, *(len(name) for name in modules))
        header = " ".join(f"{name:>{width}}" for name in modules)
        lines += ["", f"{engine}: WebAssembly memory (MB; a memory never shrinks: its "
                      "high-water mark so far)", f"{'after':10} {header}"]
        lines += [f"{label:10} " + " ".join(fmt(sizes.get(name), f"{width}.1f") for name in modules)
                  for label, sizes in rows if sizes is not None]
        if any(most for _, most in heaps):
            lines += ["", f"{engine}: the most of the heap in use at once speaking the text "
                          "(MB; weights, tensors, the kernels' scratch)", f"{'text':10} {header}"]
            lines += [f"{label:10} " + " ".join(fmt(most.get(name), f"{width}.1f") for name in modules)
                      for label, most in heaps if most]
    return lines


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    engines, texts, res = result["engines"], result["texts"], result["results"]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6))
    width = 0.8 / max(1, len(engines))
    x = np.arange(len(texts))
    for ax, (key, title, _) in zip(axes, METRICS[:3]):
        for i, engine in enumerate(engines):
            cells = [res.get(engine, {}).get("texts", {}).get(t) or {} for t in texts]
            values = [c.get(key) if c.get(key) is not None else np.nan for c in cells]
            ax.bar(x + i * width, values, width, label=engine, color=f"C{i}")
        ax.set_xticks(x + 0.4 - width / 2, texts)
        ax.set_title(title, fontsize=10)
        if key != "peak_rss_mb" and any(p.get_height() > 0 for p in ax.patches):
            ax.set_yscale("log")
    ax = axes[3]
    values = [res.get(e, {}).get("download_bytes", np.nan) / 1e6 for e in engines]
    bars = ax.bar(range(len(engines)), values, color=[f"C{i}" for i in range(len(engines))])
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(engines)), engines)
    ax.set_title("downloaded by the page (MB)", fontsize=10)
    axes[0].legend(fontsize=8)
    m = result["machine"]
    fig.suptitle(f"Kokoro-82M in headless Chromium {m['chromium']}: {m['cpu']}, {m['cores']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wasm", type=Path, help="a --target wasm build (engine tvm-wasm)")
    parser.add_argument("--webgpu", type=Path,
                        help="a --target webgpu build (engine tvm-webgpu: correctness only)")
    parser.add_argument("--wasm-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the tvm engines' stages, e.g. "
                             "KOKORO_EXT_WINOGRAD_CACHE_MB=0 (repeatable; their WASI "
                             "environment: a build's kernels read it as a process's)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"of {', '.join(ENGINES)} (those without a build: left out)")
    parser.add_argument("--texts", default=",".join(TEXTS), help=f"of {', '.join(TEXTS)}")
    parser.add_argument("--only", action="append", default=[], metavar="ENGINE=TEXT,...",
                        help="that engine speaks only these texts (default: tvm-webgpu=word)")
    parser.add_argument("--warm-up", default="word", help="a text's name, or none")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds for a load, the warm-up or one text")
    parser.add_argument("--save-audio", type=Path, metavar="DIR",
                        help="write each text's audio there as ENGINE-TEXT.wav")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--name", default="browser", help="NAME.json, NAME.txt, NAME.png")
    args = parser.parse_args(argv)
    args.engines = [e for e in args.engines.split(",") if e]
    args.texts = [t for t in args.texts.split(",") if t]
    only = {"tvm-webgpu": ["word"]}
    for value in args.only:
        engine, _, texts = value.partition("=")
        only[engine] = texts.split(",")
    args.only = only
    for name, values, known in (("engine", args.engines, ENGINES), ("text", args.texts, TEXTS),
                                ("--only engine", list(only), ENGINES),
                                ("--only text", sum(only.values(), []), TEXTS)):
        unknown = [v for v in values if v not in known]
        if unknown:
            parser.error(f"unknown {name} {', '.join(unknown)}; known: {', '.join(known)}")
    bad_env = [v for v in args.wasm_env if "=" not in v or not v.partition("=")[0].isidentifier()]
    if bad_env:
        parser.error(f"--wasm-env {bad_env[0]!r}: NAME=VALUE")
    if args.warm_up != "none" and args.warm_up not in TEXTS:
        parser.error(f"--warm-up {args.warm_up}: a text's name ({', '.join(TEXTS)}) or none")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)  # the results first: a table's bug loses none
    (args.out / f"{args.name}.json").write_text(
        json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n")
    write_results(args.out, args.name, result, format_tables(result), plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
