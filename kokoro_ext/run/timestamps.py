"""Word timestamps from the predicted durations, and captions (SRT, WebVTT) made of them.

The text stage predicts how many alignment frames each phoneme token lasts
(``Trace.durations``, already divided by the speed); a frame is ``samples_per_frame``
samples (600 at 24 kHz: 25 ms).  A chunk's phonemes are its Words' phonemes joined
(kokoro_ext.text.chunking), one token per symbol the vocab knows, between kokoro's two
boundary tokens.  A word lasts from the start of its first sounding token to the end of
its last: the spaces and punctuation around it (pause and intonation symbols) are left
out, so a word's end is where its last sound ends, not where the next word starts.
The audio leads the durations' sums by about three frames (kokoro's own timestamps
shift by as much; pocketsphinx's alignment of the real model's speech puts word starts a
median 85 ms before the unshifted sums, 15 ms off after the shift: bench/quality.py), so
every time is ``LEAD_FRAMES`` earlier, never before the chunk's start.
Times are seconds from the start of the stream's joined audio (``synthesizer.join``):
each chunk starts after the earlier chunks' audio and pauses and its own pause.

Which text a word reports: the stretch of the original text it came from.  Every
character the front end passes on knows its span in the original text
(kokoro_ext.text.spans), through markup, cleaning and normalization, so a word reports
the original text under its characters: "**Bold**" reports "Bold", a colour escape is
not part of any word, "3" read "three" reports "3", and the words one rewritten stretch
became ("three dollars and fifty cents" for "$3.50") are one entry that reports the
stretch, from the start of "three" to the end of "cents", as are the words of text
written without a space between them ("drwxr-xr-x", "8+7").  SSML reports what is
written: the content of ``<sub>`` and ``<say-as>``, an entity as its character.
Characters the front end added (the period that ends a Markdown heading as a sentence)
are reported as they are; a word with no span at all (text the G2P spelled otherwise)
reports its normalized text, as does the rest of a stretch the chunk before already
reported.  Punctuation glued to a word stays with it ("Hello,", '"Quoted"').  A word
with no text of its own (the rest of a word cut between two chunks, or a G2P that
merged words) extends the word before it in its chunk.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kokoro_ext.text.markup import is_ssml
from kokoro_ext.text.spans import Spanned, join, original

#: Caption cues: at most this many words, or this many seconds, and none across a sentence end.
CUE_WORDS = 7
CUE_SECONDS = 3.5
#: Frames by which the audio leads the sums of the predicted durations.
LEAD_FRAMES = 3
_SENTENCE_END = re.compile(r"[.!?…。！？]['\"”’)\]]*$")


@dataclass(frozen=True)
class TimedWord:
    """A word of the text and when it is spoken, in seconds of the joined audio."""

    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Cue:
    """A caption: a few words shown together from ``start`` to ``end`` (seconds)."""

    text: str
    start: float
    end: float


class OriginalWords:
    """The original text the Words' spans point into, for the chunks of one stream in
    order: a stretch split over two chunks is reported by the first."""

    def __init__(self, original: str):
        self.original = original
        self.ssml = is_ssml(original)
        self.last: tuple[int, int] | None = None  # the stretch the last entry reported
        self.glued: list[str] = []  # soundless text before the next word (an opening quote)

    def unsaid(self, words: Sequence) -> None:
        """The words of a chunk not synthesized (only punctuation): their text may be
        glued to the next word ("**" before "Bold")."""
        self.glued += [
            w.text.strip() for w in words if isinstance(w.text, Spanned) and w.text.strip()
        ]


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def _touch(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    # overlapping, or written without a character between them
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def chunk_words(
    words: Sequence,
    durations: np.ndarray,
    vocab: Mapping[str, int],
    silent: Collection[str],
    offset: float,
    seconds_per_frame: float,
    originals: OriginalWords | None = None,
    lead_frames: int = LEAD_FRAMES,
) -> tuple[TimedWord, ...]:
    """The timed words of one chunk: ``words`` (kokoro_ext.text.chunking.Word, whose
    phonemes joined and stripped are the chunk's), its ``durations`` (one per token,
    boundaries included) and ``offset``, the seconds of joined audio before the chunk."""
    joined = "".join(w.phonemes for w in words)
    lead, stop = len(joined) - len(joined.lstrip()), len(joined.rstrip())
    # frame edges of the tokens, shifted by the lead (within the leading boundary token)
    edges = np.concatenate([[0], np.cumsum(durations)]) - min(lead_frames, int(durations[0]))
    position, token = 0, 1  # token 0 is kokoro's leading boundary
    entries: list[list] = []  # [text, start frame, end frame, texts said, span]
    glued: list[str] = originals.glued if originals is not None else []
    for word in words:
        first = last = None
        for symbol in word.phonemes:
            # the tokens phonemes_to_ids makes of the stripped chunk, one per vocab symbol
            if lead <= position < stop and symbol in vocab:
                if symbol not in silent:
                    first = token if first is None else first
                    last = token
                token += 1
            position += 1
        text = word.text.strip()
        span = text.span() if isinstance(text, Spanned) and originals is not None else None
        if first is None:  # only punctuation: no sound of its own
            if span is not None and entries and _touch(entries[-1][4], span):
                entries[-1][3].append(text)  # glued to the word before it ("letter," '"')
                entries[-1][4] = (min(entries[-1][4][0], span[0]), max(entries[-1][4][1], span[1]))
            elif span is not None and text:
                glued.append(text)  # perhaps to the word after it ('"', "Hello")
            continue
        start, end = int(edges[first]), int(edges[last + 1])
        if not text:
            if entries:
                entries[-1][2] = end
            glued.clear()
            continue
        if span is not None and glued and _touch(glued[-1].span(), span):
            text = join([*glued, text])
            span = text.span()
        glued.clear()
        if span is not None and entries and _touch(entries[-1][4], span):
            # the words one written word or rewritten stretch became ("three dollars"
            # for "$3", "drwxr-" "xr-" "x"): one entry
            previous = entries[-1]
            previous[2] = end
            previous[3].append(text)
            previous[4] = (min(previous[4][0], span[0]), max(previous[4][1], span[1]))
            continue
        entries.append([text, start, end, [text], span])
    if token + 1 != len(durations):
        raise ValueError(f"{token + 1} tokens in the words, {len(durations)} durations")
    out = []
    for text, start, end, said, span in entries:
        if span is not None and not _overlap(span, originals.last):  # else the chunk before's
            text = (original(join(said), originals.original) or text).strip()
            if originals.ssml:  # what an entity stands for ("&lt;" is "<")
                text = html.unescape(text)
            originals.last = span
        # rounded to the microsecond: the frames' times without float noise
        out.append(TimedWord(str(text), round(offset + start * seconds_per_frame, 6),
                             round(offset + end * seconds_per_frame, 6)))
    return tuple(out)


def captions(
    words: Iterable[TimedWord], max_words: int = CUE_WORDS, max_seconds: float = CUE_SECONDS
) -> list[Cue]:
    """Words -> caption cues of at most ``max_words`` words and ``max_seconds`` seconds
    (a single longer word is a cue of its own), each ending at a sentence end.

    ``words``: TimedWords, or Chunks (their ``words``) as ``Synthesizer.stream`` yields them.
    """
    cues: list[Cue] = []
    current: list[TimedWord] = []

    def close():
        if current:
            cues.append(Cue(" ".join(w.text for w in current), current[0].start, current[-1].end))
            current.clear()

    for word in _flatten(words):
        if current and (len(current) >= max_words or word.end - current[0].start > max_seconds):
            close()
        current.append(word)
        if _SENTENCE_END.search(word.text) and not _abbreviation(word.text):
            close()
    close()
    return cues


def _abbreviation(text: str) -> bool:
    # "Dr." and "e.g." do not end a sentence (kokoro_ext.text.chunking's rule)
    from kokoro_ext.text.chunking import ABBREVIATIONS

    word = text.lower().rstrip(".")
    return text.endswith(".") and (word in ABBREVIATIONS or len(word) == 1 and word.isalpha())


def _flatten(items: Iterable) -> Iterator[TimedWord]:
    for item in items:
        if isinstance(item, TimedWord):
            yield item
        else:
            yield from item.words


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(cues: Iterable[Cue]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    return "".join(
        f"{i}\n{_clock(c.start, ',')} --> {_clock(c.end, ',')}\n{c.text.replace('-->', '->')}\n\n"
        for i, c in enumerate(cues, 1)
    )


def vtt(cues: Iterable[Cue]) -> str:
    """WebVTT: the ``WEBVTT`` header, then cues timed ``HH:MM:SS.mmm --> HH:MM:SS.mmm``."""
    # "-->" may not appear in a cue's text; "&" and "<" are markup in WebVTT
    body = "".join(
        f"{_clock(c.start, '.')} --> {_clock(c.end, '.')}\n"
        f"{c.text.replace('&', '&amp;').replace('<', '&lt;').replace('-->', '-&gt;')}\n\n"
        for c in cues
    )
    return "WEBVTT\n\n" + body


def as_json(words: Iterable[TimedWord], duration: float | None = None) -> dict:
    """Words as ``{"words": [{"word", "start", "end"}, ...], "duration"}`` (seconds)."""
    out: dict = {"words": [{"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3)}
                           for w in _flatten(words)]}
    if duration is not None:
        out["duration"] = round(duration, 3)
    return out
