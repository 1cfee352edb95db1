"""``python -m kokoro_ext.say "Hello world" -o hello.wav [--voice V] [--speed S]``."""

from __future__ import annotations

import argparse
import sys
import time
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kokoro_ext.runtime import SAMPLE_RATE, Synthesizer


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Write float audio in [-1, 1] as 16-bit PCM mono WAV."""
    pcm = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(pcm.tobytes())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kokoro_ext.say", description=__doc__)
    parser.add_argument("text", help="English text")
    parser.add_argument("-o", "--output", type=Path, default=Path("out.wav"))
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument("--voice", type=Path, help="voice pack .pt (default: the build's voice)")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="seed of the harmonic source noise")
    args = parser.parse_args(argv)
    try:
        synth = Synthesizer(args.artifacts)
        phonemes = synth.phonemize(args.text)
        start = time.perf_counter()
        trace = synth.synthesize_phonemes(phonemes, args.voice, args.speed, args.seed)
        seconds = time.perf_counter() - start
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_wav(args.output, trace.audio)
    duration = len(trace.audio) / SAMPLE_RATE
    print(
        f"{phonemes}\nwrote {args.output}: {duration:.2f} s of audio in {seconds:.2f} s "
        f"(tokens bucket {trace.token_bucket}, frames bucket {trace.frame_bucket})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
