"""HarmonicSource against kokoro's SourceModuleHnNSF fed the same random draws."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.build.export.harmonic_source import HarmonicSource
from kokoro_ext.build.model import build_model, small_config

SAMPLES = 3000  # 10 frames of 300 samples


@pytest.fixture(scope="module")
def source():
    return build_model(small_config(), seed=0).decoder.generator.m_source


def f0_curve():
    f0 = torch.linspace(90.0, 260.0, SAMPLES)[None, :, None]
    f0[:, :600] = 0.0  # an unvoiced stretch
    return f0


def kokoro_with_draws(source, f0, seed):
    """kokoro's harmonic output and the standard normal draws behind its noise, one seed.

    SourceModuleHnNSF.forward computes tanh(l_linear(l_sin_gen(f0)[0])); SineGen returns
    the noise it added, which divided by its amplitude gives the draws themselves.
    """
    sine = source.l_sin_gen
    torch.manual_seed(seed)
    with torch.no_grad():
        sine_waves, uv, noise = sine(f0)
        har = source.l_tanh(source.l_linear(sine_waves))
    amplitude = uv * sine.noise_std + (1 - uv) * sine.sine_amp / 3
    return har, noise / amplitude


def test_matches_kokoro_given_its_noise(source):
    """Same math as kokoro: to 1e-6 in float64, and in float32 no further from it than kokoro.

    HarmonicSource resamples with exact per-phase weights where kokoro's F.interpolate
    computes float32 source positions (off by an ulp of the position, which the phase
    slope turns into ~1e-5 here), so float32 outputs are not bit-identical: the float32
    check is against kokoro in float64, with kokoro's own float32 error as the bound.
    """
    f0 = f0_curve()
    want, noise = kokoro_with_draws(source, f0, seed=7)
    source64 = copy.deepcopy(source).double()
    want64, noise64 = kokoro_with_draws(source64, f0.double(), seed=7)
    with torch.no_grad():
        got = HarmonicSource(source)(f0, noise)
        got64 = HarmonicSource(source64)(f0.double(), noise64)
    assert (got64 - want64).abs().max() <= 1e-6  # float32 weights: 1.6e-7
    kokoro_error = (want.double() - want64).abs().max()  # 8.3e-6
    assert (got.double() - want64).abs().max() <= kokoro_error  # 3.2e-6
    assert (got - want).abs().max() <= 2 * kokoro_error


def test_kokoro_initial_phase_has_no_effect(source):
    f0 = f0_curve()
    sine = source.l_sin_gen
    fn = f0 * torch.arange(1, sine.dim + 1, dtype=torch.float32)
    torch.manual_seed(0)
    a = sine._f02sine(fn)
    torch.manual_seed(1)
    b = sine._f02sine(fn)
    assert torch.equal(a, b)


def test_compiled_with_tvm(source):
    f0 = f0_curve()
    noise = torch.randn(1, SAMPLES, source.l_sin_gen.dim, generator=torch.Generator().manual_seed(0))
    module = HarmonicSource(source).eval()
    ep = torch.export.export(module, (f0, noise))
    vm = relax.VirtualMachine(tvm.compile(from_exported_program(ep), target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(f0.numpy()), tvm.runtime.tensor(noise.numpy()))
    got = got[0] if not hasattr(got, "numpy") else got
    with torch.no_grad():
        want = module(f0, noise)
    # sin() of a phase that has grown to ~1e3 rad: float32 rounding of the phase shows.
    assert np.abs(got.numpy() - want.numpy()).max() <= 1e-4
