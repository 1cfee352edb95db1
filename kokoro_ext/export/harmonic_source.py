"""Kokoro's harmonic excitation (SineGen + SourceModuleHnNSF) with its noise as an input.

kokoro draws the additive Gaussian noise inside the model, which makes the output
irreproducible and cannot be compiled (TVM's randn converter would bake one draw into
the module as a constant).  Here the noise is an input, so the caller owns the random
state and a test can feed kokoro's own draws.  kokoro's random initial phase is left
out: it is added to sample 0 only, which the linear downsampling by ``upsample_scale``
never reads, so it has no effect on the output (tests/test_harmonic_source.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class HarmonicSource(nn.Module):
    """f0 at the sample rate [B, L, 1] and noise [B, L, harmonics + 1] -> excitation [B, L, 1]."""

    def __init__(self, source: nn.Module):
        super().__init__()
        sine = source.l_sin_gen
        self.harmonics = sine.dim
        self.sampling_rate = sine.sampling_rate
        self.upsample_scale = sine.upsample_scale
        self.sine_amp, self.noise_std = sine.sine_amp, sine.noise_std
        self.voiced_threshold = sine.voiced_threshold
        self.l_linear = source.l_linear

    def forward(self, f0: Tensor, noise: Tensor) -> Tensor:
        orders = torch.arange(1, self.harmonics + 1, dtype=f0.dtype, device=f0.device)
        rad = (f0 * orders / self.sampling_rate) % 1
        # Same interpolations as kokoro's SineGen._f02sine (flag_for_pulse=False).
        rad = F.interpolate(
            rad.transpose(1, 2), scale_factor=1 / self.upsample_scale, mode="linear"
        ).transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * math.pi
        phase = F.interpolate(
            phase.transpose(1, 2) * self.upsample_scale,
            scale_factor=self.upsample_scale,
            mode="linear",
        ).transpose(1, 2)
        voiced = (f0 > self.voiced_threshold).to(f0.dtype)
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        sines = torch.sin(phase) * self.sine_amp * voiced + noise_amp * noise
        return torch.tanh(self.l_linear(sines))
