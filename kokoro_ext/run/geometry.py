"""Shapes the host pipeline needs of the model: the style split and the time-axis rates.

The run side reads ``Geometry`` from a build's manifest; the build side derives it from
the model (``Geometry.from_model``, attribute reads only, so torch is not imported here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Style vector halves: kokoro's decoder reads ref_s[:, :128], the predictor ref_s[:, 128:].
STYLE_DIM = 128


@dataclass(frozen=True)
class Geometry:
    """Time-axis rates of kokoro's decoder, as its Generator sets them."""

    samples_per_frame: int  # audio samples per alignment frame (600 at 24 kHz)
    spectrum_per_frame: int  # source STFT frames per alignment frame (120)
    harmonics: int  # sine harmonics of the source, fundamental included (9)

    @classmethod
    def from_model(cls, model: Any) -> Geometry:
        """The rates of a kokoro ``KModel`` (upsampling strides, STFT hop, harmonics)."""
        generator = model.decoder.generator
        upsample = math.prod(up.stride[0] for up in generator.ups)
        return cls(
            2 * upsample * generator.stft.hop_length,
            2 * upsample,
            generator.m_source.l_sin_gen.dim,
        )
