"""The CUDA build on a machine without a GPU: the small config for one architecture
(sm_90) built once for the module, its manifest, the machine code its libraries hold (and
no CUDA source), the refusal where no GPU or driver is, the schedules; the plain ``cuda``
target's fatbin (every preset's architecture and PTX) on one stage.  The tests that run
the kernels need an NVIDIA GPU and skip without one, saying so (bench/gpu.py is the check
on a GPU machine).

Needs nvcc (the CUDA 13 toolkit): without it these tests skip, saying so; under CI they
fail instead.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from kokoro_ext.build import cuda
from kokoro_ext.build.backend import CUDA, CUDA_TARGETS, resolve
from kokoro_ext.build.backend.cuda import CUDA_ARCHITECTURES
from kokoro_ext.run import artifacts
from kokoro_ext.run import cuda as run_cuda
from kokoro_ext.run.synthesizer import Synthesizer
from gpu_bundle import gpu_script, run_in_bundle
from small_build import build_small

if shutil.which("nvcc") is None and not os.environ.get("CI"):
    pytest.skip("needs nvcc (the CUDA 13 toolkit)", allow_module_level=True)


def _has_gpu() -> bool:
    try:
        ctypes.CDLL(run_cuda.DRIVER_NAME)
        run_cuda.device_architecture(0)
    except (OSError, ValueError):
        return False
    return True


needs_gpu = pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU and its driver")


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory):
    """The small config for --target cuda-sm90 (random weights, seed 0)."""
    return build_small(tmp_path_factory.mktemp("cuda"), log=lambda _: None, target="cuda-sm90")


def test_cuda_targets_parse():
    assert resolve("cuda") is CUDA
    assert CUDA.architectures == CUDA_ARCHITECTURES and CUDA.ptx == "compute_90"
    for arch in CUDA_ARCHITECTURES:
        preset = CUDA_TARGETS[f"cuda-{arch.replace('_', '')}"]
        assert preset.architectures == (arch,) and preset.ptx is None
        assert resolve(preset.name) is preset and preset.target["arch"] == arch
        # a build's manifest names its target back (cuda-sm80's is the plain cuda's)
        assert resolve(dict(preset.target)) is (CUDA if arch == "sm_80" else preset)
    assert resolve("cuda").target["kind"] == "cuda"
    # TVM's default: no limit below its own on the operators fused into a kernel
    assert CUDA.gpu_pipeline.fuse_depth == 256 and not CUDA.gpu_pipeline.wgsl


def test_cuda_build_layout(cuda_build):
    manifest = artifacts.read_manifest(cuda_build)
    assert manifest.target["kind"] == "cuda" and manifest.target["arch"] == "sm_90"
    # the device steps' module (kokoro_ext.build.steps) beside the stages, recorded
    steps = {"file": "steps.so", "sha256": artifacts.sha256(cuda_build / "steps.so")}
    assert manifest.requires == {"architectures": ["sm_90"], "ptx": None, "steps": steps}
    assert manifest.cpu_features == () and manifest.lstm_backend == "gpu"
    for name, entry in manifest.stages.items():
        assert entry.file == f"{name}.so"
        assert all(t.dtype == "float32" for t in entry.weights.tensors)
        # CUDA has 64-bit integers: the signature is the CPU build's
        assert "int64" in {t.dtype for t in entry.signature.inputs}


def test_cuda_stage_libraries_hold_machine_code_not_source(cuda_build):
    manifest = artifacts.read_manifest(cuda_build)
    files = {name: entry.file for name, entry in manifest.stages.items()}
    for name, file in {**files, "steps": manifest.requires["steps"]["file"]}.items():
        images = cuda.images(cuda_build / file)
        assert images, f"{name}: no CUDA module"
        for image in images:
            assert image.format == cuda.FATBIN_FORMAT, name
            assert cuda.architectures_of(image.code) == (["sm_90"], []), name
            assert b"extern \"C\" __global__" not in image.code, name  # no CUDA source


def test_fatbin_for_every_architecture_and_ptx(tmp_path):
    # the plain target on the source stage (its kernels: sin of long phases)
    from kokoro_ext.build.compiler import compile_stage
    from kokoro_ext.build.model import build_model, small_config
    from kokoro_ext.build.stages import STAGES

    model = build_model(small_config(), weights=None, seed=0)
    compiled = compile_stage(STAGES["source"], model, CUDA)
    path = tmp_path / "source.so"
    compiled.executable.export_library(
        str(path), fcompile=CUDA.fcompile(), fpack_imports=CUDA.fpack_imports()
    )
    (image,) = cuda.images(path)
    assert cuda.architectures_of(image.code) == (list(CUDA_ARCHITECTURES), ["compute_90"])


def test_the_kernels_are_compiled_without_fast_math(tmp_path):
    command = cuda.nvcc_command(tmp_path / "k.cu", tmp_path / "k.fatbin", ["sm_80", "sm_90"], "compute_90")
    assert "--use_fast_math" not in command and "--fatbin" in command
    assert "arch=compute_90,code=compute_90" in command  # the PTX
    assert "arch=compute_80,code=sm_80" in command


@pytest.fixture(scope="module")
def cuda_bundle(cuda_build, tmp_path_factory):
    """bench/gpu.py prepare's bundle of the small CUDA build (tvm-ffi of this Python)."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"  # no download in a test
    out = tmp_path_factory.mktemp("bundle") / "bundle"
    return gpu_script().prepare(cuda_build, out, python=here, log=lambda _: None)


def test_gpu_bundle_carries_the_weight_transforms(cuda_build, cuda_bundle, tmp_path):
    """bench/gpu.py prepare: each stage's weight transform compiled alone for this host,
    which gives exactly the weights the build stored (prepare checks it), and runs where
    only the bundle, torch and numpy are (no TVM package, no native kernels): there it
    makes another seed's weights, and the manifest it rewrites lists them."""
    gpu, bundle = gpu_script(), cuda_bundle
    manifest = artifacts.read_manifest(cuda_build)
    with_weights = {n for n, e in manifest.stages.items() if e.parameters}
    build = bundle / gpu.BUILDS / cuda_build.name
    assert {p.stem for p in (bundle / gpu.TRANSFORMS / cuda_build.name).glob("*.so")} == with_weights
    assert not list(build.glob("*.weights"))
    done = run_in_bundle(bundle, (
        "from pathlib import Path; import gpu\n"
        "gpu.make_weights(Path('.').resolve(), 1)\n"
        "from kokoro_ext.run import artifacts, native\n"
        "assert native._loaded is None  # the transforms need TVM's runtime alone\n"
        f"build = {str(Path(gpu.BUILDS) / cuda_build.name)!r}\n"
        "artifacts.verify(build, artifacts.read_manifest(build), trust_stamps=False)\n"
    ), tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    made = artifacts.read_manifest(build)
    assert made.weights.random_seed == 1
    for name, entry in made.stages.items():
        assert entry.weights.tensors == manifest.stages[name].weights.tensors
        if name in with_weights:
            assert entry.weights.sha256 != manifest.stages[name].weights.sha256


# The host steps of a synthesis, run in the bundle with stand-in stages that check what
# they are given and return the shapes the contract names: durations, both alignments,
# the source noise (through the carried native kernels), the audio's length.
_HOST_PATH = """
import json, sys
import numpy as np, torch
from kokoro_ext.run import artifacts, native
from kokoro_ext.run.cpu import HostCPU
from kokoro_ext.run.pipeline import synthesize_ids, voice_style
from kokoro_ext.tools.reference import source_noise
xeon = HostCPU('sapphirerapids', json.loads(sys.argv[1]))
chosen = native.select(native.installed(native.LIBRARY_DIR), host=xeon)
assert chosen.variant == 'avx2', chosen
manifest = artifacts.read_manifest(sys.argv[2])
geometry, seen = manifest.geometry, {}
tokens, per_token = 9, 3
def stage(name):
    def run(**x):
        seen[name] = {k: v.shape for k, v in x.items()}
        f = x['lengths'][0]
        if name == 'text':
            T = x['input_ids'].shape[1]
            return {'d': np.ones((1, T, 5), np.float32) * np.arange(T, dtype=np.float32)[None, :, None],
                    'duration': np.full((1, T), per_token, np.float32),
                    't_en': np.ones((1, 6, T), np.float32) * np.arange(T, dtype=np.float32)}
        if name == 'prosody':
            assert np.array_equal(x['en'][0, 0], np.repeat(np.arange(tokens, dtype=np.float32), per_token))
            return {'F0': np.full((1, 2 * f), 100.0, np.float32), 'N': np.zeros((1, 2 * f), np.float32)}
        if name == 'source':
            seen['noise'] = x['noise']
            return {'spectrum': np.zeros((1, 22, geometry.spectrum_per_frame * f + 1), np.float32)}
        assert np.array_equal(x['asr'][0, 0], np.repeat(np.arange(tokens, dtype=np.float32), per_token))
        return {'audio': np.zeros((1, geometry.samples_per_frame * f), np.float32)}
    return run
ids = [0] + [5] * (tokens - 2) + [0]
style = voice_style(np.zeros((510, 1, 256), np.float32), tokens - 2)
trace = synthesize_ids(stage, geometry, ids, style, manifest.limits, 1.0, 7)
frames = tokens * per_token
assert trace.frames == frames and trace.audio.shape == (geometry.samples_per_frame * frames,)
want = source_noise(7, 1, geometry.samples_per_frame * frames, geometry.harmonics).numpy()
assert np.array_equal(seen['noise'], want), 'the carried kernels draw other noise than torch'
assert native._loaded.name == 'libkokoro_ext_kernels.avx2.so', native._loaded
print('host path ok', seen)
"""


def test_cuda_bundle_host_path_runs_alone(cuda_bundle, tmp_path):
    """bench/gpu.py's CUDA bundle runs a synthesis's host steps (imports, durations,
    alignment, the source noise through the native kernels it carries, built for a
    portable x86-64 level) in a process that sees only the bundle, torch and numpy, and
    would load the same kernels on a simulated Sapphire Rapids Xeon (the GPU machines'
    CPU, which lacks AMD's sse4a that a -march=native build here may use)."""
    from kokoro_ext.build.target import cpu_model_features

    bundle = cuda_bundle
    recorded = json.loads((Path(__file__).parent / "data" / "host-zen3-kvm.json").read_text())
    model = cpu_model_features("sapphirerapids")
    xeon = json.dumps({f: f in model for f in recorded["features"]})
    assert not json.loads(xeon)["sse4a"] and json.loads(xeon)["avx512f"]
    (build,) = (bundle / gpu_script().BUILDS).iterdir()
    arguments = [xeon, str(build)]
    done = run_in_bundle(bundle, f"import sys; sys.argv[1:] = {arguments!r}\n" + _HOST_PATH,
                         tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "host path ok" in done.stdout


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: the refusal is for one without")
def test_a_machine_without_gpu_refuses_the_cuda_build(cuda_build):
    with pytest.raises(ValueError, match="no NVIDIA driver|no CUDA GPU|CUDA 13 runtime"):
        Synthesizer(cuda_build)


def test_an_architecture_the_build_lacks_is_named():
    requires = {"architectures": ["sm_90"], "ptx": None}
    assert run_cuda.runs_on("sm_90", requires) and not run_cuda.runs_on("sm_89", requires)
    every = {"architectures": list(CUDA_ARCHITECTURES), "ptx": "compute_90"}
    assert run_cuda.runs_on("sm_100", every) and run_cuda.runs_on("sm_120", every)
    assert not run_cuda.runs_on("sm_75", every)


@needs_gpu
def test_cuda_build_matches_cpu_build(cuda_build, build_dir):
    from kokoro_ext.run.pipeline import synthesize_ids, voice_style
    from kokoro_ext.text.g2p import phonemes_to_ids

    phonemes = "həlˈoʊ wˈɜːld"
    audio = {}
    for directory in (build_dir[0], cuda_build):
        synth = Synthesizer(directory)
        ids = phonemes_to_ids(phonemes, synth.vocab)
        style = voice_style(synth.voice, len(ids) - 2)
        trace = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, seed=3)
        audio[directory] = trace.audio
    reference, got = audio[build_dir[0]], audio[cuda_build]
    noise = np.sum((reference.astype(np.float64) - got) ** 2)
    assert 10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30)) > 40


@needs_gpu
def test_cuda_device_steps_match_the_host_steps(cuda_build):
    """On the GPU, a chunk with its tensors on the device (kokoro_ext.run.resident) gives
    the host path's audio on the same noise, and its own Philox noise is philox_normal's."""
    from kokoro_ext.run.noise import philox_normal, source_noise
    from kokoro_ext.run.pipeline import synthesize_ids, voice_style
    from kokoro_ext.text.g2p import phonemes_to_ids

    synth = Synthesizer(cuda_build)
    steps, transfers = synth.resident()
    ids = phonemes_to_ids("həlˈoʊ wˈɜːld", synth.vocab)
    style = voice_style(synth.voice, len(ids) - 2)
    host = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, seed=3)
    samples = synth.geometry.samples_per_frame * host.frames
    noise = source_noise(3, 1, samples, synth.geometry.harmonics)
    device = synth.synthesize_ids(ids, style, seed=3, noise=noise)
    assert [name for name, *_ in transfers.downloads] == ["durations", "audio"]
    assert np.array_equal(device.durations, host.durations)
    np.testing.assert_allclose(device.audio, host.audio, rtol=1e-5, atol=1e-6)
    own = synth.synthesize_ids(ids, style, seed=3)
    reference = philox_normal(3, samples, synth.geometry.harmonics)
    philox = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, seed=3, noise=reference)
    np.testing.assert_allclose(own.audio, philox.audio, rtol=1e-4, atol=1e-5)
