"""The host side of synthesis: shapes, durations, alignment, noise; stages run elsewhere.

``synthesize_ids`` runs the four stages of kokoro_ext.build.stages through a ``StageProvider``
(compiled modules in the runtime, PyTorch modules in validation), so both take the same
path through the pipeline and differ only in what computes a stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kokoro_ext.run.alignment import align
from kokoro_ext.run.geometry import STYLE_DIM, Geometry
from kokoro_ext.run.noise import source_noise

#: stage name, padded length -> callable on numpy inputs returning numpy outputs
StageProvider = Callable[[str, int], Callable[..., list[np.ndarray]]]


@dataclass(frozen=True)
class AnyLength:
    """An axis the stages take at every length up to ``limit``: no padding at all."""

    limit: int


#: The lengths an axis is padded to: a list of buckets (static-shape stages, the smallest
#: bucket that holds the input), or AnyLength (symbolic stages, the input's own length).
Sizes = Sequence[int] | AnyLength


@dataclass
class Trace:
    """One synthesis: the audio and what each stage saw and produced (valid parts)."""

    audio: np.ndarray  # float32 [samples] at 24 kHz
    durations: np.ndarray  # int64 [tokens]: frames per token
    token_bucket: int  # the tokens' padded length (the length itself with AnyLength)
    frame_bucket: int  # the frames' padded length
    stages: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


class LengthOverflow(ValueError):
    """The input needs more ``axis`` ("tokens" or "frames") than one call takes.

    Callers that can split the input (kokoro_ext.run.synthesizer's chunking) catch this class;
    the frame count is known only after the text stage ran.
    """

    def __init__(self, axis: str, size: int, largest: int):
        self.axis, self.size, self.largest = axis, size, largest
        super().__init__(
            f"input needs {size} {axis}, more than one call takes ({largest}); "
            "split the text (Synthesizer.stream does)"
        )


class NonFiniteOutput(RuntimeError):
    """A stage returned NaN or Inf: a broken build or kernel, not a property of the input."""


def pick_bucket(size: int, sizes: Sizes, axis: str) -> int:
    """The length ``size`` is padded to; LengthOverflow (a ValueError) if none holds it."""
    if isinstance(sizes, AnyLength):
        if size > sizes.limit:
            raise LengthOverflow(axis, size, sizes.limit)
        return size
    fitting = [b for b in sorted(sizes) if b >= size]
    if not fitting:
        raise LengthOverflow(axis, size, max(sizes))
    return fitting[0]


def check_finite(stage: str, **outputs: np.ndarray) -> None:
    """NonFiniteOutput naming the stage and output if any value is NaN or Inf."""
    for name, value in outputs.items():
        if not np.isfinite(value).all():
            raise NonFiniteOutput(
                f"the {stage} stage returned non-finite values in {name!r} "
                f"({int(np.isnan(value).sum())} NaN, {int(np.isinf(value).sum())} Inf); "
                "the build or its kernels are broken: rebuild the artifacts and run "
                "`python -m kokoro_ext.validate` on them"
            )


def voice_style(voice: np.ndarray, phonemes: int) -> np.ndarray:
    """The [1, 256] style row kokoro picks from a [510, 1, 256] voice pack for ``phonemes``."""
    voice = np.asarray(voice, dtype=np.float32)
    return voice[min(max(phonemes - 1, 0), len(voice) - 1)].reshape(1, 2 * STYLE_DIM)


def synthesize_ids(
    run_stage: StageProvider,
    geometry: Geometry,
    input_ids: Sequence[int],
    style: np.ndarray,
    token_sizes: Sizes,
    frame_sizes: Sizes,
    speed: float = 1.0,
    seed: int = 0,
) -> Trace:
    """Token ids (with kokoro's boundary 0s) and a [1, 256] style row -> Trace.

    ``seed`` fixes the harmonic source's noise: the draws kokoro makes after
    ``torch.manual_seed(seed)`` (kokoro_ext.run.noise.source_noise).  Raises
    LengthOverflow when the input exceeds the largest token or frame size, and
    NonFiniteOutput naming the stage whose valid output holds NaN or Inf.
    """
    tokens = len(input_ids)
    token_bucket = pick_bucket(tokens, token_sizes, "tokens")
    ids = np.zeros((1, token_bucket), dtype=np.int64)
    ids[0, :tokens] = input_ids
    token_lengths = np.array([tokens], dtype=np.int64)
    decoder_style, predictor_style = style[:, :STYLE_DIM], style[:, STYLE_DIM:]
    valid: dict[str, dict[str, np.ndarray]] = {}  # each stage's outputs, trimmed to the input

    def keep(stage: str, **outputs: np.ndarray) -> None:
        check_finite(stage, **outputs)
        valid[stage] = outputs

    d, duration, t_en = run_stage("text", token_bucket)(ids, token_lengths, predictor_style)
    keep("text", d=d[:, :tokens], duration=duration[:, :tokens], t_en=t_en[..., :tokens])

    durations = np.maximum(np.round(duration[0, :tokens] / speed), 1).astype(np.int64)
    frames = int(durations.sum())
    frame_bucket = pick_bucket(frames, frame_sizes, "frames")
    en = align(d[0, :tokens].T, durations, frame_bucket)[None]  # [1, C, frames]
    asr = align(t_en[0, :, :tokens], durations, frame_bucket)[None]
    frame_lengths = np.array([frames], dtype=np.int64)
    F0, N = run_stage("prosody", frame_bucket)(en, frame_lengths, predictor_style)
    keep("prosody", F0=F0[:, : 2 * frames], N=N[:, : 2 * frames])

    samples = geometry.samples_per_frame * frames
    noise = source_noise(seed, 1, samples, geometry.harmonics)
    if frame_bucket > frames:  # static-shape stages: zeros past the input
        padding = geometry.samples_per_frame * (frame_bucket - frames)
        noise = np.pad(noise, ((0, 0), (0, padding), (0, 0)))
    (spectrum,) = run_stage("source", frame_bucket)(F0, frame_lengths, noise)
    spectrum_frames = geometry.spectrum_per_frame * frames + 1
    keep("source", spectrum=spectrum[..., :spectrum_frames])
    (audio,) = run_stage("decoder", frame_bucket)(
        asr, F0, N, frame_lengths, decoder_style, spectrum
    )
    keep("decoder", audio=audio[:, :samples])
    return Trace(
        audio=valid["decoder"]["audio"][0].astype(np.float32),
        durations=durations,
        token_bucket=token_bucket,
        frame_bucket=frame_bucket,
        stages=valid,
    )
