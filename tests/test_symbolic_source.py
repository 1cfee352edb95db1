"""The source stage compiled once with a symbolic frame axis, run at two lengths.

Exported with the same dynamic shapes as bench/symbolic.py (the Dim on F0's axis 1, the
noise a multiple of it); each length is checked against the PyTorch
stage and against a static-shape build of the same length.  Small config, random weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kokoro_ext.model import build_model, small_config
from kokoro_ext.stages import STAGES, Geometry
from kokoro_ext.target import parse_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from symbolic import _compile, _dynamic_shapes  # noqa: E402

LENGTHS = (9, 14)  # frames; 3 of each are padding


@pytest.fixture(scope="module")
def stage():
    model = build_model(small_config(), seed=0)
    spec = STAGES["source"]
    module = spec.module(model).eval()
    example = spec.example(model, LENGTHS[0])
    runner, _ = _compile(module, example, _dynamic_shapes("source", example), parse_target("llvm"))
    return model, module, runner


def inputs(model, frames):
    geometry = Geometry.from_model(model)
    gen = torch.Generator().manual_seed(frames)
    F0 = 80 + 150 * torch.rand(1, 2 * frames, generator=gen)
    F0[:, :3] = 0.0  # unvoiced start
    noise = torch.randn(1, geometry.samples_per_frame * frames, geometry.harmonics, generator=gen)
    F0 = F0.reshape(STAGES["source"].example(model, frames)[0].shape)  # the stage's F0 layout
    return F0, torch.tensor([frames - 3]), noise


def complex_error(a, b):
    """Largest |m e^{ip} - m' e^{ip'}|: a phase on atan2's branch cut may be pi or -pi."""
    bins = a.shape[1] // 2
    za = a[:, :bins] * np.exp(1j * a[:, bins:])
    zb = b[:, :bins] * np.exp(1j * b[:, bins:])
    return float(np.abs(za - zb).max())


@pytest.mark.parametrize("frames", LENGTHS)
def test_symbolic_source_matches_torch_and_static(stage, frames):
    model, module, runner = stage
    x = inputs(model, frames)
    (got,) = runner(*x)
    spectrum_frames = Geometry.from_model(model).spectrum_per_frame * frames + 1
    assert got.shape == (1, model.decoder.generator.post_n_fft + 2, spectrum_frames)
    with torch.no_grad():
        want = module(*x).numpy()
    # float32 sines of phases that grow to ~1e4 rad: TVM and PyTorch round differently
    # (the static build is as far off PyTorch; 37/61 frames give 9e-4/1.4e-3).
    assert complex_error(got, want) <= 2e-4
    static, _ = _compile(module, x, None, parse_target("llvm"))
    (fixed,) = static(*x)
    assert np.abs(got - fixed).max() <= 1e-6
