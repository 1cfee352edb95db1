"""What a bulk run reads: records from a table or chapters of a book, and their pieces.

A table (JSONL, CSV or Parquet) has a row per record: ``text`` and, optionally, ``id``,
``voice``, ``speed`` and ``language``; a row's missing or malformed field makes that
record a failed one (``Record.problem``), not the run.  A book (``.txt``, ``.md``) is cut
into chapters at its headings (``chapters``), each a record.

A long record is cut at sentence ends into pieces of about ``piece_chars`` characters
(``pieces``) so that one chapter keeps every actor busy; the Synthesizer packs its
chunks within sentences, so the cut changes no chunk, and the writer puts back, between
two pieces, the pause the sentence end would have had (kokoro_ext.text.chunking.PAUSES).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from kokoro_ext.text.chunking import pause_after, split_sentences
from kokoro_ext.text.markup import is_ssml

TABLE_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".parquet")
BOOK_SUFFIXES = (".txt", ".md", ".markdown")
#: Characters of text a piece holds at most (unless one sentence is longer).
PIECE_CHARS = 2000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Record:
    """One output file's worth of text, in the input's order (``index``)."""

    index: int
    id: str
    text: str
    voice: str | None = None
    speed: float = 1.0
    language: str | None = None
    problem: str | None = None  # why the record cannot be synthesized, found on reading

    @property
    def stem(self) -> str:
        """The output files' name without suffix: the id with only [A-Za-z0-9._-]."""
        return _UNSAFE.sub("_", self.id).strip("._") or f"record-{self.index}"

    def fingerprint(self, audio_format: str) -> str:
        """SHA-256 of what decides the output: a re-run redoes a record whose input changed."""
        spec = [self.text, self.voice, self.speed, self.language, audio_format]
        return hashlib.sha256(json.dumps(spec, ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class Piece:
    """A record's text from one sentence end to another: a row of the Ray dataset."""

    record: int  # Record.index
    piece: int  # position in the record, from 0
    last: bool  # the record's last piece
    text: str
    voice: str  # "" for the build's voice (Arrow columns keep one type)
    speed: float
    language: str  # "" for the voice's language
    pause_after: float  # seconds of silence between this piece and the next


def read_records(path: Path, voice: str | None = None, speed: float = 1.0,
                 language: str | None = None) -> list[Record]:
    """The records of a table, or the chapters of a book; ``voice``, ``speed`` and
    ``language`` stand for a table's missing fields and are a book's."""
    suffix = path.suffix.lower()
    if suffix in BOOK_SUFFIXES:
        text = path.read_text(encoding="utf-8")
        markdown = suffix != ".txt"
        return [
            Record(i, chapter_id(i, title), body, voice, speed, language)
            for i, (title, body) in enumerate(chapters(text, markdown))
        ]
    if suffix not in TABLE_SUFFIXES:
        raise ValueError(
            f"{path.name}: a table ({', '.join(TABLE_SUFFIXES)}) or a book "
            f"({', '.join(BOOK_SUFFIXES)}) was expected"
        )
    records = [_record(i, row, voice, speed, language) for i, row in enumerate(_rows(path))]
    return _unique(records)


def _rows(path: Path) -> Iterator[Mapping[str, object] | str]:
    """The table's rows as the file names their fields; a row that is not one, as the
    reason."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
    elif suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            yield from csv.DictReader(f)
    else:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    yield f"line {number} is not JSON: {error.msg}"
                    continue
                yield row if isinstance(row, dict) else f"line {number} is not a JSON object"


def _record(index: int, row: Mapping[str, object] | str, voice: str | None, speed: float,
            language: str | None) -> Record:
    if isinstance(row, str):
        return Record(index, str(index), "", problem=row)
    given = row.get("id")
    record_id = str(index) if given is None or str(given) == "" else str(given)
    text = row.get("text")
    problem = None
    if not isinstance(text, str) or not text.strip():
        problem, text = "no text: the record's text is missing or empty", ""
    try:
        value = row.get("speed")
        # csv gives "" for an empty cell, Parquet None: both mean the default
        row_speed = speed if value is None or value == "" else float(value)  # type: ignore[arg-type]
        if not math.isfinite(row_speed):
            raise ValueError
    except (TypeError, ValueError):
        problem, row_speed = problem or f"speed {row.get('speed')!r} is not a number", speed
    return Record(
        index, record_id, text,
        _optional(row.get("voice")) or voice, row_speed,
        _optional(row.get("language")) or language, problem,
    )  # fmt: skip


def _optional(value: object) -> str | None:
    return None if value is None or str(value).strip() == "" else str(value).strip()


def _unique(records: list[Record]) -> list[Record]:
    """A record whose output name an earlier record has is a failed one: it would
    overwrite the other's file."""
    seen: dict[str, str] = {}
    out = []
    for record in records:
        stem = record.stem.lower()  # case-insensitive file systems
        if stem in seen and record.problem is None:
            record = replace(record, problem=f"id {record.id!r} names the same file as id {seen[stem]!r}")
        seen.setdefault(stem, record.id)
        out.append(record)
    return out


# -- books ------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
# plain-text chapter headings: "CHAPTER I.", "Chapter 12: The Storm", "BOOK TWO", "PROLOGUE"
_PLAIN_HEADING = re.compile(
    r"^\s*(chapter|book|part|volume|prologue|epilogue|preface|introduction|afterword)\b"
    r"[^\n]{0,80}$|^\s*[IVXLC]+\.?\s*$",
    re.IGNORECASE,
)
#: Markdown headings of these levels start a chapter (deeper ones stay in its text).
CHAPTER_LEVELS = 2


def chapters(text: str, markdown: bool) -> list[tuple[str, str]]:
    """(title, text) of each chapter, in order; the heading is the first line of its
    text, so it is read aloud.  Markdown: a heading of level 1 or 2 (``#``, ``##`` or an
    underlined one) starts a chapter; plain text: a line of its own, after a blank line,
    that starts with Chapter, Book, Part, Volume, Prologue, Epilogue, Preface,
    Introduction or Afterword, or is a Roman numeral.  Text before the first heading is
    a chapter of its own ("front matter") if it says anything; a heading with nothing
    under it before the next (a book's title) joins the next chapter.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    sections: list[tuple[str, list[str]]] = [("front matter", [])]
    previous_blank = True
    for i, line in enumerate(lines):
        title = None
        if markdown:
            atx = _ATX.match(line)
            if atx and len(atx[1]) <= CHAPTER_LEVELS:
                title = atx[2]
            elif (i + 1 < len(lines) and line.strip() and _SETEXT.match(lines[i + 1])
                  and not _SETEXT.match(line)):
                title = line.strip()
        elif previous_blank and _PLAIN_HEADING.match(line):
            following = lines[i + 1] if i + 1 < len(lines) else ""
            title = line.strip() if not following.strip() else None
        if title is not None:
            sections.append((_clean(title, markdown), []))
            continue
        if markdown and _SETEXT.match(line) and sections[-1][1] == [] and i > 0 \
                and lines[i - 1].strip():
            continue  # the underline of a setext heading just taken
        sections[-1][1].append(line)
        previous_blank = not line.strip()
    out: list[tuple[str, str]] = []
    pending = ""  # headings with nothing under them yet
    for index, (title, body_lines) in enumerate(sections):
        body = "\n".join(body_lines)
        body = _clean_markdown(body) if markdown else body
        heading = "" if index == 0 else title
        if not body.strip():
            pending += heading + "\n\n" if heading else ""
            continue
        out.append((title if index else "front matter", pending + (heading + "\n\n" if heading else "") + body.strip()))
        pending = ""
    if pending.strip():
        out.append((pending.strip().splitlines()[0], pending.strip()))
    return out


def chapter_id(index: int, title: str) -> str:
    """``003-the-storm``: the chapter's position, then its title's first words."""
    slug = "-".join(re.findall(r"[a-z0-9]+", title.lower()))[:40].strip("-")
    return f"{index:03d}-{slug}" if slug else f"{index:03d}"


_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][^>]*>", re.DOTALL)
_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$\n?", re.MULTILINE | re.DOTALL)


def _clean(title: str, markdown: bool) -> str:
    return _clean_markdown(title).strip() if markdown else title.strip()


def _clean_markdown(text: str) -> str:
    """What must go before a chapter is cut into pieces: fenced code blocks (a cut
    inside one would have its second half read as text) and HTML (tags, comments).  The
    rest of Markdown (emphasis, links, lists, quotes) the Synthesizer's front end reads
    as a person would (kokoro_ext.text.markdown)."""
    return _TAG.sub("", _FENCE.sub("\n", text))


# -- pieces -----------------------------------------------------------------------------

#: What goes between two sentences joined again into a piece: a blank line keeps a
#: paragraph's end, a line break a sentence's (split_sentences ends one at a line break).
_JOINERS = {"paragraph": "\n\n", "sentence": "\n"}


def pieces(record: Record, piece_chars: int = PIECE_CHARS) -> list[Piece]:
    """``record``'s text cut at sentence ends into pieces of at most ``piece_chars``
    characters (a longer sentence is a piece of its own).  SSML is never cut: its
    elements may span sentences."""
    voice, language = record.voice or "", record.language or ""
    if is_ssml(record.text):
        return [Piece(record.index, 0, True, record.text, voice, record.speed, language, 0.0)]
    texts: list[tuple[str, float]] = []  # (piece text, pause after it)
    current, last_end = "", None
    for sentence in split_sentences(record.text):
        if current and last_end in _JOINERS and len(current) + len(sentence.text) > piece_chars:
            texts.append((current.strip(), pause_after(last_end)))
            current = ""
        current += sentence.text + _JOINERS.get(sentence.end, " ")
        last_end = sentence.end
    if current.strip():
        texts.append((current.strip(), 0.0))
    if not texts:  # nothing split_sentences keeps: the Synthesizer says why
        texts = [(record.text, 0.0)]
    return [
        Piece(record.index, i, i == len(texts) - 1, text, voice, record.speed, language,
              pause if i < len(texts) - 1 else 0.0)
        for i, (text, pause) in enumerate(texts)
    ]
