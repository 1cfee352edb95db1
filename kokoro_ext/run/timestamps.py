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

Which text a word reports (``OriginalWords``): the front end normalizes before the G2P
("3" is read "three", "$3.50" "three dollars and fifty cents"), and the Words carry the
normalized text.  For text without SSML or inline markup (``[word](/phonemes/)``, and
links when Markdown is not read) the normalized words are aligned to the
whitespace-separated words of the text as read (case and punctuation ignored):
terminal escape sequences removed and, unless ``markdown=False``, Markdown resolved
(``**Bold**`` reports "Bold", ``[the docs](url)`` "the" and "docs", a heading or list
item with the period that ends its sentence).  A word that normalization kept reports
its original spelling; the words that one rewritten stretch became are one entry that
reports the original stretch ("$3.50", from the start of "three" to the end of
"cents"); a word normalization added, and every word of marked-up text, reports its
normalized form.  Punctuation glued to a word stays with it ("Hello,").  A word with no
text of its own (the rest of a word cut between two chunks, or a G2P that merged words)
extends the word before it in its chunk.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

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


def _key(word: str) -> str:
    # case and punctuation do not tell words apart ("Hello," is "hello")
    key = "".join(c for c in word.casefold() if c.isalnum())
    return key or word


class OriginalWords:
    """Maps the normalized text the Words carry back to the original text's words.

    ``carrier`` is the whole text as normalized (FrontEnd's carrier), or None when there
    is nothing to map back to (markup): then every word reports its normalized text.
    Chunks must be given in order (``names``).
    """

    def __init__(self, original: str, carrier: str | None):
        self.original, self.carrier = original, carrier
        self.cursor = 0  # where the next Word's text is looked for in the carrier
        self.last_group: int | None = None  # the original stretch the last entry reported
        if carrier is None:
            return
        spans = [m.span() for m in re.finditer(r"\S+", original)]
        self.tokens = [m.span() for m in re.finditer(r"\S+", carrier)]
        self.starts = [s for s, _ in self.tokens]
        matcher = difflib.SequenceMatcher(
            None, [_key(original[s:e]) for s, e in spans],
            [_key(carrier[s:e]) for s, e in self.tokens], autojunk=False,
        )
        # group of each carrier token: the original span it reports, by index
        self.group: list[int | None] = [None] * len(self.tokens)
        self.spans: list[tuple[int, int]] = []
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                for i, j in zip(range(i1, i2), range(j1, j2)):
                    self.group[j] = len(self.spans)
                    self.spans.append(spans[i])
            elif op == "replace":
                for j in range(j1, j2):
                    self.group[j] = len(self.spans)
                self.spans.append((spans[i1][0], spans[i2 - 1][1]))

    def groups(self, text: str) -> tuple[int, ...] | None:
        """The original stretches a Word's normalized ``text`` covers (None: unknown)."""
        if self.carrier is None or not text.strip():
            return None
        text = text.strip()
        # the Word's text is the carrier's, but the G2P may drop symbols: look a little ahead
        at = self.carrier.find(text, self.cursor, self.cursor + len(text) + 200)
        if at < 0:
            return None
        self.cursor = at + len(text)
        first = bisect.bisect_right(self.starts, at) - 1
        last = bisect.bisect_left(self.starts, at + len(text)) - 1
        found = [self.group[j] for j in range(max(first, 0), last + 1)]
        if None in found or not found:
            return None
        return tuple(dict.fromkeys(found))

    def text_of(self, groups: tuple[int, ...]) -> str:
        return self.original[self.spans[groups[0]][0] : self.spans[groups[-1]][1]]


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
    entries: list[list] = []  # [text, start frame, end frame, groups]
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
        if first is None:
            continue  # only punctuation: no sound of its own
        start, end = int(edges[first]), int(edges[last + 1])
        text = word.text.strip()
        if not text:
            if entries:
                entries[-1][2] = end
            continue
        groups = originals.groups(word.text) if originals is not None else None
        if groups is not None and entries and entries[-1][3] and set(groups) & set(entries[-1][3]):
            # the words one rewritten stretch became ("three dollars ..."): one entry
            entries[-1][2] = end
            entries[-1][3] = tuple(dict.fromkeys(entries[-1][3] + groups))
            continue
        entries.append([text, start, end, groups])
    if token + 1 != len(durations):
        raise ValueError(f"{token + 1} tokens in the words, {len(durations)} durations")
    out = []
    for text, start, end, groups in entries:
        if groups is not None and originals is not None:
            if groups[0] == originals.last_group:  # reported by the chunk before
                groups = None
            else:
                text = originals.text_of(groups)
                originals.last_group = groups[-1]
        # rounded to the microsecond: the frames' times without float noise
        out.append(TimedWord(text, round(offset + start * seconds_per_frame, 6),
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


def originals_of(text: str, front, markdown: bool = True) -> OriginalWords:
    """``OriginalWords`` for ``text`` as ``front`` (a FrontEnd) reads it (``markdown`` as
    ``FrontEnd.sentences`` takes it): mapped back to the words of the text as read, for
    text whose markup is only Markdown and terminal escapes; the normalized words for
    other markup."""
    from kokoro_ext.text import markup

    try:
        segments = markup.parse(text, markdown)
    except ValueError:
        segments = None
    if not segments or not all(isinstance(s, markup.Text) for s in segments):
        return OriginalWords(text, None)
    # the words are those of the parsed text, not the raw input: Markdown markers, link
    # targets and escape sequences are unsaid, so a caption must not show them.  The
    # carrier is normalized again: cheap next to the G2P, and the front end stays
    # unaware of timestamps
    return OriginalWords("".join(s.text for s in segments), front.carrier(segments))
