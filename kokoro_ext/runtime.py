"""``Synthesizer``: text or phonemes to a 24 kHz waveform with the compiled stages."""

from __future__ import annotations

import importlib.metadata
import json
import threading
from pathlib import Path

import numpy as np
import tvm

from kokoro_ext import artifacts
from kokoro_ext.compiler import StageRunner
from kokoro_ext.model import load_voice
from kokoro_ext.pipeline import Trace, synthesize_ids, voice_style
from kokoro_ext.stages import Geometry
from kokoro_ext.text import Phonemizer, phonemes_to_ids

SAMPLE_RATE = 24_000
SPEED_RANGE = (0.5, 2.0)


class Synthesizer:
    """Loads a build (``python -m kokoro_ext.build --out DIR``) and synthesizes speech.

    Stages are loaded on first use of a bucket.  One Synthesizer may be shared between
    threads: calls are serialized by a lock (the compiled stages use both cores already).
    """

    def __init__(self, artifacts_dir: str | Path = "artifacts"):
        self.directory = Path(artifacts_dir)
        self.manifest = artifacts.read_manifest(self.directory)
        installed = importlib.metadata.version("apache-tvm")
        if self.manifest["tvm"] != installed:
            raise ValueError(
                f"{self.directory} was built with TVM {self.manifest['tvm']}, this is TVM "
                f"{installed}; rebuild with `python -m kokoro_ext.build --out {self.directory}`"
            )
        self.config = json.loads((self.directory / artifacts.CONFIG).read_text())
        self.vocab: dict[str, int] = self.config["vocab"]
        self.geometry = Geometry(**self.manifest["geometry"])
        self.voice = np.load(self.directory / artifacts.VOICE)
        self.token_buckets = self.manifest["buckets"]["tokens"]
        self.frame_buckets = self.manifest["buckets"]["frames"]
        self._runners: dict[tuple[str, int], StageRunner] = {}
        self._phonemizer: Phonemizer | None = None
        self._lock = threading.Lock()

    def _stage(self, name: str, bucket: int) -> StageRunner:
        key = (name, bucket)
        if key not in self._runners:
            entry = self.manifest["stages"][f"{name}-{bucket}"]
            library = tvm.runtime.load_module(str(self.directory / entry["file"]))
            self._runners[key] = StageRunner(library)
        return self._runners[key]

    def phonemize(self, text: str) -> str:
        """English text -> Kokoro phonemes (offline G2P)."""
        if self._phonemizer is None:
            self._phonemizer = Phonemizer()
        return self._phonemizer(text)

    def synthesize(
        self,
        text: str,
        voice: str | Path | np.ndarray | None = None,
        speed: float = 1.0,
        seed: int = 0,
    ) -> np.ndarray:
        """English text -> float32 waveform at 24 kHz."""
        return self.synthesize_phonemes(self.phonemize(text), voice, speed, seed).audio

    def synthesize_phonemes(
        self,
        phonemes: str,
        voice: str | Path | np.ndarray | None = None,
        speed: float = 1.0,
        seed: int = 0,
    ) -> Trace:
        """Kokoro phonemes -> Trace (audio, durations, buckets and stage outputs).

        ``voice``: a voice pack path or array [510, 1, 256]; the build's voice by default.
        ``seed`` fixes the harmonic source noise (kokoro's draws after manual_seed(seed)).
        """
        if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise ValueError(f"speed must be in [{SPEED_RANGE[0]}, {SPEED_RANGE[1]}], got {speed}")
        ids = phonemes_to_ids(phonemes, self.vocab)
        if not phonemes.strip() or len(ids) <= 2:
            raise ValueError(f"no phonemes to synthesize in {phonemes!r}")
        pack = (
            self.voice
            if voice is None
            else (
                np.asarray(voice, dtype=np.float32)
                if isinstance(voice, np.ndarray)
                else load_voice(voice).numpy()
            )
        )
        style = voice_style(pack, len(ids) - 2)
        with self._lock:
            return synthesize_ids(
                self._stage,
                self.geometry,
                ids,
                style,
                self.token_buckets,
                self.frame_buckets,
                speed,
                seed,
            )
