"""What a bulk run writes: each record's audio and words, and the results table.

Every file is written under a temporary name in the output directory and renamed into
place (``os.replace``, atomic on one file system), so a file with a record's name is
whole: a run stopped at any point leaves at most a ``.partial`` file, removed by the next
run.  A record's words (``ID.json``) go in before its audio, and its row of the results
table (``results.parquet``, rewritten the same way) after: a re-run trusts a record only
when its row says ``ok`` for the same input and the audio's size and SHA-256 still match.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_ext.bulk.records import Record
from kokoro_ext.bulk.worker import PieceResult, from_columns, to_columns
from kokoro_ext.run.timestamps import TimedWord, as_json
from kokoro_ext.run.wav import SAMPLE_RATE

from kokoro_ext.run.encode import encoder

RESULTS = "results.parquet"
FORMATS = ("flac", "opus", "mp3", "wav")
PARTIAL = ".partial"
OK, FAILED = "ok", "failed"


@dataclass(frozen=True)
class ResultRow:
    """A record's line in the results table."""

    index: int  # position in the input
    id: str
    status: str  # OK or FAILED
    error: str
    audio_seconds: float
    synthesis_seconds: float  # summed over the record's pieces (actor wall time)
    output: str  # the audio file's name in the output directory ("" when failed)
    words: str  # the word timestamps' file name
    bytes: int  # the audio file's size
    sha256: str  # of the audio file
    input_sha256: str  # Record.fingerprint: text, voice, speed, language and format
    pieces: int


def read_results(out_dir: Path) -> dict[str, ResultRow]:
    """The rows of the last run's table by id ({} when there is none or it is unreadable)."""
    path = out_dir / RESULTS
    if not path.is_file():
        return {}
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
        rows = from_columns(table.to_pydict(), ResultRow)
    except Exception:  # noqa: BLE001 - an old or broken table: every record is done again
        return {}
    return {row.id: row for row in rows}


def write_results(out_dir: Path, rows: list[ResultRow]) -> Path:
    """The table of ``rows`` in input order, written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = out_dir / RESULTS
    rows = sorted(rows, key=lambda row: row.index)
    table = pa.table(to_columns(rows, ResultRow), schema=_schema(pa))
    temporary = path.with_name(f".{path.name}{PARTIAL}")
    pq.write_table(table, temporary)
    os.replace(temporary, path)
    return path


def _schema(pa):
    types = {int: pa.int64(), str: pa.string(), float: pa.float64()}
    hints = {"int": int, "str": str, "float": float}
    from dataclasses import fields

    return pa.schema([(f.name, types[hints[f.type] if isinstance(f.type, str) else f.type])
                      for f in fields(ResultRow)])


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def still_valid(row: ResultRow | None, record: Record, out_dir: Path, audio_format: str) -> bool:
    """Whether ``record``'s output from an earlier run can stand: its row is ``ok`` for
    the same input and format, and the audio file is there with the size and SHA-256
    the row recorded, next to its words."""
    if row is None or row.status != OK or row.input_sha256 != record.fingerprint(audio_format):
        return False
    audio, words = out_dir / row.output, out_dir / row.words
    try:
        if audio.stat().st_size != row.bytes or not words.is_file():
            return False
    except OSError:
        return False
    return sha256_of(audio) == row.sha256


def remove_partials(out_dir: Path) -> int:
    """Delete what a stopped run left half-written; how many files."""
    stale = [p for p in out_dir.glob(f".*{PARTIAL}") if p.is_file()]
    for path in stale:
        path.unlink()
    return len(stale)


class RecordWriter:
    """One record's pieces, in order, into ``STEM.FORMAT`` and ``STEM.json``.

    The audio is encoded as the pieces arrive (a chapter is never whole in memory); the
    silence a sentence end leaves goes between two pieces, and each piece's word times
    are moved by the audio before it.
    """

    def __init__(self, out_dir: Path, record: Record, audio_format: str):
        if audio_format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {audio_format!r}")
        self.out_dir, self.record, self.format = out_dir, record, audio_format
        self.audio_path = out_dir / f"{record.stem}.{audio_format}"
        self.words_path = out_dir / f"{record.stem}.json"
        self._temporary = out_dir / f".{self.audio_path.name}{PARTIAL}"
        self._file = self._temporary.open("w+b")
        self._encoder = encoder(audio_format)
        self._samples = 0
        self._pause = 0.0  # silence owed before the next piece
        self._words: list[TimedWord] = []
        self._synthesis = 0.0
        self._pieces = 0
        self.error = ""

    def add(self, result: PieceResult) -> None:
        """The record's next piece (pieces come in order)."""
        self._synthesis += result.seconds
        self._pieces += 1
        if self.error or result.error:
            self.error = self.error or result.error
            return
        silence = round(self._pause * SAMPLE_RATE) if self._pieces > 1 else 0
        samples = np.concatenate([np.zeros(silence, np.float32), np.frombuffer(result.audio, "<f4")])
        offset = (self._samples + silence) / SAMPLE_RATE  # where this piece's own audio starts
        self._words += [TimedWord(text, start + offset, end + offset)
                        for text, start, end in json.loads(result.words)]
        self._file.write(self._encoder.feed(samples))
        self._samples += len(samples)
        self._pause = result.pause_after

    def finish(self) -> ResultRow:
        """Close the files and put them in place (or drop them, if a piece failed)."""
        fingerprint = self.record.fingerprint(self.format)
        if self.error:
            self.discard()
            return failed_row(self.record, self.error, fingerprint, self._synthesis, self._pieces)
        self._file.write(self._encoder.finish())
        self._file.flush()
        # the lengths a streamed header leaves open (WAV sizes, FLAC's total samples and MD5)
        for offset, data in self._encoder.fixups:
            self._file.seek(offset)
            self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        seconds = self._samples / SAMPLE_RATE
        document = {"id": self.record.id, "audio": self.audio_path.name,
                    **as_json(self._words, seconds)}
        _write_atomically(self.words_path, json.dumps(document, ensure_ascii=False, indent=1) + "\n")
        os.replace(self._temporary, self.audio_path)
        return ResultRow(
            self.record.index, self.record.id, OK, "", seconds, self._synthesis,
            self.audio_path.name, self.words_path.name, self.audio_path.stat().st_size,
            sha256_of(self.audio_path), fingerprint, self._pieces,
        )  # fmt: skip

    def discard(self) -> None:
        self._file.close()
        self._temporary.unlink(missing_ok=True)


def failed_row(record: Record, error: str, fingerprint: str = "", synthesis: float = 0.0,
               pieces: int = 0) -> ResultRow:
    return ResultRow(record.index, record.id, FAILED, error, 0.0, synthesis, "", "", 0, "",
                     fingerprint, pieces)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}{PARTIAL}")
    with temporary.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
