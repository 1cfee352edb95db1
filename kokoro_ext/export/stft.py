"""An exact real-valued STFT/iSTFT that torch.export can trace and TVM can compile.

Kokoro's generator uses ``torch.stft``/``torch.istft`` (complex tensors, not traceable
into TVM) or, with ``disable_complex``, its own ``CustomSTFT``, whose inverse lacks the
one-sided bin weights and the window-envelope division and pads differently (about 71%
relative RMS off on the decoder output).  This module computes what ``TorchSTFT``
computes (center=True, reflect padding, periodic Hann window, one-sided, unnormalized)
with conv1d / conv_transpose1d / atan2 only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ExactSTFT(nn.Module):
    """Drop-in for kokoro.istftnet.TorchSTFT: ``transform`` and ``inverse``."""

    def __init__(self, filter_length: int = 800, hop_length: int = 200, win_length: int = 800):
        super().__init__()
        if win_length != filter_length:
            raise ValueError("ExactSTFT needs win_length == filter_length (as Kokoro uses it)")
        n_fft, bins = filter_length, filter_length // 2 + 1
        self.n_fft, self.hop = n_fft, hop_length
        window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
        k = torch.arange(bins, dtype=torch.float64)[:, None]
        n = torch.arange(n_fft, dtype=torch.float64)[None, :]
        angle = 2 * math.pi * k * n / n_fft
        # Forward: X[k] = sum_n w[n] x[n] exp(-2 pi i k n / N).
        forward_real = window * torch.cos(angle)
        forward_imag = -window * torch.sin(angle)
        # Inverse: irfft weights the bins between DC and Nyquist twice, then the frame is
        # windowed again before overlap-add (and divided by the window envelope).
        weight = torch.full((bins, 1), 2.0, dtype=torch.float64)
        weight[0] = 1.0
        if n_fft % 2 == 0:
            weight[-1] = 1.0
        inverse_real = weight / n_fft * torch.cos(angle) * window
        inverse_imag = -weight / n_fft * torch.sin(angle) * window
        as_kernel = lambda t: t.to(torch.float32)[:, None, :]  # noqa: E731  [bins, 1, N]
        self.register_buffer("forward_real", as_kernel(forward_real), persistent=False)
        self.register_buffer("forward_imag", as_kernel(forward_imag), persistent=False)
        self.register_buffer("inverse_real", as_kernel(inverse_real), persistent=False)
        self.register_buffer("inverse_imag", as_kernel(inverse_imag), persistent=False)
        self.register_buffer(
            "window_sq", (window**2).to(torch.float32)[None, None, :], persistent=False
        )

    def transform(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, L] -> (magnitude, phase), each [B, N/2+1, frames], as torch.stft abs/angle."""
        pad = self.n_fft // 2
        x = F.pad(x[:, None, :], (pad, pad), mode="reflect")
        real = F.conv1d(x, self.forward_real, stride=self.hop)
        imag = F.conv1d(x, self.forward_imag, stride=self.hop)
        return torch.sqrt(real * real + imag * imag), torch.atan2(imag, real)

    def inverse(self, magnitude: Tensor, phase: Tensor) -> Tensor:
        """(magnitude, phase) [B, N/2+1, frames] -> [B, 1, hop * (frames - 1)], as torch.istft."""
        real = magnitude * torch.cos(phase)
        imag = magnitude * torch.sin(phase)
        frames = magnitude.shape[-1]
        signal = F.conv_transpose1d(real, self.inverse_real, stride=self.hop)
        signal = signal + F.conv_transpose1d(imag, self.inverse_imag, stride=self.hop)
        ones = torch.ones(1, 1, frames, dtype=magnitude.dtype, device=magnitude.device)
        envelope = F.conv_transpose1d(ones, self.window_sq, stride=self.hop)
        pad = self.n_fft // 2
        length = self.hop * (frames - 1)
        return signal[..., pad : pad + length] / envelope[..., pad : pad + length]
