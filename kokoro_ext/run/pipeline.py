"""The host side of synthesis: durations, alignment, noise; stages run elsewhere.

``synthesize_ids`` runs the four stages (kokoro_ext.run.contract) through a
``StageProvider`` (compiled libraries in the runtime, PyTorch modules in validation), so
both take the same path through the pipeline and differ only in what computes a stage.
Every stage runs at the input's own length: the libraries take any length up to the
build's limits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kokoro_ext.run.alignment import align
from kokoro_ext.run.geometry import STYLE_DIM, Geometry
from kokoro_ext.run.manifest import Limits
from kokoro_ext.run.noise import source_noise

#: A stage called by name: keyword inputs -> outputs by name (kokoro_ext.run.runner.NamedStage).
StageFn = Callable[..., Mapping[str, np.ndarray]]
#: stage name -> that stage
StageProvider = Callable[[str], StageFn]


@dataclass
class Trace:
    """One synthesis: the audio and what each stage saw and produced."""

    audio: np.ndarray  # float32 [samples] at 24 kHz
    durations: np.ndarray  # int64 [tokens]: frames per token
    tokens: int  # the input's length, kokoro's two boundary tokens included
    frames: int  # the audio's length in alignment frames: durations.sum()
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


def check_finite(stage: str, outputs: Mapping[str, np.ndarray]) -> None:
    """NonFiniteOutput naming the stage and output if any value is NaN or Inf."""
    for name, value in outputs.items():
        if not np.isfinite(value).all():
            raise NonFiniteOutput(
                f"the {stage} stage returned non-finite values in {name!r} "
                f"({int(np.isnan(value).sum())} NaN, {int(np.isinf(value).sum())} Inf); "
                "the build or its kernels are broken: rebuild the artifacts and run "
                "`python -m kokoro_ext.validate` on them"
            )


def check_noise(noise: np.ndarray, geometry: Geometry, frames: int) -> None:
    """ValueError unless ``noise`` has the shape a chunk of ``frames`` takes, float32
    [1, samples, harmonics] (a given noise, for either path)."""
    want = (1, geometry.samples_per_frame * frames, geometry.harmonics)
    if tuple(np.shape(noise)) != want:
        raise ValueError(f"noise of shape {tuple(np.shape(noise))} given, this chunk takes {want}")


def voice_style(voice: np.ndarray, phonemes: int) -> np.ndarray:
    """The [1, 256] style row kokoro picks from a [510, 1, 256] voice pack for ``phonemes``."""
    voice = np.asarray(voice, dtype=np.float32)
    return voice[min(max(phonemes - 1, 0), len(voice) - 1)].reshape(1, 2 * STYLE_DIM)


def durations(predicted: np.ndarray, speed: float = 1.0) -> np.ndarray:
    """Frames per token: the text stage's durations divided by ``speed``, rounded (half to
    even), at least 1 (host.js's ``durations`` in the page)."""
    return np.maximum(np.round(np.asarray(predicted) / speed), 1).astype(np.int64)


def synthesize_ids(
    run_stage: StageProvider,
    geometry: Geometry,
    input_ids: Sequence[int],
    style: np.ndarray,
    limits: Limits,
    speed: float = 1.0,
    seed: int = 0,
    noise: np.ndarray | None = None,
) -> Trace:
    """Token ids (with kokoro's boundary 0s) and a [1, 256] style row -> Trace.

    ``seed`` fixes the harmonic source's noise: the draws kokoro makes after
    ``torch.manual_seed(seed)`` (kokoro_ext.run.noise.source_noise); ``noise``
    (float32 [1, samples, harmonics]) is used instead where given.  Raises
    LengthOverflow when the input needs more tokens or frames than ``limits``, and
    NonFiniteOutput naming the stage whose output holds NaN or Inf.
    """
    tokens = len(input_ids)
    if tokens > limits.tokens:
        raise LengthOverflow("tokens", tokens, limits.tokens)
    decoder_style, predictor_style = style[:, :STYLE_DIM], style[:, STYLE_DIM:]
    outputs: dict[str, dict[str, np.ndarray]] = {}

    def run(stage: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        result = dict(run_stage(stage)(**inputs))
        check_finite(stage, result)
        outputs[stage] = result
        return result

    text = run(
        "text",
        input_ids=np.array([input_ids], dtype=np.int64),
        lengths=np.array([tokens], dtype=np.int64),
        style=predictor_style,
    )
    frames_per_token = durations(text["duration"][0], speed)
    frames = int(frames_per_token.sum())
    if frames > limits.frames:
        raise LengthOverflow("frames", frames, limits.frames)
    frame_lengths = np.array([frames], dtype=np.int64)
    prosody = run(
        "prosody",
        en=align(text["d"][0].T, frames_per_token, frames)[None],  # [1, C, frames]
        lengths=frame_lengths,
        style=predictor_style,
    )
    samples = geometry.samples_per_frame * frames
    if noise is None:
        noise = source_noise(seed, 1, samples, geometry.harmonics)
    else:
        check_noise(noise, geometry, frames)
    source = run("source", F0=prosody["F0"], lengths=frame_lengths, noise=noise)
    decoder = run(
        "decoder",
        asr=align(text["t_en"][0], frames_per_token, frames)[None],
        F0=prosody["F0"],
        N=prosody["N"],
        lengths=frame_lengths,
        style=decoder_style,
        spectrum=source["spectrum"],
    )
    return Trace(
        audio=decoder["audio"][0].astype(np.float32),
        durations=frames_per_token,
        tokens=tokens,
        frames=frames,
        stages=outputs,
    )
