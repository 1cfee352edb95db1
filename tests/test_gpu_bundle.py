"""bench/gpu.py's bundle where no GPU is: kokoro_ext.tools.albert against transformers'
ALBERT, and the whole check (``prepare``, then ``run --dry-run``) on the small config's
CPU build, in a process that sees only the bundle, torch and numpy, as the GPU machine
does (there without TVM, kokoro or transformers).  tests/test_cuda.py prepares the CUDA
build's bundle: its weight transforms, compiled for this host."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch

from gpu_bundle import gpu_script, run_in_bundle
from kokoro_ext.build.model import small_config
from kokoro_ext.tools.albert import AlbertConfig, AlbertModel


def test_albert_is_transformers_albert():
    transformers = pytest.importorskip("transformers")
    config = small_config()
    kwargs = dict(vocab_size=config["n_token"], **config["plbert"])
    theirs = transformers.AlbertModel(transformers.AlbertConfig(**kwargs)).eval()
    ours = AlbertModel(AlbertConfig(**kwargs)).eval()
    state = theirs.state_dict()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in state.items()}
    generator = torch.Generator().manual_seed(0)
    state = {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in state.items()}
    theirs.load_state_dict(state)
    ours.load_state_dict(state)
    ids = torch.randint(1, config["n_token"], (2, 23), generator=generator)
    mask = torch.ones(2, 23, dtype=torch.int64)
    mask[1, 17:] = 0  # padding: the second row is shorter
    with torch.no_grad():
        want, got = theirs(ids, attention_mask=mask), ours(ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, atol=1e-5, rtol=1e-5)


def test_random_durations_stay_under_the_frame_limit():
    gpu = gpu_script()
    config = small_config()
    model = gpu.reference_model(config, seed=3)
    linear = model.predictor.duration_proj.linear_layer
    with torch.no_grad():
        assert float(linear.weight.abs().sum(dim=1).max()) <= gpu.DURATION_ROW_L1 + 1e-6
        # each logit at its largest: the head's input (an LSTM's output) is in (-1, 1)
        longest = torch.sigmoid(linear.bias + linear.weight.abs().sum(dim=1)).sum()
    assert round(float(longest)) <= gpu.most_frames_per_token(config) == 7
    tokens = 512  # the real build's limit, with its 8192 frames
    assert gpu.most_frames_per_token(config) * tokens <= 8192


def test_bundle_dry_run_without_tvm_kokoro_or_transformers(build_dir, tmp_path):
    artifacts, _ = build_dir
    gpu = gpu_script()
    here = f"{sys.version_info.major}.{sys.version_info.minor}"  # no download in a test
    # the same build twice under two names: a bundle times its builds side by side
    twin = tmp_path / "twin"
    shutil.copytree(artifacts, twin, ignore=shutil.ignore_patterns("*.weights"))
    bundle = gpu.prepare([artifacts, twin], tmp_path / "bundle", python=here, log=lambda _: None)
    builds = {artifacts.name, "twin"}
    assert {p.name for p in (bundle / gpu.BUILDS).iterdir()} == builds
    assert not list((bundle / gpu.BUILDS).rglob("*.weights"))  # made there, from the seed
    assert (bundle / "kokoro" / "model.py").is_file() and (bundle / "kokoro" / "LICENSE").is_file()
    report_path = tmp_path / "report.json"
    # a build the bundle lacks is named before any work; --build picks the builds timed
    done = run_in_bundle(bundle, "import gpu; sys.exit(gpu.main(['run', '--dry-run', "
                         "'--build', 'twin', '--build', 'absent']))", tmp_path)  # fmt: skip
    assert done.returncode != 0 and "no build ['absent']" in done.stderr, done.stderr[-2000:]
    done = run_in_bundle(
        bundle,
        f"import gpu; sys.exit(gpu.main(['run', '--dry-run', '--repeat', '1', '--seed', '2', "
        f"'--build', {artifacts.name!r}, '--build', 'twin', '--out', {str(report_path)!r}]))",
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    # a failing check is recorded as its error and the run goes on: here none failed
    assert '"error"' not in report_path.read_text(), report_path.read_text()[:3000]
    assert report["device"] == "cpu" and report["seed"] == 2
    assert set(report["builds"]) == builds
    for name, entry in report["builds"].items():
        assert set(entry["fidelity"]) == {"tf32_off", "torch_default"}
        assert entry["fidelity"]["tf32_off"]["passed"], done.stdout
        names = {s["name"] for s in entry["fidelity"]["tf32_off"]["stages"]}
        assert {"text.duration", "decoder.audio", "waveform vs kokoro"} <= names
        # the convolutions a synthesis runs, found by their hooks (a CPU build has no cuDNN)
        assert entry["convolutions"] and all(len(c["w"]) == 3 for c in entry["convolutions"])
        # the memory soak ran its requests (a CPU has no device memory to read)
        assert set(entry["memory"]) == {"device_used_after_4", "device_used_after_12", "growth"}
    (text, row), = report["warm"].items()
    assert set(row["builds"]) == builds
    for timing in row["builds"].values():
        assert set(timing["stages"]) == {"text", "prosody", "source", "decoder"}
        # the stages and the host steps make up the build's time
        assert 0 <= timing["host_seconds"] < timing["seconds"]
        assert sum(timing["stages"].values()) + timing["host_seconds"] == pytest.approx(timing["seconds"])
        assert timing["over_kmodel"] == pytest.approx(timing["seconds"] / row["kmodel"]["seconds"])
        assert 0 < timing["first_chunk_seconds"] <= timing["seconds"]
    for engine in ("kmodel", "torch-stages"):
        assert 0 < row[engine]["first_chunk_seconds"] <= row[engine]["seconds"]
    assert all(0 < f for f in row["frames_per_chunk"])
    # the same durations from every engine (float32 on one CPU: the same rounding)
    for timing in [*row["builds"].values(), row["kmodel"], row["torch-stages"]]:
        assert timing["frames_per_chunk"] == row["frames_per_chunk"]
    assert "KModel" in done.stdout and text in done.stdout
    # the native kernels it ran are portable variants, not this machine's own build
    assert sorted(p.name for p in (bundle / "kokoro_ext" / "lib").glob("libkokoro_ext_kernels*.so")) == [
        f"libkokoro_ext_kernels.{v}.so" for v in sorted(gpu.KERNEL_VARIANTS)]
