"""The wasm build (``--target wasm``: the stages on a browser's CPU, for browsers without
WebGPU) in a real headless Chromium against the CPU build of the same weights: every
stage on the same inputs, the whole synthesis with the browser computing every stage,
the same on a checkpoint's int8 weights (kept int8 in the browser, as the CPU build keeps
them), and ``loadBuild``'s choice between a WebGPU build and it.

Needs chromium, emcc and npm, as tests/test_browser.py (whose helpers it shares).
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from kokoro_ext.run import artifacts
from kokoro_ext.run.pipeline import synthesize_ids, voice_style
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.run.weights import stored_end
from small_build import build_grid, build_small, rewire
# skips as test_browser does; its cpu_trace fixture serves here too
from test_browser import (  # noqa: F401
    PHONEMES, _cpu_trace, _stage_inputs, assert_near, cpu_trace, snr_db,
)

#: The whole synthesis in the browser: 6 frames with the random weights.
SHORT = "ʌ"

# stage: (output, bound on max |browser - cpu| / max |cpu|): float32 kernels of another
# order of summation (TVM's own products against the native kernels), a libm of
# emscripten's (measured: text 2.5e-7, prosody 8.3e-7, source 3.0e-6).
BOUNDS = {
    "text": {"d": 1e-5, "duration": 1e-5, "t_en": 1e-5},
    "prosody": {"F0": 1e-4, "N": 1e-4},
    "source": {"spectrum": 1e-4},
}


@pytest.fixture(scope="module")
def wasm_build(tmp_path_factory):
    """The small config for --target wasm, with the CPU build's random weights (seed 0)."""
    # --wire float32: the CPU build's weights to the bit, so that the stages' bounds
    # measure the kernels (the wire formats: test_wasm_page_decodes_the_wire_formats and
    # test_wasm_stage_on_wire_weights_near_cpu)
    return build_small(tmp_path_factory.mktemp("wasm"), log=lambda _: None, target="wasm",
                       wire="float32")


@pytest.fixture(scope="module")
def browser(wasm_build):
    from kokoro_ext.tools.browser import Browser

    with Browser(wasm_build) as b:
        yield b


def test_wasm_build_layout(wasm_build):
    manifest = artifacts.read_manifest(wasm_build)
    assert manifest.target["mtriple"].startswith("wasm32") and "+simd128" in manifest.target["mattr"]
    assert manifest.cpu_features == () and manifest.lstm_backend == "native"
    # --weight-dtype auto, the wasm default: the random weights lie on no int8 grid
    assert manifest.dense == "native" and manifest.weight_dtype == "auto"
    # one module of the four stages, each stage's symbols under its own prefix
    module = (wasm_build / "stages.wasm").read_bytes()
    assert module[:4] == b"\0asm"
    assert not list(wasm_build.glob("*.tar")) and sorted(wasm_build.glob("*.wasm")) == [wasm_build / "stages.wasm"]
    for name, entry in manifest.stages.items():
        assert entry.file == "stages.wasm" and entry.sha256 == hashlib.sha256(module).hexdigest()
        assert entry.prefix == f"kokoro_{name}_"
        assert f"{entry.prefix}__tvm_ffi__library_bin".encode() in module  # its VM code
        assert all(t.dtype == "float32" and t.wire is None for t in entry.weights.tensors)
        # wasm32 has 64-bit integers: the CPU build's signature (kokoro.js widens int32)
        assert [t.dtype for t in entry.signature.inputs if t.name == "lengths"] == ["int64"]
    for page_file in ("tvmjs.js", "kokoro.js", "text.js"):
        assert (wasm_build / page_file).is_file()


def test_wasm_stages_hold_the_native_kernels(wasm_build):
    """The decoder's convolutions go to the native kernels (kokoro_ext.build.web.kernels),
    linked into the stages' module: the names its host code looks up are registered there, and
    nothing calls the native storage pool, which wasm builds do not have."""
    module = (wasm_build / "stages.wasm").read_bytes()
    for name in (b"kokoro_ext.conv1d_taps", b"kokoro_ext.conv1d_transpose", b"kokoro_ext.conv1d_winograd"):
        assert name in module, name
    assert b"kokoro_ext.storage" not in module


# The decoder's Winograd filter cache budget, from its own module in the page (kokoro.js's
# stage: one tvmjs instance, whose global registry holds the kernels the module linked)
_CACHE_BUDGET = """async ([base, name]) => {
  const { loadBuild } = await import(base + "kokoro.js");
  const { tvm } = await (await loadBuild(base)).stage("decoder");
  tvm.beginScope();
  try {
    return Number(tvm.getGlobalFunc(name)());
  } finally {
    tvm.endScope();
  }
}"""


def _in_fresh_page(browser, script: str, arg):
    """``script`` on ``arg`` in a new page of the build's origin with tvmjs loaded (no
    build loaded: the script loads its own)."""
    page = browser._new_page(browser._browser)
    try:
        page.goto(browser.server.url + artifacts.MANIFEST)
        page.add_script_tag(url=browser.server.url + "tvmjs.js")
        return page.evaluate(script, arg)
    finally:
        page.close()


def test_wasm_decoder_keeps_no_winograd_filter(browser):
    """In the browser the Winograd filters made from int8 taps are transformed at each
    call, none kept (winograd.cc's FilterCache: 192 MB natively): a WebAssembly memory
    never shrinks, so kept filters would stay in the page's memory for good."""
    from kokoro_ext.run import kernels

    budget = _in_fresh_page(browser, _CACHE_BUDGET, [browser.server.url, kernels.WINOGRAD_CACHE_BUDGET])
    assert budget == 0


# Each stage loaded: the largest of tvmjs's call stacks (their JS buffers; each has a
# block of the module's memory of the same size), and the largest weight in bytes
_CALL_STACKS = """async (base) => {
  const { loadBuild } = await import(base + "kokoro.js");
  const build = await loadBuild(base);
  const stacks = {}, weights = {};
  for (const [name, entry] of Object.entries(build.manifest.stages)) {
    const { tvm } = await build.stage(name);
    stacks[name] = Math.max(0, ...tvm.lib.recycledCallStacks.map((s) => s.buffer.byteLength));
    weights[name] = Math.max(0, ...entry.weights.tensors.map(([shape, dtype]) =>
      ({ int8: 1, int64: 8 }[dtype] ?? 4) * shape.reduce((a, b) => a * b, 1)));
  }
  return { stacks, weights };
}"""


def test_wasm_weights_go_straight_into_the_stage_memory(browser):
    """kokoro.js writes a wasm stage's weights into its memory itself: tvmjs's
    copyFromRawBytes would pass each through its call stack, whose JS buffer and block of
    the stage's memory grow to twice the largest copy and stay (the real decoder: 20 MB of
    each for its 10 MB upsampling weight)."""
    got = _in_fresh_page(browser, _CALL_STACKS, browser.server.url)
    assert max(got["weights"].values()) > 64 << 10, got  # weights a stack would have grown to
    assert all(size <= 4 << 10 for size in got["stacks"].values()), got


# A fresh build: stages asked for at once, loads and calls interleaved, against the same
# calls one after another
_AT_ONCE = """async (base) => {
  const { loadBuild } = await import(base + "kokoro.js");
  const frames = 4;
  const text = [{ data: Int32Array.of(0, 5, 6, 7, 0), shape: [1, 5] },
                { data: Int32Array.of(5), shape: [1] },
                { data: new Float32Array(128).fill(0.1), shape: [1, 128] }];
  const source = [{ data: new Float32Array(2 * frames).fill(120), shape: [1, 2 * frames] },
                  { data: Int32Array.of(frames), shape: [1] },
                  { data: new Float32Array(600 * frames * 9).fill(0.01), shape: [1, 600 * frames, 9] }];
  const flat = (outputs) => outputs.map((o) => Array.from(o.data));
  const together = await loadBuild(base);
  const got = await Promise.all([together.run("text", text), together.run("source", source),
                                 together.run("text", text), together.run("source", source)]);
  const apart = await loadBuild(base);
  const want = [await apart.run("text", text), await apart.run("source", source)];
  return { got: got.map(flat), want: want.map(flat) };
}"""


def test_wasm_stages_called_at_once_compute_what_they_compute_apart(browser):
    """Calls made at once (a page that speaks two texts together) share the one module:
    kokoro.js runs one stage load or call at a time in it (tvmjs's scopes are the
    instance's), and each gets what it gets alone."""
    result = _in_fresh_page(browser, _AT_ONCE, browser.server.url)
    text, source = result["want"]
    assert all(np.isfinite(np.concatenate([np.asarray(a) for a in text + source])))
    assert result["got"] == [text, source, text, source]


def test_python_refuses_a_wasm_build(wasm_build):
    with pytest.raises(ValueError, match="compiled for wasm32, a browser's CPU"):
        Synthesizer(wasm_build)


@pytest.mark.parametrize("stage", ["text", "prosody", "source"])
def test_wasm_stage_in_browser_matches_cpu(browser, cpu_trace, stage):
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    manifest = artifacts.read_manifest(browser.directory)
    got = browser_stages(browser, manifest)(stage)(**_stage_inputs(trace, synth, stage))
    assert_near(got, trace.stages[stage], BOUNDS[stage])


def test_whole_synthesis_in_wasm(browser, build_dir):
    """Every stage computed in the browser's CPU, the decoder too, the host steps in
    Python: the audio of the CPU build, to 40 dB."""
    from kokoro_ext.tools.browser import browser_stages

    synth, ids, style, trace = _cpu_trace(build_dir, SHORT)
    manifest = artifacts.read_manifest(browser.directory)
    got = synthesize_ids(browser_stages(browser, manifest), synth.geometry, ids, style,
                         synth.limits, seed=3)  # fmt: skip
    np.testing.assert_array_equal(got.durations, trace.durations)
    assert got.audio.shape == trace.audio.shape
    assert snr_db(trace.audio, got.audio) >= 40


# each stage's threads: what kokoro.js gave it, and the workers its module's pool counts
# (with the caller) once they wait for tasks; the modules and workers the build started
_THREADS = """async () => {
  const build = window.kokoroBuild, threads = {};
  for (const name of Object.keys(build.manifest.stages)) {
    const stage = await build.stage(name);
    for (let i = 0; i < 200 && stage.tvm.exports.kx_threads() < stage.threads; i++) {
      await new Promise((wake) => setTimeout(wake, 10));
    }
    threads[name] = [stage.threads, stage.tvm.exports.kx_threads()];
  }
  const modules = await Promise.all(Object.values(build.modules));
  return { build: build.threads, threads, isolated: crossOriginIsolated,
           modules: modules.length, workers: modules.reduce((n, m) => n + m.workers.length, 0) };
}"""


def test_wasm_stages_run_on_threads_as_on_one(browser, cpu_trace):
    """Three threads asked for, in a cross-origin isolated page (as StaticServer and
    ``python -m kokoro_ext.web`` serve it): the stages' one module has a pool of two
    workers beside the caller, which every stage runs on, and the stages compute what
    they compute on one thread; none asked for: a thread a core."""
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    manifest = artifacts.read_manifest(browser.directory)
    outputs = {}
    for threads in (1, 3):
        with browser.tab(browser.directory, threads=threads) as tab:
            run = browser_stages(tab, manifest)
            outputs[threads] = {stage: run(stage)(**_stage_inputs(trace, synth, stage))
                                for stage in ("text", "prosody", "source")}  # fmt: skip
            got = tab.page.evaluate(_THREADS)
        assert got["isolated"] and got["build"] == threads
        assert got["threads"] == {name: [threads, threads] for name in manifest.stages}
        assert got["modules"] == 1 and got["workers"] == threads - 1
    # the default: a thread a core
    with browser.tab(browser.directory) as tab:
        got = tab.page.evaluate(_THREADS)
        cores = tab.page.evaluate("() => navigator.hardwareConcurrency")
    assert got["build"] == cores
    assert got["threads"] == {name: [cores, cores] for name in manifest.stages}
    for stage, named in outputs[3].items():
        for name, value in named.items():
            one = outputs[1][stage][name]
            assert np.isfinite(value).all(), (stage, name)
            # the same sums: the tasks split whole output items
            np.testing.assert_allclose(value, one, rtol=0, atol=1e-6 * np.max(np.abs(one)))


# The module's heap (cpp/web/threads.cc kx_heap), every stage loaded: bytes in use, and
# the most in use since the last reset (which "reset" does)
_HEAP = """async (reset) => {
  const build = window.kokoroBuild;
  for (const name of Object.keys(build.manifest.stages)) await build.stage(name);
  const { kx_heap } = (await build.module("stages.wasm")).tvm.exports;
  const heap = [kx_heap(0), kx_heap(1)];
  if (reset) kx_heap(3);
  return heap;
}"""


def test_wasm_stage_calls_leave_no_scratch_memory(browser, cpu_trace):
    """The kernels' scratch buffers (threading.h Workspace) are given back when a kernel
    call returns, on the caller and on the workers, and the stages' storage is sized by
    the call (call_sized_storage): a WebAssembly memory never shrinks.  After a stage's
    call the heap holds what it held before and the outputs (with the LSTM's scratch kept,
    the prosody stage leaves 240 KB more), and the text stage's call needs megabytes, not
    the attention planned at the token and batch bounds (124 MB in this small config)."""
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    with browser.tab(browser.directory, threads=2) as tab:
        run = browser_stages(tab, artifacts.read_manifest(browser.directory))
        for stage in ("text", "prosody", "source"):
            before = tab.page.evaluate(_HEAP, True)
            got = run(stage)(**_stage_inputs(trace, synth, stage))
            outputs = sum(np.asarray(v).nbytes for v in got.values())
            after = tab.page.evaluate(_HEAP, True)
            during = after[1] - before[0]
            assert during > 256 << 10, (stage, before, after)
            # what a first call leaves beside the outputs (the VM's frames, function
            # lookups: 140 KB for the prosody stage) may stay
            kept = after[0] - before[0] - outputs
            assert kept <= 192 << 10, (stage, before, after, outputs)
            if stage == "text":
                assert during < 16 << 20, (before, after)


def test_page_not_isolated_runs_on_one_thread(browser, cpu_trace):
    """A host without cross-origin isolation (no SharedArrayBuffer for workers): four
    threads asked for, the stages run on the page's thread alone, and still compute."""
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    manifest = artifacts.read_manifest(browser.directory)
    with browser.tab(browser.directory, threads=4, isolated=False) as tab:
        got = browser_stages(tab, manifest)("text")(**_stage_inputs(trace, synth, "text"))
        threads = tab.page.evaluate(_THREADS)
    assert not threads["isolated"] and threads["build"] == 1
    assert threads["threads"] == {name: [1, 1] for name in manifest.stages}
    want = trace.stages["text"]["d"]
    assert np.max(np.abs(got["d"] - want)) <= BOUNDS["text"]["d"] * np.max(np.abs(want))


@pytest.fixture(scope="module")
def wired(wasm_build, tmp_path_factory):
    """The wasm build with its weights in each wire format, as ``build --wire`` writes
    them (small_build.rewire)."""
    root = tmp_path_factory.mktemp("wire")
    return {wire: rewire(wasm_build, root / wire, wire) for wire in ("int8", "float16")}


# kokoro.js's decodeWeights on every stage's weights file: the SHA-256 of each array, and
# the error of a wire format it does not know
_DECODE = """async (base) => {
  const { decodeWeights } = await import(base + "kokoro.js");
  const manifest = await (await fetch(base + "manifest.json")).json();
  const hex = (digest) => Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  const digests = {};
  for (const [name, entry] of Object.entries(manifest.stages)) {
    const buffer = await (await fetch(base + entry.weights.file)).arrayBuffer();
    const arrays = decodeWeights(buffer, entry.weights.tensors, entry.weights.file);
    digests[name] = [];
    for (const array of arrays) digests[name].push(hex(await crypto.subtle.digest("SHA-256", array)));
  }
  let refused = null;
  try {
    decodeWeights(new ArrayBuffer(64), [[[2, 2], "float32", 0, { dtype: "int4" }]], "x.weights");
  } catch (error) {
    refused = error.message;
  }
  return { digests, refused };
}"""


@pytest.mark.parametrize("wire", ["int8", "float16"])
def test_wasm_page_decodes_the_wire_formats(browser, wired, wire):
    """In Chromium, kokoro.js widens every stage's weights to the float32 arrays of the
    Python decoder (kokoro_ext.run.wire) to the bit, and refuses a wire format it does
    not know."""
    from kokoro_ext.run.weights import load_weights
    from kokoro_ext.tools.browser import StaticServer

    directory = wired[wire]
    manifest = artifacts.read_manifest(directory)
    tensors = [t for e in manifest.stages.values() for t in e.weights.tensors]
    assert {t.wire.dtype for t in tensors if t.wire} == {wire}
    assert any(t.wire is None for t in tensors)  # the small ones stay float32
    server = StaticServer(directory)
    try:
        page = browser._new_page(browser._browser)
        page.goto(server.url + artifacts.MANIFEST)  # the build's origin: a secure context
        got = page.evaluate(_DECODE, server.url)
    finally:
        server.close()
    for name, entry in manifest.stages.items():
        arrays = load_weights(directory / entry.weights.file, entry.weights.tensors)
        want = [hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for a in arrays]
        assert got["digests"][name] == want, name
    refused = 'x.weights: tensor 0 is stored as {"dtype":"int4"}, a wire format this page'
    assert got["refused"].startswith(refused), got["refused"]


# wire: stage: output: bound on max |browser - cpu| / max |cpu| against the CPU build's
# float32 weights: the random weights are not on a float16 or int8 grid (measured in
# Chromium, float16: text 5.5e-4, prosody 1.1e-3; int8: text 0.015, prosody 0.026; the
# CPU build with its own weights through the same rounding: prosody 1.8e-3, 0.08)
WIRE_BOUNDS = {
    "float16": {"text": {"d": 5e-3, "duration": 5e-3, "t_en": 5e-3},
                "prosody": {"F0": 2e-2, "N": 2e-2}},
    "int8": {"text": {"d": 0.1, "duration": 0.1, "t_en": 0.1},
             "prosody": {"F0": 0.25, "N": 0.25}},
}  # fmt: skip


@pytest.mark.parametrize("wire", ["float16", "int8"])
@pytest.mark.parametrize("stage", ["text", "prosody"])
def test_wasm_stage_on_wire_weights_near_cpu(browser, wired, cpu_trace, stage, wire):
    """The page loads and runs a build of weights on the wire (float16: the default): the
    stage's outputs near the CPU build's of the float32 weights."""
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    with browser.tab(wired[wire]) as tab:
        manifest = artifacts.read_manifest(tab.directory)
        got = browser_stages(tab, manifest)(stage)(**_stage_inputs(trace, synth, stage))
    for name, reference in trace.stages[stage].items():
        assert np.isfinite(got[name]).all(), name
        error = np.max(np.abs(got[name] - reference)) / np.max(np.abs(reference))
        assert error <= WIRE_BOUNDS[wire][stage][name], (name, error)


@pytest.fixture(scope="module")
def wasm_int8_build(int8_grid, tmp_path_factory):
    """The checkpoint on int8 grids (conftest's int8_grid) for --target wasm, its weights
    as the target's default --weight-dtype auto stores them: the checkpoint's int8 codes
    and float32 scales.  --wire float32 keeps its other arrays the CPU build's to the bit
    (the int8 ones are stored as they are on every wire)."""
    out = tmp_path_factory.mktemp("wasm-int8") / "artifacts"
    return build_grid(int8_grid, out, "--target", "wasm", "--wire", "float32",
                      log=lambda _: None)  # fmt: skip


def _stored_bytes(directory) -> dict[str, int]:
    """The bytes of a build's weights on the wire, by the dtype they are stored as."""
    stored: dict[str, int] = {}
    for entry in artifacts.read_manifest(directory).stages.values():
        for t in entry.weights.tensors:
            dtype = t.wire.dtype if t.wire else t.dtype
            stored[dtype] = stored.get(dtype, 0) + stored_end(t) - t.offset
    return stored


def test_wasm_build_stores_the_int8_weights_as_int8(wasm_int8_build, tmp_path):
    """By default a wasm build keeps the checkpoint's int8 weights as int8 codes with a
    float32 scale per output channel: most of its bytes, on the float32 wire and on the
    default float16 one alike, where the float32 checkpoint's parameters are 3 times
    more."""
    manifest = artifacts.read_manifest(wasm_int8_build)
    assert manifest.weight_dtype == "auto" and manifest.precision == "fp32"
    stored = _stored_bytes(wasm_int8_build)
    assert stored["int8"] > 0.75 * sum(stored.values()), stored
    parameters = sum(4 * int(np.prod(p.shape)) for e in manifest.stages.values()
                     for p in e.parameters)  # fmt: skip
    files = sum(e.weights.bytes for e in manifest.stages.values())
    assert files < parameters / 3, (files, parameters)
    # the default wire: the int8 codes stored as they are, the other large arrays float16
    wired = rewire(wasm_int8_build, tmp_path / "float16", "float16")
    half = _stored_bytes(wired)
    assert half["int8"] == stored["int8"] and half["float16"] > 0
    tensors = [t for e in artifacts.read_manifest(wired).stages.values() for t in e.weights.tensors]
    assert all(t.wire is None for t in tensors if t.dtype == "int8")
    assert sum(e.weights.bytes for e in artifacts.read_manifest(wired).stages.values()) < files


def test_wasm_page_takes_int8_weights_as_they_are(browser, wasm_int8_build, tmp_path):
    """kokoro.js's decodeWeights gives the int8 arrays' bytes as the file holds them
    beside the float16 ones it widens: what the Python loader reads, to the bit."""
    from kokoro_ext.run.weights import load_weights
    from kokoro_ext.tools.browser import StaticServer

    directory = rewire(wasm_int8_build, tmp_path / "float16", "float16")
    manifest = artifacts.read_manifest(directory)
    server = StaticServer(directory)
    try:
        page = browser._new_page(browser._browser)
        page.goto(server.url + artifacts.MANIFEST)
        got = page.evaluate(_DECODE, server.url)
    finally:
        server.close()
    for name, entry in manifest.stages.items():
        arrays = load_weights(directory / entry.weights.file, entry.weights.tensors)
        assert any(a.dtype == np.int8 for a in arrays) or not arrays, name
        want = [hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for a in arrays]
        assert got["digests"][name] == want, name


@pytest.fixture(scope="module")
def int8_cpu_trace(int8_grid_cpu):
    return _cpu_trace((int8_grid_cpu,), PHONEMES)


@pytest.mark.parametrize("stage", ["text", "prosody", "source"])
def test_wasm_int8_stage_matches_cpu(browser, wasm_int8_build, int8_cpu_trace, stage):
    """On int8 weights, dequantized where the kernels read them, each stage in the
    browser computes what the CPU build of the same int8 weights does (float32 products,
    the float32 build's outputs), within the float32 builds' bounds."""
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = int8_cpu_trace
    with browser.tab(wasm_int8_build) as tab:
        manifest = artifacts.read_manifest(tab.directory)
        got = browser_stages(tab, manifest)(stage)(**_stage_inputs(trace, synth, stage))
    for name, reference in trace.stages[stage].items():
        assert got[name].shape == reference.shape, name
        assert np.isfinite(got[name]).all(), name
        error = np.max(np.abs(got[name] - reference)) / np.max(np.abs(reference))
        assert error <= BOUNDS[stage][name], (name, error)


def test_whole_synthesis_in_wasm_on_int8_weights(browser, wasm_int8_build, int8_grid_cpu):
    """Every stage in the browser on int8 weights, the decoder's too: the audio of the CPU
    build of the same weights, to 40 dB (measured: 102 dB)."""
    from kokoro_ext.tools.browser import browser_stages

    synth, ids, style, trace = _cpu_trace((int8_grid_cpu,), SHORT)
    with browser.tab(wasm_int8_build) as tab:
        manifest = artifacts.read_manifest(tab.directory)
        got = synthesize_ids(browser_stages(tab, manifest), synth.geometry, ids, style,
                             synth.limits, seed=3)  # fmt: skip
    np.testing.assert_array_equal(got.durations, trace.durations)
    assert got.audio.shape == trace.audio.shape
    snr = snr_db(trace.audio, got.audio)
    print(f"wasm on int8 weights against the CPU build: {snr:.1f} dB")
    assert snr >= 40


@pytest.mark.parametrize("webgpu", [False, True], ids=["without-webgpu", "with-webgpu"])
def test_load_build_chooses(browser, tmp_path, webgpu):
    """A site with both builds: ``loadBuild(["webgpu/", "wasm/"])`` loads the WebGPU build
    where the browser has WebGPU, else the wasm build, and says why not the other.
    (Chromium on Linux has WebGPU only with --enable-unsafe-webgpu; the WebGPU build here
    is the wasm build's manifest as a webgpu one: only the choice is tested.)"""
    from kokoro_ext.tools.browser import StaticServer, chromium

    wasm_build = browser.directory.resolve()
    site = tmp_path / "site"
    site.mkdir()
    (site / "wasm").symlink_to(wasm_build, target_is_directory=True)
    (site / "webgpu").mkdir()
    manifest = json.loads((wasm_build / artifacts.MANIFEST).read_text())
    manifest["target"] = {"kind": "webgpu"}
    manifest["requires"] = {"limits": {"maxComputeInvocationsPerWorkgroup": 256}}
    (site / "webgpu" / artifacts.MANIFEST).write_text(json.dumps(manifest))
    for file in ("tvmjs.js", "kokoro.js"):
        shutil.copyfile(wasm_build / file, site / file)
    args = ["--no-sandbox", "--disable-dev-shm-usage"] + ["--enable-unsafe-webgpu"] * webgpu
    server = StaticServer(site)
    # another Chromium of the fixture's Playwright (one Playwright per thread)
    other = browser._playwright.chromium.launch(executable_path=chromium(), args=args)
    try:
        page = other.new_page()
        page.goto(server.url + "kokoro.js")  # the site's origin
        page.add_script_tag(url=server.url + "tvmjs.js")
        got = page.evaluate(
            """async (base) => {
              const { loadBuild } = await import(base + "kokoro.js");
              const build = await loadBuild([base + "webgpu/", base + "wasm/"]);
              return { device: build.device, base: build.base.href, skipped: build.skipped };
            }""",
            server.url,
        )
    finally:
        other.close()
        server.close()
    if webgpu:
        assert got == {"device": "webgpu", "base": server.url + "webgpu/", "skipped": []}
    else:
        assert got["device"] == "wasm" and got["base"] == server.url + "wasm/"
        ((skipped),) = got["skipped"]
        assert skipped["base"] == server.url + "webgpu/" and "WebGPU" in skipped["reason"]


def test_page_without_webgpu_speaks_through_wasm(browser, build_dir, tmp_path):
    """A site of both builds, a browser without WebGPU: the page skips the WebGPU build,
    saying why, and speaks typed text through the wasm build, as the CPU build does."""
    from kokoro_ext.tools.browser import StaticServer

    site = tmp_path / "site"
    site.mkdir()
    (site / "wasm").symlink_to(browser.directory.resolve(), target_is_directory=True)
    (site / "webgpu").mkdir()
    manifest = json.loads((browser.directory / artifacts.MANIFEST).read_text())
    manifest["target"] = {"kind": "webgpu"}
    (site / "webgpu" / artifacts.MANIFEST).write_text(json.dumps(manifest))
    server = StaticServer(site)
    try:
        page = browser.open_page(server.url + "wasm/index.html?builds=../webgpu/,./", webgpu=False)
        status = page.inner_text("#status")
        assert status.startswith("WebAssembly on the CPU: ready (not ../webgpu/: "), status
        assert "WebGPU" in status
        got = page.evaluate(
            """async (text) => {
              const r = await window.kokoroPage.speak(text, { speed: 2, live: false });
              return { audio: Array.from(r.audio), ids: Array.from(r.chunks[0].ids) };
            }""",
            "Oh.",
        )
    finally:
        server.close()
    synth = Synthesizer(build_dir[0])
    trace = synthesize_ids(synth._stage, synth.geometry, got["ids"],
                           voice_style(synth.voice, len(got["ids"]) - 2), synth.limits,
                           speed=2)  # fmt: skip
    audio = np.array(got["audio"], np.float32)
    assert audio.shape == trace.audio.shape
    assert snr_db(trace.audio, audio) >= 40


def test_page_halves_a_chunk_past_the_frame_limit(browser, build_dir, tmp_path):
    """A sentence with more frames than the build's limit (a wasm build's is set by the
    instance's memory) is spoken in halves cut between words, each within the limit and
    each as the CPU build speaks its tokens."""
    from kokoro_ext.text import FrontEnd, phonemes_to_ids
    from kokoro_ext.tools.browser import StaticServer

    text = "Oh, no, oh no, so old."
    synth = Synthesizer(build_dir[0])
    ids = phonemes_to_ids(FrontEnd("a").phonemize(text, markdown=False), synth.vocab)
    whole = synthesize_ids(synth._stage, synth.geometry, ids, voice_style(synth.voice, len(ids) - 2),
                           synth.limits, speed=2)  # fmt: skip
    limit = whole.frames - 1
    short = tmp_path / "short"
    short.mkdir()
    for item in browser.directory.iterdir():
        if item.name != artifacts.MANIFEST:
            (short / item.name).symlink_to(item.resolve(), target_is_directory=item.is_dir())
    manifest = json.loads((browser.directory / artifacts.MANIFEST).read_text())
    manifest["limits"]["frames"] = limit
    (short / artifacts.MANIFEST).write_text(json.dumps(manifest))
    server = StaticServer(short)
    try:
        page = browser.open_page(server.url + "index.html", webgpu=False)
        got = page.evaluate(
            """async (text) => {
              const r = await window.kokoroPage.tts.generate(text, { speed: 2 });
              return r.chunks.map((c) => ({ ids: Array.from(c.ids), audio: Array.from(c.audio),
                                            frames: c.frames, text: c.text }));
            }""",
            text,
        )
    finally:
        server.close()
    assert len(got) >= 2, [c["text"] for c in got]
    assert " ".join(c["text"] for c in got) == text
    for index, chunk in enumerate(got):
        assert chunk["frames"] <= limit
        # each chunk's noise seeded with its index, as the Synthesizer seeds it
        trace = synthesize_ids(synth._stage, synth.geometry, chunk["ids"],
                               voice_style(synth.voice, len(chunk["ids"]) - 2), synth.limits,
                               speed=2, seed=index)  # fmt: skip
        assert snr_db(trace.audio, np.array(chunk["audio"], np.float32)) >= 40


#: Several chunks at the small build's limits: sentences, a clause.
WORKER_TEXT = "Oh. So old, so slow. No."

# The page's synthesis of `text`, with the main thread's long tasks (PerformanceObserver
# "longtask": a task of 50 ms or more) while it runs.
_TIMED = """async (text) => {
  const long = [];
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) long.push(entry.duration);
  });
  observer.observe({ type: "longtask" });
  const t0 = performance.now();
  const r = await window.kokoroPage.tts.generate(text, { speed: 2 });
  const ms = performance.now() - t0;
  await new Promise((resolve) => setTimeout(resolve, 200));  // the observer's last entries
  observer.disconnect();
  return { long, ms, audio: Array.from(r.audio),
           chunks: r.chunks.map((c) => ({ text: c.text, pause: c.pause, words: c.words })) };
}"""


@pytest.fixture(scope="module")
def worker_page_runs(browser):
    """The page's synthesis of WORKER_TEXT with its Web Worker (the page's default) and
    on its main thread (?worker=0), each in a new tab: audio, chunks, long tasks."""
    runs = {}
    for name, query in (("worker", ""), ("main", "?worker=0")):
        page = browser.open_page("index.html" + query, webgpu=False)
        try:
            runs[name] = page.evaluate(_TIMED, WORKER_TEXT)
            runs[name]["voices"] = page.evaluate("() => window.kokoroPage.tts.listVoices()")
            runs[name]["kind"] = page.evaluate("() => window.kokoroPage.tts.constructor.name")
        finally:
            page.close()
    return runs


def test_worker_speaks_as_the_main_thread(worker_page_runs, browser):
    """KokoroTTS.load(base, {worker: true}) is the same API: the same chunks and audio to
    the bit as the page's own synthesis, and the build's voices."""
    worker, main = worker_page_runs["worker"], worker_page_runs["main"]
    assert (worker["kind"], main["kind"]) == ("KokoroWorker", "KokoroTTS")
    assert len(worker["chunks"]) >= 2 and worker["chunks"] == main["chunks"]
    assert worker["audio"] == main["audio"]
    assert worker["voices"] == main["voices"] == json.loads((browser.directory / "voices.json").read_text())


def test_page_stays_responsive_while_the_worker_speaks(worker_page_runs):
    """The main thread's longest task while the worker speaks is under 100 ms; the same
    synthesis on the main thread gives it long tasks (the measure sees them)."""
    worker, main = worker_page_runs["worker"], worker_page_runs["main"]
    longest = max(worker["long"], default=0)
    print(f"longest main-thread task: worker {longest:.0f} ms of {worker['ms']:.0f} ms, "
          f"main thread {max(main['long'], default=0):.0f} ms of {main['ms']:.0f} ms")
    assert longest < 100, worker["long"]
    # the observer sees the main thread's long tasks (measured: 138-344 ms)
    assert main["long"], "no long task seen on the main thread: the measure is blind"


# Text arriving piece by piece (an LLM's reply): the second piece comes only once the
# first sentence has been spoken (or after a minute, which fails the test).
_PIECES = """async () => {
  const tts = window.kokoroPage.tts;
  let release, releasedBy = null;
  const gate = new Promise((resolve) => (release = (by) => { releasedBy ??= by; resolve(); }));
  setTimeout(() => release("timer"), 60000);
  async function* reply() {
    yield "O";
    yield "h. So old, ";
    await gate;
    yield "so slow. No.";
  }
  const chunks = [];
  for await (const c of tts.stream(reply(), { speed: 2 })) {
    chunks.push({ text: c.text, pause: c.pause, audio: Array.from(c.audio), words: c.words });
    release("chunk");
  }
  return { chunks, releasedBy };
}"""


@pytest.mark.parametrize("query", ["", "?worker=0"], ids=["worker", "main-thread"])
def test_text_arriving_in_pieces_is_spoken_by_sentence(browser, worker_page_runs, query):
    """An async iterable of text: each sentence is spoken once complete, before the rest
    has come; the chunks, pauses, seeds and audio are those of the whole text."""
    page = browser.open_page("index.html" + query, webgpu=False)
    try:
        got = page.evaluate(_PIECES)
    finally:
        page.close()
    assert got["releasedBy"] == "chunk"
    whole = worker_page_runs["main"]
    assert [c["text"] for c in got["chunks"]] == [c["text"] for c in whole["chunks"]]
    assert [c["pause"] for c in got["chunks"]] == [c["pause"] for c in whole["chunks"]]
    # the words' offsets are into the text so far: the whole text's
    assert [c["words"] for c in got["chunks"]] == [c["words"] for c in whole["chunks"]]
    gaps = [round(c["pause"] * 24000) for c in got["chunks"]]
    joined = [x for gap, c in zip(gaps, got["chunks"]) for x in [0.0] * gap + c["audio"]]
    assert joined == whole["audio"]


def _site_copy(build, folder, files_json: bool):
    """``build`` as another folder of links (the module's build left as it is), with a
    files.json (kokoro_ext.build.web.package.write_file_list) where asked."""
    from kokoro_ext.build.web import package

    folder.mkdir()
    for item in build.iterdir():
        if item.name != "files.json":
            (folder / item.name).symlink_to(item.resolve(), target_is_directory=item.is_dir())
    if files_json:
        package.write_file_list(folder)
    return folder


_SPEAK = """async () => {
  const r = await window.kokoroPage.speak("Oh.", { speed: 2, live: false });
  return { audio: Array.from(r.audio), cache: window.kokoroPage.cache,
           status: document.getElementById("status").textContent };
}"""


@pytest.mark.parametrize("files_json", [False, True], ids=["manifest", "files-json"])
def test_second_visit_loads_from_the_cache_offline(browser, tmp_path, files_json):
    """The page's service worker keeps the build in Cache Storage: a second visit asks
    the server for the manifest (and the browser for sw.js) only, and with the server
    stopped the page loads and speaks the same audio from the cache."""
    from kokoro_ext.tools.browser import StaticServer

    folder = _site_copy(browser.directory, tmp_path / "site", files_json)
    server = StaticServer(folder)
    context = browser._browser.new_context()  # one profile: its service worker and caches
    try:
        context.set_default_timeout(browser.timeout_ms)
        page = context.new_page()
        page.goto(server.url + "index.html")
        page.wait_for_function("() => window.kokoroPage?.ready")
        first = page.evaluate(_SPEAK)
        page.close()
        assert first["cache"] == "on", first
        downloaded = set(server.requests)
        assert {"/text.weights", "/stages.wasm", "/lexicon-en-us.json"} <= downloaded, downloaded

        server.requests.clear()
        page = context.new_page()
        page.goto(server.url + "index.html")
        page.wait_for_function("() => window.kokoroPage?.ready")
        second = page.evaluate(_SPEAK)
        page.close()
        assert set(server.requests) <= {"/manifest.json", "/sw.js"}, server.requests
        assert second["audio"] == first["audio"]

        server.close()
        page = context.new_page()
        page.goto(server.url + "index.html")
        page.wait_for_function("() => window.kokoroPage?.ready")
        offline = page.evaluate(_SPEAK)
        page.close()
        assert offline["status"].startswith("WebAssembly on the CPU: ready"), offline["status"]
        assert offline["audio"] == first["audio"]
    finally:
        context.close()
        server.close()


def test_cache_refuses_a_file_not_of_the_manifest(browser, tmp_path):
    """A stage's weights whose bytes are not the ones the manifest's SHA-256 names are
    refused (HTTP 502 from the service worker), not cached, and the page says why."""
    from kokoro_ext.tools.browser import StaticServer

    folder = _site_copy(browser.directory, tmp_path / "site", False)
    weights = folder / "text.weights"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.unlink()
    weights.write_bytes(bytes(data))
    server = StaticServer(folder)
    context = browser._browser.new_context()
    try:
        context.set_default_timeout(browser.timeout_ms)
        page = context.new_page()
        page.goto(server.url + "index.html")
        page.wait_for_function("() => window.kokoroPage?.ready")
        error = page.evaluate("""async () => {
          try { await window.kokoroPage.speak("Oh.", { live: false }); return null; }
          catch (error) { return error.message; }
        }""")
        cached = page.evaluate("""async () =>
          (await (await caches.open("kokoro-tvm-ext")).keys()).map((r) => new URL(r.url).pathname)""")
    finally:
        context.close()
        server.close()
    assert error is not None and "text.weights: HTTP 502" in error, error
    assert "/text.weights" not in cached, cached
