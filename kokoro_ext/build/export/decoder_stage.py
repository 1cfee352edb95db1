"""Kokoro's decoder (iSTFTNet) as two exportable stages over a frame bucket.

``Decoder.forward`` split where the generator reads its harmonic source's spectrum:
- ``SourceStage``: F0 -> harmonic excitation (HarmonicSource, the Gaussian noise an input)
  -> its magnitude and phase (ExactSTFT in place of ``torch.stft``);
- ``DecoderStage``: text features, F0, N, style and that spectrum -> audio, with
  ExactSTFT's inverse in place of ``torch.istft``.
The split is where the one non-numerical disagreement with PyTorch lives: a phase on
atan2's branch cut can come out as pi or -pi.  With the spectrum a stage boundary, each
stage can be checked on the reference's inputs (kokoro_ext.tools.reference).

Both are length-aware: InstanceNorm/AdaIN statistics over the valid frames only, the
padding zeroed before every convolution at each of the generator's time rates, the STFT's
reflect padding and the iSTFT's window envelope ending at the valid length; so the valid
samples equal the unpadded model's.  Weight normalization is folded first.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .harmonic_source import HarmonicSource
from .masked import adain, adain_resblock, frame_mask, upsample_mask
from .stft import ExactSTFT
from .weight_norm import fold_weight_norm


# Cody-Waite split of pi: n * _PI_A is exact in float32 for |n| < 2^12.
_PI_A, _PI_B, _PI_C = 3.140625, 9.67502593994140625e-4, 1.509957990978376432e-7
# Taylor coefficients of sin(r) = r (1 + r^2 (c3 + r^2 (c5 + ...))); |r| <= pi/2 keeps the
# truncation error below 6e-8.
_SIN_COEFFS = (-1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800)


def sin_squared(x: Tensor) -> Tensor:
    """sin(x)^2 from elementwise arithmetic only (no call to libm's sinf).

    A call to sinf keeps LLVM from vectorizing the loop TVM fuses around it: Snake's sine
    made the fused AdaIN+Snake loops, about a fifth of the decoder's time, scalar.  sin^2
    has period pi, so reducing by the nearest multiple of pi needs no sign.  Within a few ulp
    (4e-7) of torch.sin(x)**2 for |x| < 4000.
    """
    n = torch.round(x * (1 / math.pi))
    r = ((x - n * _PI_A) - n * _PI_B) - n * _PI_C
    r2 = r * r
    poly = torch.full_like(r2, _SIN_COEFFS[-1])
    for c in reversed(_SIN_COEFFS[:-1]):
        poly = poly * r2 + c
    s = r + r * r2 * poly
    return s * s


def snake(x: Tensor, alpha: Tensor) -> Tensor:
    """kokoro's Snake1D activation, x + sin(alpha x)^2 / alpha."""
    return x + (1 / alpha) * sin_squared(alpha * x)


def adain_resblock1(block: nn.Module, x: Tensor, style: Tensor, mask: Tensor) -> Tensor:
    """kokoro ``AdaINResBlock1.forward`` over a padded bucket; returns zeros past the length."""
    for c1, c2, n1, n2, a1, a2 in zip(
        block.convs1, block.convs2, block.adain1, block.adain2, block.alpha1, block.alpha2
    ):
        xt = snake(adain(n1, x, style, mask), a1)
        xt = c1(xt * mask)
        xt = snake(adain(n2, xt, style, mask), a2)
        xt = c2(xt * mask)
        x = xt + x
    return x * mask


def _generator_geometry(model: nn.Module) -> tuple[list[int], int]:
    generator = model.decoder.generator
    return [up.stride[0] for up in generator.ups], generator.stft.hop_length


class SourceStage(nn.Module):
    """(F0 [B, 2T], lengths [B], noise [B, S * T, harmonics + 1]) -> spectrum [B, n_fft + 2, F].

    ``lengths`` are valid frames of the T-frame bucket, S = ``samples_per_frame``; the
    spectrum is the harmonic source's STFT magnitude and phase stacked on the channel axis,
    over F = 2T * prod(upsample_rates) + 1 STFT frames, zero past the valid ones.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        generator = model.decoder.generator
        self.source = HarmonicSource(generator.m_source)
        stft = generator.stft
        self.stft = ExactSTFT(stft.filter_length, stft.hop_length, stft.win_length)
        strides, hop = _generator_geometry(model)
        self.spectrum_rate = math.prod(strides)  # STFT frames per F0 frame
        self.upsample = self.spectrum_rate * hop  # samples per F0 frame
        self.samples_per_frame = 2 * self.upsample
        self.harmonics = self.source.harmonics

    def forward(self, F0: Tensor, lengths: Tensor, noise: Tensor) -> Tensor:
        f0_lengths, f0_frames = 2 * lengths, F0.shape[-1]
        # Zero F0 in the padding keeps the source's phase flat there, so the linear
        # interpolation at the end of the valid region reads what the unpadded model reads.
        F0 = F0 * frame_mask(f0_lengths, f0_frames)[:, 0]
        f0 = F0.repeat_interleave(self.upsample, dim=-1)[:, :, None]
        source = self.source(f0, noise)[:, :, 0]
        magnitude, phase = self.stft.transform(source, f0_lengths * self.upsample)
        mask = frame_mask(f0_lengths * self.spectrum_rate + 1, f0_frames * self.spectrum_rate + 1)
        return torch.cat([magnitude, phase], dim=1) * mask


class DecoderStage(nn.Module):
    """(asr, F0, N, lengths, style, spectrum) -> audio [B, samples_per_frame * T].

    ``asr`` [B, 512, T] aligned text features, ``F0``/``N`` [B, 2T], ``lengths`` [B] valid
    frames, ``style`` [B, 128] (the first half of a voice pack row), ``spectrum`` from
    SourceStage.  The audio is zero past ``samples_per_frame * lengths``.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.decoder = fold_weight_norm(model.decoder)
        stft = self.decoder.generator.stft
        self.stft = ExactSTFT(stft.filter_length, stft.hop_length, stft.win_length)
        self.strides, hop = _generator_geometry(model)
        self.samples_per_frame = 2 * math.prod(self.strides) * hop

    def forward(
        self,
        asr: Tensor,
        F0: Tensor,
        N: Tensor,
        lengths: Tensor,
        style: Tensor,
        spectrum: Tensor,
    ) -> Tensor:
        frames = asr.shape[-1]
        mask = frame_mask(lengths, frames)
        mask2 = frame_mask(2 * lengths, 2 * frames)
        asr, F0, N = asr * mask, F0 * mask2[:, 0], N * mask2[:, 0]
        x = self._decode(asr, F0, N, style, mask)
        audio = self._generate(x, style, 2 * lengths, spectrum)[:, 0]
        return audio * frame_mask(lengths * self.samples_per_frame, audio.shape[-1])[:, 0]

    def _decode(self, asr: Tensor, F0: Tensor, N: Tensor, style: Tensor, mask: Tensor) -> Tensor:
        d = self.decoder
        f0 = d.F0_conv(F0[:, None]) * mask
        n = d.N_conv(N[:, None]) * mask
        x = adain_resblock(d.encode, torch.cat([asr, f0, n], dim=1), style, mask)
        asr_res = d.asr_res(asr) * mask
        residual = True
        for block in d.decode:
            if residual:
                x = torch.cat([x, asr_res, f0, n], dim=1)
            x = adain_resblock(block, x, style, mask)
            if block.upsample_type != "none":
                mask = upsample_mask(mask)
                residual = False
        return x

    def _generate(self, x: Tensor, style: Tensor, lengths: Tensor, spectrum: Tensor) -> Tensor:
        g = self.decoder.generator
        frames = x.shape[-1]
        spectrum_rate = math.prod(self.strides)
        spectrum = spectrum * frame_mask(lengths * spectrum_rate + 1, frames * spectrum_rate + 1)
        mask, rate = frame_mask(lengths, frames), 1
        for i, stride in enumerate(self.strides):
            x = F.leaky_relu(x, negative_slope=0.1)
            rate *= stride
            last = i == len(self.strides) - 1
            # The last upsampling is followed by a 1-sample reflection pad on the left.
            mask = frame_mask(lengths * rate + int(last), frames * rate + int(last))
            x_source = g.noise_convs[i](spectrum) * mask
            x_source = adain_resblock1(g.noise_res[i], x_source, style, mask)
            x = g.ups[i](x)
            if last:
                x = g.reflection_pad(x)
            x = x * mask + x_source
            blocks = g.resblocks[i * g.num_kernels : (i + 1) * g.num_kernels]
            x = sum(adain_resblock1(b, x, style, mask) for b in blocks) / g.num_kernels
        x = g.conv_post(F.leaky_relu(x) * mask)
        bins = g.post_n_fft // 2 + 1
        magnitude = torch.exp(x[:, :bins, :]) * mask
        phase = torch.sin(x[:, bins:, :])
        return self.stft.inverse(magnitude, phase, mask)
