"""A CUDA build's device steps (kokoro_ext.build.kernels.steps) without a GPU: each kernel's
TIR run on the CPU with its thread loops serial (cpu_tir) against the numpy it replaces
(durations, alignment and the Philox generator's words exactly, the noise to float32
rounding, the numpy generator against Random123's known answers); the kernels through TVM's CUDA codegen and nvcc; and
the device-resident synthesis (kokoro_ext.run.resident) on TVM's CPU device with the
small CPU build's stages: what comes down, what the stages are given, the audio of the
host path."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi

import cpu_tir
from kokoro_ext.build.kernels.steps import KERNELS, THREAD_LOOPS
from kokoro_ext.run.alignment import align
from kokoro_ext.run.noise import philox4x32, philox_bits, philox_normal, source_noise
from kokoro_ext.run.pipeline import NonFiniteOutput, durations, synthesize_ids, voice_style
from kokoro_ext.run.resident import STEP_FUNCTIONS, Steps, Transfers, synthesize_resident
from kokoro_ext.run.runner import NamedStage, to_numpy, to_tensor


@pytest.fixture(scope="module")
def cpu_kernels():
    """The kernels' TIR, thread loops serial, compiled for llvm: one module."""
    functions = {
        name: cpu_tir.without_thread_bindings(kernel, THREAD_LOOPS[name]).with_attr("global_symbol", name)
        for name, kernel in KERNELS.items()
    }  # fmt: skip
    return tvm.tirx.build(tvm.IRModule(functions), target="llvm")


@pytest.fixture
def cpu_steps(cpu_kernels):
    return Steps(cpu_kernels, tvm_ffi.device("cpu", 0))


def _tensor(array):
    return to_tensor(np.ascontiguousarray(array))


def test_the_module_exports_what_the_run_side_calls():
    assert tuple(KERNELS) == STEP_FUNCTIONS


# -- Philox4x32-10 ------------------------------------------------------------------------

# Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter, key, result
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]  # fmt: skip


@pytest.mark.parametrize("counter, key, want", KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers(counter, key, want):
    got = philox4x32(np.array(counter, np.uint32), key)
    assert got.dtype == np.uint32 and tuple(int(x) for x in got) == want


def test_philox_bits_count_the_groups_and_carry_seed_and_offset():
    seed, offset = (7 << 32) | 5, (3 << 32) | 9
    bits = philox_bits(seed, 10, offset)  # 3 groups of 4 words
    counters = np.array([[i, 0, 9, 3] for i in range(3)], np.uint32)
    assert np.array_equal(bits, philox4x32(counters, (5, 7)).reshape(-1))
    assert not np.array_equal(philox_bits(seed, 10, 0), bits)


def test_philox_normals_are_standard_normal():
    z = philox_normal(11, 20000, 9)
    assert z.dtype == np.float32 and z.shape == (1, 20000, 9)
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01
    assert np.isfinite(z).all()
    # a prefix of a longer draw: an element's value depends on its index alone
    assert np.array_equal(philox_normal(11, 7, 9).reshape(-1), z.reshape(-1)[:63])
    assert not np.array_equal(philox_normal(12, 7, 9), philox_normal(11, 7, 9))


@pytest.mark.parametrize("seed, offset, samples, harmonics", [(0, 0, 301, 9), (2**40 + 3, 5, 17, 4)])
def test_the_noise_kernel_draws_the_reference_normals(cpu_steps, seed, offset, samples, harmonics):
    got = to_numpy(cpu_steps.noise(seed, samples, harmonics, offset))
    want = philox_normal(seed, samples, harmonics, offset)
    assert got.shape == want.shape
    # the same Philox words (any wrong bit is far off), the same float32 operations; only
    # the libraries' logf, sinf and cosf may differ in the last bits
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.mean(got == want) > 0.5


# -- durations and alignment --------------------------------------------------------------


@pytest.mark.parametrize("speed", [1.0, 0.8, 1.7])
def test_the_durations_kernel_rounds_as_the_host(cpu_steps, speed):
    rng = np.random.default_rng(0)
    predicted = np.concatenate([rng.uniform(0, 9, 60), [0.5, 1.5, 2.5, 3.5, 0.0, 0.49]])
    predicted = predicted.astype(np.float32)[None]
    frames, ends = cpu_steps.durations(_tensor(predicted), speed)
    want = durations(predicted[0], speed)
    assert np.array_equal(to_numpy(frames), want)
    assert np.array_equal(to_numpy(ends), np.cumsum(want))


def test_a_non_finite_prediction_is_minus_one(cpu_steps):
    predicted = np.array([[2.0, np.nan, np.inf, 3.0]], np.float32)
    frames, _ = cpu_steps.durations(_tensor(predicted), 1.0)
    assert to_numpy(frames).tolist() == [2, -1, -1, 3]


@pytest.mark.parametrize("tokens_first", [False, True])
@pytest.mark.parametrize("extra", [0, 5])
def test_the_alignment_kernels_repeat_each_token_as_align(cpu_steps, tokens_first, extra):
    rng = np.random.default_rng(1)
    counts = np.array([2, 1, 4, 0, 3, 1, 7], np.int64)  # a token of 0 frames too
    values = rng.standard_normal((6, len(counts))).astype(np.float32)
    frames = int(counts.sum()) + extra  # past the total: zero columns
    ends = _tensor(np.cumsum(counts))
    tokens = cpu_steps.frame_tokens(ends, frames)
    assert to_numpy(tokens).tolist() == [
        *np.repeat(np.arange(len(counts)), counts).tolist(), *[len(counts)] * extra
    ]
    given = values.T[None] if tokens_first else values[None]
    got = to_numpy(cpu_steps.align(_tensor(given), tokens, "test", tokens_first))
    assert np.array_equal(got[0], align(values, counts, frames))


def test_step_buffers_grow_and_are_kept(cpu_steps):
    small = cpu_steps.noise(1, 10, 9)
    buffer = cpu_steps._buffers["noise"]
    assert tuple(small.shape) == (1, 10, 9)
    cpu_steps.noise(1, 20, 9)
    assert cpu_steps._buffers["noise"] is buffer  # 64 KiB hold both
    large = cpu_steps.noise(1, 5000, 9)
    assert cpu_steps._buffers["noise"].shape[0] >= 5000 * 9 * 4 and tuple(large.shape) == (1, 5000, 9)
    np.testing.assert_allclose(to_numpy(large), philox_normal(1, 5000, 9), rtol=1e-6, atol=1e-6)


# -- compiled for CUDA --------------------------------------------------------------------


def test_the_kernels_compile_for_cuda():
    """TVM's CUDA codegen takes every kernel (no GPU needed); the source calls the
    accurate libm functions (nvcc runs without --use_fast_math), and nvcc makes sm_90
    machine code of it where it is installed."""
    from kokoro_ext.build import cuda
    from kokoro_ext.build.backend import CUDA_TARGETS
    from kokoro_ext.build.steps import steps_module

    target = tvm.target.Target(dict(CUDA_TARGETS["cuda-sm90"].target))
    library = tvm.compile(steps_module(), target=target)
    (device,) = cuda._cuda_imports(library.mod)
    source = device.inspect_source(cuda.SOURCE_FORMAT)
    kernels = {line.split("(")[-2].split()[-1] for line in source.splitlines()
               if line.startswith('extern "C" __global__')}  # fmt: skip
    assert kernels == {f"{name}_kernel" for name in STEP_FUNCTIONS}
    assert "logf(" in source and "sinf(" in source and "cosf(" in source
    assert "nearbyintf(" in source  # round half to even, as numpy
    assert "__sinf" not in source and "__logf" not in source
    if shutil.which("nvcc"):
        fatbin = cuda.compile(source, ["sm_90"], None)
        assert cuda.architectures_of(fatbin) == (["sm_90"], [])


# -- the resident synthesis on the CPU device ---------------------------------------------


class _Recorded:
    """The build's stages on tensors (StageRunner.call_tensors), each call's stage and the
    kinds of its inputs recorded."""

    def __init__(self, synth):
        self.synth, self.calls = synth, []

    def __call__(self, name):
        stage = self.synth._stage(name)

        def call(*inputs):
            self.calls.append((name, [type(x).__name__ for x in inputs]))
            return stage.call.call_tensors(*inputs)

        return NamedStage(call, stage.inputs, stage.outputs)


def _cpu_transfers():
    return Transfers(upload=to_tensor, download_tensor=to_numpy)


@pytest.fixture(scope="module")
def cpu_synth(build_dir):
    from kokoro_ext.run.synthesizer import Synthesizer

    return Synthesizer(build_dir[0])


def _inputs(synth, phonemes="həlˈoʊ wˈɜːld, ðɪs ɪz ɐ tˈɛst."):
    from kokoro_ext.text.g2p import phonemes_to_ids

    ids = phonemes_to_ids(phonemes, synth.vocab)
    return ids, voice_style(synth.voice, len(ids) - 2)


def test_the_resident_synthesis_brings_down_only_durations_and_audio(cpu_synth, cpu_steps):
    synth = cpu_synth
    ids, style = _inputs(synth)
    host = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, 1.1, 3)
    noise = source_noise(3, 1, synth.geometry.samples_per_frame * host.frames,
                         synth.geometry.harmonics)  # fmt: skip
    stages, transfers = _Recorded(synth), _cpu_transfers()
    trace = synthesize_resident(stages, cpu_steps, transfers, synth.geometry, ids, style,
                                synth.limits, 1.1, 3, noise=noise)  # fmt: skip
    # the stages in order, every input a tensor of the device (nothing went through numpy)
    assert [name for name, _ in stages.calls] == ["text", "prosody", "source", "decoder"]
    assert all(kind == "Tensor" for _, kinds in stages.calls for kind in kinds)
    samples = synth.geometry.samples_per_frame * host.frames
    assert transfers.downloads == [("durations", (len(ids),), "int64"),
                                   ("audio", (1, samples), "float32")]  # fmt: skip
    # ids, token lengths, predictor style, frame lengths, the given noise, decoder style
    assert transfers.uploads == 6
    # the host path's numbers: the same stages on the same inputs
    assert np.array_equal(trace.durations, host.durations) and trace.frames == host.frames
    assert np.array_equal(trace.audio, host.audio)
    assert trace.stages == {}


def test_unload_drops_the_device_stages_with_their_runners(build_dir):
    from kokoro_ext.run.synthesizer import Synthesizer

    synth = Synthesizer(build_dir[0])
    before = synth._device_stage("text")
    assert synth.loaded == ["text"]
    synth.unload()
    # nothing keeps the stage's code and weights: a device stage is made anew
    assert synth.loaded == [] and synth._device_stages == {} and synth._steps is None
    assert synth._device_stage("text") is not before and synth.loaded == ["text"]


def test_the_resident_synthesis_draws_the_philox_noise(cpu_synth, cpu_steps):
    synth = cpu_synth
    ids, style = _inputs(synth, "ðə kwˈɪk bɹˈaʊn fˈɑks")
    transfers = _cpu_transfers()
    trace = synthesize_resident(_Recorded(synth), cpu_steps, transfers, synth.geometry, ids,
                                style, synth.limits, 1.0, 5)  # fmt: skip
    assert [name for name, *_ in transfers.downloads] == ["durations", "audio"]
    assert transfers.uploads == 5  # no noise went up
    noise = philox_normal(5, synth.geometry.samples_per_frame * trace.frames, synth.geometry.harmonics)
    host = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, 1.0, 5, noise=noise)
    # the kernel's noise is the reference's to float32 rounding, and so is the audio
    np.testing.assert_allclose(trace.audio, host.audio, rtol=1e-4, atol=1e-5)
    other = synthesize_ids(synth._stage, synth.geometry, ids, style, synth.limits, 1.0, 5)
    assert not np.allclose(other.audio, host.audio, atol=1e-5)  # torch's CPU draws differ


def test_the_resident_synthesis_refuses_what_the_host_path_refuses(cpu_synth, cpu_steps):
    from dataclasses import replace

    from kokoro_ext.run.pipeline import LengthOverflow

    synth = cpu_synth
    ids, style = _inputs(synth)
    tight = replace(synth.limits, frames=5)
    with pytest.raises(LengthOverflow, match="frames"):
        synthesize_resident(_Recorded(synth), cpu_steps, _cpu_transfers(), synth.geometry, ids,
                            style, tight, 1.0, 0)  # fmt: skip
    with pytest.raises(ValueError, match="noise of shape"):
        synthesize_resident(_Recorded(synth), cpu_steps, _cpu_transfers(), synth.geometry, ids,
                            style, synth.limits, 1.0, 0, noise=np.zeros((1, 3, 9), np.float32))  # fmt: skip

    def broken(name):
        stage = _Recorded(synth)(name)
        if name != "text":
            return stage

        def nan_durations(**inputs):
            out = dict(stage(**inputs))
            duration = to_numpy(out["duration"])
            duration[0, 2] = np.nan
            out["duration"] = to_tensor(duration)
            return out

        return nan_durations

    with pytest.raises(NonFiniteOutput, match="text stage.*'duration'"):
        synthesize_resident(broken, cpu_steps, _cpu_transfers(), synth.geometry, ids, style,
                            synth.limits, 1.0, 0)  # fmt: skip


def test_the_gpu_bench_checks_the_device_steps(cpu_synth, cpu_steps, monkeypatch):
    """bench/gpu.py's steps_check, here on the CPU device (on a GPU, a CUDA build's steps
    module on it): the kernels against their references and one chunk both ways."""
    from gpu_bundle import gpu_script

    transfers = _cpu_transfers()
    monkeypatch.setattr(cpu_synth, "resident", lambda: (cpu_steps, transfers))
    report = gpu_script().steps_check(cpu_synth, {"text": ["həlˈoʊ wˈɜːld"]}, repeat=1)
    assert report["durations_exact"] and report["align_exact"] and report["align_tokens_first_exact"]
    assert report["philox_bits_exact"]
    assert report["noise"]["max_abs_difference"] < 1e-5
    assert set(report["seconds"]) == {"durations_device", "align_device", "align_host",
                                      "noise_device", "noise_host_torch_cpu_draws"}  # fmt: skip
    chunk = report["chunk"]
    assert chunk["durations_equal"] and chunk["same_noise_exactly_equal"]
    assert chunk["philox_noise_vs_host_with_its_reference_snr_db"] > 60
    assert [name for name, *_ in chunk["downloads"]] == ["durations", "audio"]


def test_a_steps_module_is_checked_against_its_record(tmp_path):
    from kokoro_ext.run.resident import steps_path, steps_record

    path = tmp_path / "steps.so"
    path.write_bytes(b"kernels")
    requires = {"steps": steps_record(path)}
    assert steps_path(tmp_path, requires) == path
    assert steps_path(tmp_path, {}) is None  # a build without one: the host steps
    path.write_bytes(b"other kernels")
    with pytest.raises(ValueError, match="differs from the one these artifacts were built with"):
        steps_path(tmp_path, requires)
    path.unlink()
    with pytest.raises(ValueError, match="is missing"):
        steps_path(tmp_path, requires)


def test_a_cpu_build_runs_the_host_steps(cpu_synth):
    assert cpu_synth.resident() is None
    trace = cpu_synth.synthesize_phonemes("həlˈoʊ", seed=2)
    assert set(trace.stages) == {"text", "prosody", "source", "decoder"}


def test_the_gpu_bench_times_the_device_steps_beside_the_host_steps(cpu_synth, cpu_steps, monkeypatch):
    """bench/gpu.py's warm_times with a build that has device steps (here the CPU device's):
    both paths timed in one run, the device path's record under its build."""
    import json

    from gpu_bundle import gpu_script

    gpu = gpu_script()
    transfers = _cpu_transfers()
    monkeypatch.setattr(cpu_synth, "resident", lambda: (cpu_steps, transfers))
    model = gpu.reference_model(json.loads((cpu_synth.directory / "config.json").read_text()), 0)
    # a forward (no_grad) first, as run's fidelity check makes: weight norm's weights are
    # then leaves, which warm_times' deepcopy needs
    model("həlˈoʊ", torch.zeros(1, 256))
    times = gpu.warm_times({"b": cpu_synth}, model, {"text": ["həlˈoʊ wˈɜːld"]}, 1, "cpu")
    build = times["text"]["builds"]["b"]
    assert set(build["stages"]) == {"text", "prosody", "source", "decoder"}
    resident = build["device_steps"]
    assert resident["frames_per_chunk"] == build["frames_per_chunk"]
    assert resident["over_host_steps"] == pytest.approx(resident["seconds"] / build["seconds"])
    assert [name for name, *_ in resident["downloads_per_chunk"]] == ["durations", "audio"]
    assert resident["uploads_per_chunk"] == 5


@pytest.mark.parametrize("seed, offset, count", [(0, 0, 4), (2**40 + 3, 5, 1001), (-1, 2**63 + 7, 37)])
def test_the_generator_kernel_gives_the_references_words(cpu_steps, seed, offset, count):
    got = to_numpy(cpu_steps.philox_bits(seed, count, offset))
    assert got.dtype == np.uint32
    assert np.array_equal(got, philox_bits(seed, count, offset)[:count])
