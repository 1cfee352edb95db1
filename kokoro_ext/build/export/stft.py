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
        real_bins = torch.zeros(bins, 1, dtype=torch.bool)
        real_bins[0] = True
        real_bins[-1] = n_fft % 2 == 0
        self.register_buffer("real_bins", real_bins, persistent=False)
        self.register_buffer(
            "window_sq", (window**2).to(torch.float32)[None, None, :], persistent=False
        )

    def transform(self, x: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x [B, L] -> (magnitude, phase), each [B, N/2+1, L/hop + 1], as torch.stft abs/angle.

        With ``lengths`` [B] (valid samples, x padded past them), the right reflect padding
        mirrors the end of the valid samples, so frames up to ``lengths / hop`` equal
        torch.stft of the unpadded signal; later frames are meaningless.
        """
        pad = self.n_fft // 2
        if lengths is None:
            x = F.pad(x[:, None, :], (pad, pad), mode="reflect")
        else:
            x = self._reflect_pad_to_length(x, lengths)[:, None, :]
        real = F.conv1d(x, self.forward_real, stride=self.hop)
        imag = F.conv1d(x, self.forward_imag, stride=self.hop)
        # Bins that are real in exact arithmetic get an imaginary part of +0.0, so their phase
        # is exactly 0 or pi: a rounding-level imaginary part of either sign would put them
        # on atan2's branch cut, where pi and -pi differ by 2 pi for the network that reads
        # the phase.  These are DC and Nyquist, and all of frame 0, whose reflect-padded
        # input is symmetric about the window centre.
        # (A mask rather than a slice for frame 0: a slice to the end of a symbolic length
        # leaves TVM a shape min(INT64_MAX, frames) that does not simplify.)
        first_frame = torch.arange(imag.shape[-1], device=imag.device) == 0
        imag = torch.where(self.real_bins | first_frame, torch.zeros_like(imag), imag)
        return torch.sqrt(real * real + imag * imag), torch.atan2(imag, real)

    def _reflect_pad_to_length(self, x: Tensor, lengths: Tensor) -> Tensor:
        # Gather indices of a reflect padding whose right edge is each row's length.
        pad, samples = self.n_fft // 2, x.shape[-1]
        index = (torch.arange(samples + 2 * pad, device=x.device) - pad).abs()[None, :]
        last = (lengths - 1)[:, None]
        index = torch.where(index > last, 2 * last - index, index).clamp(0, samples - 1)
        return torch.gather(x, 1, index)

    def inverse(self, magnitude: Tensor, phase: Tensor, mask: Tensor | None = None) -> Tensor:
        """(magnitude, phase) [B, N/2+1, frames] -> [B, 1, hop * (frames - 1)], as torch.istft.

        With ``mask`` [B, 1, frames] (1 on valid frames), the result up to
        ``hop * (valid frames - 1)`` equals torch.istft of the valid frames alone: the window
        envelope counts valid frames only.  The caller zeroes the masked magnitudes.
        """
        real = magnitude * torch.cos(phase)
        imag = magnitude * torch.sin(phase)
        frames = magnitude.shape[-1]
        signal = F.conv_transpose1d(real, self.inverse_real, stride=self.hop)
        signal = signal + F.conv_transpose1d(imag, self.inverse_imag, stride=self.hop)
        if mask is None:
            mask = torch.ones(1, 1, frames, dtype=magnitude.dtype, device=magnitude.device)
        # Past the valid frames the envelope is 0; 1 there keeps the (zero) signal finite.
        envelope = F.conv_transpose1d(mask.to(magnitude.dtype), self.window_sq, stride=self.hop)
        envelope = torch.where(envelope > 1e-11, envelope, torch.ones_like(envelope))
        pad = self.n_fft // 2
        length = self.hop * (frames - 1)
        return signal[..., pad : pad + length] / envelope[..., pad : pad + length]
