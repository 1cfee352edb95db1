"""The Ray Data actor: loads the build once, then synthesizes batches of pieces.

``SynthesizePieces`` is the callable class ``map_batches`` makes one instance of per
actor.  Ray hands it columns (a dict of arrays by column name) and wants columns back;
``from_columns`` and ``to_columns`` turn them into the dataclasses and back, so that
nothing else reads a column by its name.  A piece that fails for its own reasons (a
voice that is not there, text with nothing to say) comes back with its ``error`` and the
batch goes on; a process that dies (killed, out of memory) is Ray's to restart and retry.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

from kokoro_ext.bulk.records import Piece

T = TypeVar("T")


@dataclass(frozen=True)
class PieceResult:
    """A piece's audio and words, or why there is none."""

    record: int
    piece: int
    last: bool
    audio: bytes  # float32 little-endian samples at 24 kHz, as the encoders take them
    words: str  # JSON [[text, start, end], ...], seconds of this piece's audio
    seconds: float  # synthesis wall time
    pause_after: float
    error: str  # "" when the piece was synthesized


def to_columns(rows: Sequence[Any], cls: type) -> dict[str, list]:
    """Dataclass instances of ``cls`` as columns, for Ray."""
    return {f.name: [getattr(row, f.name) for row in rows] for f in fields(cls)}


def from_columns(batch: Mapping[str, Sequence], cls: type[T]) -> list[T]:
    """Columns from Ray as instances of the dataclass ``cls``."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    count = len(batch[names[0]])
    return [cls(**{name: _plain(batch[name][i]) for name in names}) for i in range(count)]


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (Ray's numpy batches give those)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, bytes) else value


class SynthesizePieces:
    """One per actor: a Synthesizer of ``artifacts``, on ``threads`` threads."""

    def __init__(self, artifacts: str, threads: int):
        # TVM sizes a thread pool when it first runs a parallel kernel: set before loading
        os.environ["TVM_NUM_THREADS"] = str(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # Ray sets it to the actor's CPUs
        from kokoro_ext.run import prefer_runtime_library

        prefer_runtime_library()
        from kokoro_ext.run.synthesizer import Synthesizer

        self.synth = Synthesizer(artifacts)
        self.synth.load()
        self._languages: dict[str, Synthesizer] = {"": self.synth}

    def __call__(self, batch: Mapping[str, Sequence]) -> dict[str, list]:
        return to_columns([self.one(piece) for piece in from_columns(batch, Piece)], PieceResult)

    def one(self, piece: Piece) -> PieceResult:
        start = time.perf_counter()
        audio, words, error = b"", "[]", ""
        try:
            synth = self._for_language(piece.language)
            parts, timed = [], []
            for chunk in synth.stream(piece.text, piece.voice or None, piece.speed,
                                      seed=piece.piece << 16):
                parts.append(chunk.joined())
                timed += [[w.text, round(w.start, 3), round(w.end, 3)] for w in chunk.words]
            audio = np.concatenate(parts).astype("<f4").tobytes()
            words = json.dumps(timed, ensure_ascii=False)
        except Exception as failure:  # noqa: BLE001
            # mostly the input's fault (kokoro_ext.run.errors: a voice that is not there,
            # nothing to say); whatever it is, this record fails and the run goes on, where
            # an exception out of the batch would end the whole dataset
            error = f"{type(failure).__name__}: {failure}"
        return PieceResult(piece.record, piece.piece, piece.last, audio, words,
                           time.perf_counter() - start, piece.pause_after, error)

    def _for_language(self, language: str):
        """The Synthesizer reading in ``language`` ("" for the voice's): a shallow copy
        of the loaded one, so that it shares its stages, locks and front ends."""
        if language not in self._languages:
            from kokoro_ext.text.frontend import resolve_language

            variant = copy.copy(self.synth)
            variant.lang = resolve_language(language).code  # ValueError for an unknown one
            self._languages[language] = variant
        return self._languages[language]
