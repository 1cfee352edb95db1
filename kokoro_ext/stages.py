"""The compiled stages of the pipeline: what each one is, takes and returns.

Kokoro is split where a static-shape compiler needs it (see kokoro_ext.export):

  text     tokens bucket  (input_ids, lengths, style)            -> (d, duration, t_en)
  (host)   integer durations -> alignment -> en = d @ A, asr = t_en @ A over a frame bucket
  prosody  frames bucket  (en, lengths, style)                   -> (F0, N)
  source   frames bucket  (F0, lengths, noise)                   -> spectrum
  decoder  frames bucket  (asr, F0, N, lengths, style, spectrum) -> audio

A bucket is the padded length of its axis; ``lengths`` carry the valid lengths through
every stage, so the valid part of the output does not depend on the bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from kokoro_ext.export import DecoderStage, ProsodyStage, SourceStage, TextStage

Axis = Literal["tokens", "frames"]

#: Style vector halves: kokoro's decoder reads ref_s[:, :128], the predictor ref_s[:, 128:].
STYLE_DIM = 128


@dataclass(frozen=True)
class Geometry:
    """Time-axis rates of kokoro's decoder, as its Generator sets them."""

    samples_per_frame: int  # audio samples per alignment frame (600 at 24 kHz)
    spectrum_per_frame: int  # source STFT frames per alignment frame (120)
    harmonics: int  # sine harmonics of the source, fundamental included (9)

    @classmethod
    def from_model(cls, model: nn.Module) -> Geometry:
        generator = model.decoder.generator
        upsample = math.prod(up.stride[0] for up in generator.ups)
        return cls(
            2 * upsample * generator.stft.hop_length,
            2 * upsample,
            generator.m_source.l_sin_gen.dim,
        )


@dataclass(frozen=True)
class StageSpec:
    """One compiled stage: its PyTorch module and example inputs for a bucket size."""

    name: str
    axis: Axis
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    module: Callable[[nn.Module], nn.Module]
    example: Callable[[nn.Module, int], tuple[Tensor, ...]]


def _text_example(model: nn.Module, tokens: int) -> tuple[Tensor, ...]:
    ids = torch.ones(1, tokens, dtype=torch.int64)
    return ids, torch.tensor([tokens]), torch.zeros(1, STYLE_DIM)


def _prosody_example(model: nn.Module, frames: int) -> tuple[Tensor, ...]:
    channels = model.predictor.shared.input_size
    return torch.zeros(1, channels, frames), torch.tensor([frames]), torch.zeros(1, STYLE_DIM)


def _source_example(model: nn.Module, frames: int) -> tuple[Tensor, ...]:
    geometry = Geometry.from_model(model)
    noise = torch.zeros(1, geometry.samples_per_frame * frames, geometry.harmonics)
    return torch.zeros(1, 2 * frames), torch.tensor([frames]), noise


def _decoder_example(model: nn.Module, frames: int) -> tuple[Tensor, ...]:
    spectrum_channels = model.decoder.generator.post_n_fft + 2
    spectrum_frames = Geometry.from_model(model).spectrum_per_frame * frames + 1
    return (
        torch.zeros(1, model.decoder.asr_res[0].in_channels, frames),
        torch.zeros(1, 2 * frames),
        torch.zeros(1, 2 * frames),
        torch.tensor([frames]),
        torch.zeros(1, STYLE_DIM),
        torch.zeros(1, spectrum_channels, spectrum_frames),
    )


STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (
        StageSpec(
            "text",
            "tokens",
            ("input_ids", "lengths", "style"),
            ("d", "duration", "t_en"),
            TextStage,
            _text_example,
        ),
        StageSpec(
            "prosody",
            "frames",
            ("en", "lengths", "style"),
            ("F0", "N"),
            ProsodyStage,
            _prosody_example,
        ),
        StageSpec(
            "source",
            "frames",
            ("F0", "lengths", "noise"),
            ("spectrum",),
            SourceStage,
            _source_example,
        ),
        StageSpec(
            "decoder",
            "frames",
            ("asr", "F0", "N", "lengths", "style", "spectrum"),
            ("audio",),
            DecoderStage,
            _decoder_example,
        ),
    )
}
