"""kokoro's own PyTorch computation, reproduced with known random draws.

kokoro's harmonic source draws its noise inside the model.  Seeding torch and then
calling ``source_noise`` with the same seed gives exactly the standard normal draws that
kokoro's SineGen makes, so our stages (which take the noise as an input) and kokoro's
model can be compared on the same randomness.

One disagreement is not numerical error: the generator reads the phase of its source's
STFT, and where a bin is (nearly) real and negative the phase sits on atan2's branch cut,
so a rounding-level difference turns pi into -pi.  ``kokoro_decoder`` can count these
points against ExactSTFT and, on request, resolve them the way ExactSTFT does, so that a
comparison measures everything else.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from kokoro_ext.build.export.stft import ExactSTFT


def source_noise(seed: int, batch: int, samples: int, harmonics: int = 9) -> Tensor:
    """The [batch, samples, harmonics] normal draws kokoro's SineGen makes after ``manual_seed(seed)``.

    SineGen first draws its initial phases (``torch.rand(batch, harmonics)``), then
    ``randn_like`` of its sine waves, which are a transposed view [B, harmonics, L] in
    memory; the draws fill memory in that order.
    """
    generator = torch.Generator().manual_seed(seed)
    torch.rand(batch, harmonics, generator=generator)
    noise = torch.empty(batch, harmonics, samples).transpose(1, 2)
    return noise.normal_(generator=generator)


@dataclass
class DecoderReference:
    """kokoro's decoder output and the source spectrum its generator read."""

    audio: Tensor  # [B, samples]
    spectrum: Tensor  # [B, n_fft + 2, frames]: magnitude and phase, as SourceStage gives
    phase_flips: int  # phase points on the branch cut: ~2 pi from the compared phase


@contextlib.contextmanager
def _source_phase(model: nn.Module, phase: Tensor | None) -> Iterator[dict]:
    """Hook kokoro's source STFT: count (and with ``phase``, resolve) branch-cut flips."""
    stft = model.decoder.generator.stft
    exact = ExactSTFT(stft.filter_length, stft.hop_length, stft.win_length)
    torch_transform = stft.transform
    seen: dict = {"flips": 0}

    def transform(signal: Tensor) -> tuple[Tensor, Tensor]:
        magnitude, kokoro_phase = torch_transform(signal)
        if phase is not None:
            other = phase[..., : kokoro_phase.shape[-1]]
        else:
            other = exact.transform(signal)[1]
        flipped = (kokoro_phase - other).abs() > math.pi
        if phase is not None:
            kokoro_phase = torch.where(flipped, other, kokoro_phase)
        seen["flips"] = int(flipped.sum())
        seen["spectrum"] = torch.cat([magnitude, kokoro_phase], dim=1)
        return magnitude, kokoro_phase

    stft.transform = transform
    try:
        yield seen
    finally:
        del stft.transform  # back to the class's method


def kokoro_decoder(
    model: nn.Module,
    asr: Tensor,
    F0: Tensor,
    N: Tensor,
    style: Tensor,
    seed: int,
    phase: Tensor | None = None,
) -> DecoderReference:
    """kokoro's ``Decoder.forward`` under ``manual_seed(seed)``.

    Its source phase (``torch.angle`` of ``torch.stft``) is compared with ``phase`` [B,
    bins, frames] when given, else with ExactSTFT's phase of the same signal; points that
    differ by more than pi are branch-cut flips.  With ``phase`` given, kokoro's generator
    reads the compared value at those points (the same angle, 2 pi apart), so that the
    audio differs from a model that computed ``phase`` by numerical error only.
    """
    with _source_phase(model, phase) as seen, torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        audio = model.decoder(asr, F0, N, style)[:, 0]
    return DecoderReference(audio, seen["spectrum"], seen["flips"])


@dataclass
class SynthesisReference:
    """kokoro's ``forward_with_tokens`` output."""

    audio: Tensor  # [samples]
    durations: Tensor  # [tokens] frames per token
    phase_flips: int


def kokoro_synthesize(
    model: nn.Module,
    input_ids: list[int],
    style: Tensor,
    speed: float,
    seed: int,
    phase: Tensor | None = None,
) -> SynthesisReference:
    """kokoro's ``KModel.forward_with_tokens`` under ``manual_seed(seed)`` (see kokoro_decoder)."""
    with _source_phase(model, phase) as seen, torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        audio, durations = model.forward_with_tokens(
            torch.tensor([input_ids]), torch.as_tensor(style), speed
        )
    return SynthesisReference(audio, durations.reshape(-1), seen["flips"])
