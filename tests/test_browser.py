"""The WebGPU build in a real headless Chromium (SwiftShader's WebGPU on this CPU-only
machine) against the CPU build of the same weights: every stage on the same inputs, then
the whole synthesis with the browser computing every stage.

Needs chromium, emcc (Debian: chromium, emscripten) and npm, and for the build in node on
Dawn the Vulkan loader (Debian: libvulkan1); .ci/run installs them.
Elsewhere these tests skip, saying which is missing; under CI they fail instead.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from kokoro_ext.build.driver import BuildOptions, rebuild_weights
from kokoro_ext.run import artifacts
from kokoro_ext.run.pipeline import synthesize_ids, voice_style
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.text.g2p import phonemes_to_ids
from small_build import build_small

TOOLS = {"chromium": "chromium", "emcc": "emscripten", "npm": "npm"}
_missing = [f"{tool} (Debian: {package})" for tool, package in TOOLS.items() if not shutil.which(tool)]
if _missing and not os.environ.get("CI"):
    pytest.skip(f"needs {', '.join(_missing)}", allow_module_level=True)

PHONEMES = "həlˈoʊ wˈɜːld"  # "hello world": 14 tokens, 31 frames with the random weights
#: What the page speaks: 5 frames at twice the speed with the random weights.  SwiftShader
#: runs the decoder at about 25 s a frame (its convolutions a thread per output; measured:
#: 31 frames in 789 s).
TYPED, TYPED_SPEED = "Oh.", 2


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - other) ** 2)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30)))


@pytest.fixture(scope="module")
def webgpu_build(tmp_path_factory):
    """The small config for --target webgpu, with the CPU build's random weights (seed 0)."""
    # --wire float32: the CPU build's weights to the bit, so that the stages' bounds
    # measure the kernels (the wire formats: test_browser_wasm.py)
    return build_small(tmp_path_factory.mktemp("webgpu"), log=lambda _: None, target="webgpu",
                       wire="float32")


def _cpu_trace(build_dir, phonemes):
    synth = Synthesizer(build_dir[0])
    ids = phonemes_to_ids(phonemes, synth.vocab)
    style = voice_style(synth.voice, len(ids) - 2)
    trace = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, seed=3)
    return synth, ids, style, trace


@pytest.fixture(scope="module")
def cpu_trace(build_dir):
    return _cpu_trace(build_dir, PHONEMES)


@pytest.fixture(scope="module")
def browser(webgpu_build):
    from kokoro_ext.tools.browser import Browser

    with Browser(webgpu_build) as b:
        yield b


def test_webgpu_build_layout(webgpu_build):
    manifest = artifacts.read_manifest(webgpu_build)
    assert manifest.target["kind"] == "webgpu"
    assert manifest.cpu_features == () and manifest.lstm_backend == "gpu"
    assert manifest.requires["limits"]["maxComputeInvocationsPerWorkgroup"] == 256
    # the stages' one module (their host code and WGSL, each under its prefix)
    assert (webgpu_build / "stages.wasm").read_bytes()[:4] == b"\0asm"
    for name, entry in manifest.stages.items():
        assert entry.file == "stages.wasm" and entry.prefix == f"kokoro_{name}_"
        assert all(t.dtype == "float32" and t.wire is None for t in entry.weights.tensors)
        # WGSL has no 64-bit integers: the page passes token ids and lengths as int32
        assert "int64" not in {t.dtype for t in entry.signature.inputs}
    for page_file in ("tvmjs.js", "kokoro.js"):
        assert (webgpu_build / page_file).is_file()


def test_python_refuses_a_webgpu_build(webgpu_build):
    with pytest.raises(ValueError, match="compiled for webgpu, not for a CPU: .* browser"):
        Synthesizer(webgpu_build)


def test_weights_only_refuses_a_webgpu_build(webgpu_build):
    # its weight transform ran at build time on this machine: the stages ship none
    options = BuildOptions(out=webgpu_build, weights_only=True, random_weights=True)
    with pytest.raises(ValueError, match="a webgpu build ships none .* build from scratch"):
        rebuild_weights(options)


# stage: (output, bound on max |browser - cpu| / max |cpu|); float32 kernels of another
# order of summation, transcendental functions of another library (measured: 7.6e-7,
# 3.7e-6, 3.0e-6).  The decoder is held to the CPU build's audio in the whole synthesis.
BOUNDS = {
    "text": {"d": 1e-4, "duration": 1e-4, "t_en": 1e-4},
    "prosody": {"F0": 1e-3, "N": 1e-3},
    "source": {"spectrum": 1e-3},
}


def assert_near(got: dict, want: dict, bounds: dict) -> None:
    """Each output of ``want`` in ``got``, of its shape, finite and within its bound of
    max |got - want| / max |want|."""
    assert set(got) == set(want)
    for name, reference in want.items():
        assert got[name].shape == reference.shape, name
        assert np.isfinite(got[name]).all(), name
        error = np.max(np.abs(got[name] - reference)) / np.max(np.abs(reference))
        assert error <= bounds[name], (name, error)


@pytest.mark.parametrize("stage", ["text", "prosody", "source"])
def test_stage_in_browser_matches_cpu(browser, cpu_trace, stage):
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    manifest = artifacts.read_manifest(browser.directory)
    inputs = _stage_inputs(trace, synth, stage)
    got = browser_stages(browser, manifest)(stage)(**inputs)
    assert_near(got, trace.stages[stage], BOUNDS[stage])


@pytest.fixture(scope="module")
def dawn(webgpu_build):
    """The WebGPU build in node on Dawn (npm webgpu) over SwiftShader's Vulkan driver,
    as a machine with a GPU and no browser runs it over its GPU's."""
    from kokoro_ext.tools.webgpu_node import NodeWebGpu, swiftshader_env, vulkan_loader

    if vulkan_loader() is None and not os.environ.get("CI"):
        pytest.skip("needs the Vulkan loader (Debian: libvulkan1)")
    env = swiftshader_env()
    assert env, "Debian's chromium ships SwiftShader's Vulkan driver; this one has none"
    with NodeWebGpu(webgpu_build, env=env) as node:
        yield node


@pytest.mark.parametrize("stage", ["text", "prosody", "source"])
def test_stage_in_node_on_dawn_matches_cpu(dawn, cpu_trace, stage):
    """The page's kokoro.js and tvmjs in node, Dawn's WebGPU for the browser's: the same
    bounds against the CPU build, on Dawn's SwiftShader adapter, timed."""
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    manifest = artifacts.read_manifest(dawn.directory)
    got = browser_stages(dawn, manifest)(stage)(**_stage_inputs(trace, synth, stage))
    assert "swiftshader" in dawn.adapter.lower(), dawn.adapter
    assert dawn.seconds[-1][0] == stage and dawn.seconds[-1][1] > 0
    assert_near(got, trace.stages[stage], BOUNDS[stage])


def test_node_on_dawn_says_what_failed(dawn):
    """A stage given the wrong inputs: the error kokoro.js throws, not a hang."""
    with pytest.raises(RuntimeError, match="the text stage failed in node: .*stage text takes 3 inputs, got 1"):
        dawn.run_stage("text", [np.zeros((1, 4), np.int32)])


def test_source_of_long_phases_in_browser_matches_cpu(browser, cpu_trace):
    """A voice held at 220 Hz for 4 s: its 9th harmonic's phase reaches 50,000 radians,
    where a float32 step is 0.004 radians and the browser's sine and the CPU's libm part
    (measured: 58.5 dB).  The spectrum is compared as complex numbers: a phase near pi may
    come out as -pi, the same number (kokoro_ext.tools.validate.compare_spectrum)."""
    from kokoro_ext.tools.validate import compare_spectrum
    from kokoro_ext.run.noise import source_noise
    from kokoro_ext.tools.browser import browser_stages

    synth, _, _, trace = cpu_trace
    frames = 160
    samples = synth.geometry.samples_per_frame * frames
    f0_per_frame = trace.stages["prosody"]["F0"].shape[1] // trace.frames
    inputs = {
        "F0": np.full((1, f0_per_frame * frames), 220, np.float32),
        "lengths": np.array([frames], dtype=np.int64),
        "noise": source_noise(3, 1, samples, synth.geometry.harmonics),
    }
    want = synth._stage("source")(**inputs)["spectrum"]
    manifest = artifacts.read_manifest(browser.directory)
    got = browser_stages(browser, manifest)("source")(**inputs)["spectrum"]
    assert compare_spectrum(got, want).snr_db >= 50


def _stage_inputs(trace, synth, stage):
    """What the CPU run gave ``stage``, from its trace (the stages' outputs) and the host
    steps, recomputed as kokoro_ext.run.pipeline does."""
    from kokoro_ext.run.alignment import align
    from kokoro_ext.run.noise import source_noise

    text = trace.stages["text"]
    frames = trace.frames
    lengths = np.array([frames], dtype=np.int64)
    if stage == "text":
        ids = np.array([phonemes_to_ids(PHONEMES, synth.vocab)], dtype=np.int64)
        style = voice_style(synth.voice, ids.shape[1] - 2)[:, 128:]
        return {"input_ids": ids, "lengths": np.array([ids.shape[1]]), "style": style}
    ids = phonemes_to_ids(PHONEMES, synth.vocab)
    style = voice_style(synth.voice, len(ids) - 2)
    prosody = trace.stages["prosody"]
    if stage == "prosody":
        en = align(text["d"][0].T, trace.durations, frames)[None]
        return {"en": en, "lengths": lengths, "style": style[:, 128:]}
    samples = synth.geometry.samples_per_frame * frames
    noise = source_noise(3, 1, samples, synth.geometry.harmonics)
    return {"F0": prosody["F0"], "lengths": lengths, "noise": noise}


def test_page_speaks_typed_text(browser, build_dir):
    """The demo page speaks typed text, everything in the browser: text.js's phonemes,
    host.js's durations, alignment and noise, the four stages; an <audio> of the speech's
    length; the CPU build's audio for the same ids, to 40 dB."""
    import warnings

    from kokoro_ext.text import FrontEnd

    page = browser.open_page()
    assert page.evaluate("() => window.kokoroPage.error") is None
    got = page.evaluate(
        """async ([text, speed]) => {
          const r = await window.kokoroPage.speak(text, { speed, live: false });
          const audio = document.getElementById("audio");
          if (audio.readyState < 1) await new Promise((ok) => (audio.onloadedmetadata = ok));
          return { audio: Array.from(r.audio), duration: audio.duration,
                   chunks: r.chunks.map((c) => ({ ids: Array.from(c.ids), words: c.words,
                                                  durations: Array.from(c.durations) })) };
        }""",
        [TYPED, TYPED_SPEED],
    )
    (chunk,) = got["chunks"]
    synth = Synthesizer(build_dir[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        phonemes = FrontEnd("a").phonemize(TYPED, markdown=False)
    assert chunk["ids"] == phonemes_to_ids(phonemes, synth.vocab)
    assert [w["text"] for w in chunk["words"]] == ["Oh."]
    trace = synthesize_ids(synth._stage, synth.geometry, chunk["ids"],
                           voice_style(synth.voice, len(chunk["ids"]) - 2), synth.limits,
                           speed=TYPED_SPEED)  # fmt: skip
    np.testing.assert_array_equal(chunk["durations"], trace.durations)
    audio = np.array(got["audio"], np.float32)
    assert audio.shape == trace.audio.shape
    assert abs(got["duration"] - len(audio) / 24000) < 1e-3
    assert snr_db(trace.audio, audio) >= 40


def test_page_without_webgpu_says_why(browser):
    """Chromium as shipped on Linux, without WebGPU: the page names what is missing."""
    page = browser.open_page(webgpu=False)
    error = page.evaluate("() => window.kokoroPage.error")
    assert error is not None and "WebGPU" in error, error
    assert page.inner_text("#status").startswith("Kokoro cannot run here: ")
    assert page.is_disabled("#speak")
