"""The source stage compiled once with a symbolic frame axis, run at two lengths.

Exported with the build's dynamic shapes (``StageSpec.dynamic``: batch and frames, F0 as
[B, frames, 2], the noise a multiple of it); each length is checked against the PyTorch
stage and against a static-shape build of the same length.  Small config, random weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kokoro_ext.build.compiler import compile_module
from kokoro_ext.build.model import build_model, small_config
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.stages import STAGES, Geometry

LENGTHS = (9, 14)  # frames; 3 of each are padding


@pytest.fixture(scope="module")
def stage():
    model = build_model(small_config(), seed=0)
    spec = STAGES["source"]
    module = spec.module(model).eval()
    example = spec.batched_example(model, LENGTHS[0])
    compiled = compile_module(module, example, dynamic_shapes=spec.dynamic(model))
    return model, module, StageRunner(compiled.executable)


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
    # the phase is accumulated in float64 on both sides (HarmonicSource)
    assert complex_error(got, want) <= 1e-4
    (fixed,) = StageRunner(compile_module(module, x).executable)(*x)
    assert np.abs(got - fixed).max() <= 1e-6
