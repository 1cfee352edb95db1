"""bench/gpu.py's bundle where no GPU is: kokoro_ext.tools.albert against transformers'
ALBERT, and the whole check (``prepare``, then ``run --dry-run``) on the small config's
CPU build, in a process that sees only the bundle, torch and numpy, as the GPU machine
does (there without TVM, kokoro or transformers).  tests/test_cuda.py prepares the CUDA
build's bundle: its weight transforms, compiled for this host."""

from __future__ import annotations

import json
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
    bundle = gpu.prepare(artifacts, tmp_path / "bundle", python=here, log=lambda _: None)
    assert not list((bundle / gpu.BUILD).glob("*.weights"))  # made there, from the seed
    assert (bundle / "kokoro" / "model.py").is_file() and (bundle / "kokoro" / "LICENSE").is_file()
    report_path = tmp_path / "report.json"
    done = run_in_bundle(
        bundle,
        f"import gpu; sys.exit(gpu.main(['run', '--dry-run', '--repeat', '1', '--seed', '2', "
        f"'--out', {str(report_path)!r}]))",
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["device"] == "cpu" and report["seed"] == 2
    assert report["float32_bound"]["passed"], done.stdout
    assert set(report["fidelity"]) == {"tf32_off", "torch_default"}
    names = {s["name"] for s in report["stages"]}
    assert {"text.duration", "decoder.audio", "waveform vs kokoro"} <= names
    (text, row), = report["warm"].items()
    assert set(row["tvm"]["stages"]) == {"text", "prosody", "source", "decoder"}
    # the stages and the host steps make up the build's time
    assert 0 <= row["tvm"]["host_seconds"] < row["tvm"]["seconds"]
    assert sum(row["tvm"]["stages"].values()) + row["tvm"]["host_seconds"] == pytest.approx(
        row["tvm"]["seconds"])
    for engine in ("tvm", "kmodel", "torch-stages"):
        assert 0 < row[engine]["first_chunk_seconds"] <= row[engine]["seconds"]
    assert row["tvm_over_kmodel"] == pytest.approx(row["tvm"]["seconds"] / row["kmodel"]["seconds"])
    assert all(0 < f for f in row["frames_per_chunk"])
    assert "KModel" in done.stdout and text in done.stdout
    # the memory soak ran its requests (a CPU has no device memory to read)
    assert set(report["memory"]) == {"device_used_after_4", "device_used_after_12", "growth"}
    # the native kernels it ran are a portable variant, not this machine's own build
    assert sorted(p.name for p in (bundle / "kokoro_ext" / "lib").glob("libkokoro_ext_kernels*.so")) == [
        f"libkokoro_ext_kernels.{v}.so" for v in sorted(gpu.KERNEL_VARIANTS)]
