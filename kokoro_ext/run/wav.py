"""24 kHz mono 16-bit WAV output: numpy and the standard library only (no TVM, no torch),
so that anything that writes Kokoro's audio can use it without loading a model."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

#: Kokoro's output sample rate.
SAMPLE_RATE = 24_000


def pcm16(audio: np.ndarray) -> bytes:
    """Float audio in [-1, 1] as little-endian 16-bit PCM bytes (clipped)."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Write float audio in [-1, 1] as 16-bit PCM mono WAV."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(pcm16(audio))
