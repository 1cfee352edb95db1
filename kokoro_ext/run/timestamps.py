"""Word timestamps from the predicted durations, and captions (SRT, WebVTT) made of them.

The text half, which tokens each word covers and the text it reports, comes with each
chunk from the text pipeline's timing pass (kokoro_ext.text.timing); ``times`` puts
seconds on it once the chunk's durations are known.

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

import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kokoro_ext.text.timing import OriginalWords, Timing, token_words

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


def times(
    timing: Timing,
    durations: np.ndarray,
    offset: float,
    seconds_per_frame: float,
    lead_frames: int = LEAD_FRAMES,
) -> tuple[TimedWord, ...]:
    """The timed words of one chunk: its ``timing`` (kokoro_ext.text.timing: the tokens
    each word covers), its ``durations`` (one per token, boundaries included) and
    ``offset``, the seconds of joined audio before the chunk."""
    if timing.tokens != len(durations):
        raise ValueError(f"{timing.tokens} tokens in the words, {len(durations)} durations")
    # frame edges of the tokens, shifted by the lead (within the leading boundary token)
    edges = np.concatenate([[0], np.cumsum(durations)]) - min(lead_frames, int(durations[0]))
    # rounded to the microsecond: the frames' times without float noise
    return tuple(
        TimedWord(w.text, round(offset + int(edges[w.first]) * seconds_per_frame, 6),
                  round(offset + int(edges[w.last + 1]) * seconds_per_frame, 6))
        for w in timing.words
    )  # fmt: skip


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
    """``times`` of the chunk of ``words`` (kokoro_ext.text.chunking.Word): the two halves
    in one call, for a chunk cut outside the pipeline."""
    timing = token_words(words, vocab, silent, originals)
    return times(timing, durations, offset, seconds_per_frame, lead_frames)


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
