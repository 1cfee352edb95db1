"""Kokoro's harmonic excitation (SineGen + SourceModuleHnNSF) with its noise as an input.

kokoro draws the additive Gaussian noise inside the model, which makes the output
irreproducible and cannot be compiled (TVM's randn converter would bake one draw into
the module as a constant).  Here the noise is an input, so the caller owns the random
state and a test can feed kokoro's own draws.  kokoro's random initial phase is left
out: it is added to sample 0 only, which the linear downsampling by ``upsample_scale``
never reads, so it has no effect on the output (tests/test_harmonic_source.py).

kokoro resamples with ``F.interpolate(scale_factor=...)``, whose output size torch.export
writes as float arithmetic on the (symbolic) length, which TVM's importer cannot take.
The factor is an integer, so both interpolations are written here as what they compute,
with fixed weights and integer reshapes only (see ``downsample`` and ``upsample``).
"""

from __future__ import annotations

import math

import torch
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
        self.register_buffer(
            "upsample_weights", upsample_weights(self.upsample_scale), persistent=False
        )

    def forward(self, f0: Tensor, noise: Tensor) -> Tensor:
        orders = torch.arange(1, self.harmonics + 1, dtype=f0.dtype, device=f0.device)
        rad = (f0 * orders / self.sampling_rate) % 1
        # Same interpolations as kokoro's SineGen._f02sine (flag_for_pulse=False).
        rad = downsample(rad, self.upsample_scale)
        # PyTorch accumulates a float32 cumsum in double on the CPU; TVM's scan would add
        # in float32, and over a long utterance the phase (thousands of radians) then
        # drifts by float32 steps: accumulate in float64 here, as kokoro effectively does.
        phase = torch.cumsum(rad.to(torch.float64), dim=1).to(rad.dtype) * 2 * math.pi
        phase = upsample(phase * self.upsample_scale, self.upsample_weights)
        voiced = (f0 > self.voiced_threshold).to(f0.dtype)
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        sines = torch.sin(phase) * self.sine_amp * voiced + noise_amp * noise
        return torch.tanh(self.l_linear(sines))


def downsample(x: Tensor, scale: int) -> Tensor:
    """F.interpolate(x [B, L, C] on L, scale_factor=1/scale, mode="linear") for L % scale == 0.

    PyTorch reads output i (align_corners=False) at source position (i + 0.5) scale - 0.5
    = i scale + (scale - 1) / 2: in block i's middle, at one sample (odd scale) or half-way
    between two (even scale), weights 1/2 and 1/2.  For a signal constant over blocks of
    ``scale`` samples, as SourceStage's nearest-upsampled F0 is, that is the block's value.
    """
    blocks = x.reshape(x.shape[0], -1, scale, x.shape[2])
    middle = (scale - 1) // 2
    if scale % 2:
        return blocks[:, :, middle]
    return blocks[:, :, middle] * 0.5 + blocks[:, :, middle + 1] * 0.5


def upsample_weights(scale: int) -> Tensor:
    """``upsample``'s [2, 1, 1, scale, 1] float32 weights of x[l - 1] - x[l], x[l + 1] - x[l]."""
    t = (torch.arange(scale, dtype=torch.float64) + 0.5) / scale - 0.5
    weights = torch.stack([(-t).clamp(min=0), t.clamp(min=0)])
    return weights.to(torch.float32)[:, None, None, :, None]


def upsample(x: Tensor, weights: Tensor) -> Tensor:
    """F.interpolate(x [B, L, C] on L, scale_factor=scale, mode="linear") -> [B, L scale, C].

    PyTorch reads output j = l scale + p (align_corners=False) at source position
    max(0, (j + 0.5) / scale - 0.5) = l + t_p, t_p = (p + 0.5) / scale - 0.5 in (-1/2, 1/2):
    for t_p < 0 between x[l - 1] and x[l] (at l = 0 clamped to x[0]), for t_p >= 0 between
    x[l] and x[l + 1] (index clamped to L - 1).  Both clamps are those of an edge-replicated
    x, so output phase p is x[l] + |t_p| (x[l -/+ 1] - x[l]) with the same two weights for
    every l (``upsample_weights``, one of them 0), and the [B, L, scale, C] phases interleave
    into [B, L scale, C] by a reshape.  Not bit-identical to PyTorch, whose weights come from
    float32 source positions, off by up to an ulp of l; these are exact but for one float32
    rounding, and the x[l] + w (x[l +- 1] - x[l]) form keeps their rounding proportional to
    the step, not to |x| (tests/test_harmonic_source.py).
    """
    batch, length, channels = x.shape
    scale = weights.shape[3]
    # x[l - 1] and x[l + 1] with the ends replicated, by index: slices of a symbolic length
    # would leave TVM shapes like min(1, L) that it cannot simplify.
    index = torch.arange(length, device=x.device)
    previous = x.index_select(1, (index - 1).clamp(min=0))[:, :, None, :]
    following = x.index_select(1, (index + 1).clamp(max=length - 1))[:, :, None, :]
    x = x[:, :, None, :]
    out = x + (previous - x) * weights[0] + (following - x) * weights[1]
    return out.reshape(batch, length * scale, channels)
