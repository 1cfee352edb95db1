"""The text half of word timestamps: which tokens of a chunk each reported word covers,
and the original text it reports.  The pipeline's last pass computes it as it cuts a
chunk; kokoro_ext.run.timestamps turns it into seconds once the chunk's durations are
known (they come from the text stage).

A chunk's phonemes are its Words' phonemes joined and stripped, one token per symbol the
vocab knows, between kokoro's two boundary tokens.  A word covers its first to its last
sounding token: the spaces and punctuation around it (pause and intonation symbols) are
left out.  Which text a word reports is the stretch of the original text its characters
span (kokoro_ext.text.spans): kokoro_ext.run.timestamps' docstring says what that gives.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from kokoro_ext.text.markup import is_ssml
from kokoro_ext.text.spans import Spanned, join, original


@dataclass(frozen=True)
class TokenWord:
    """A word a chunk reports: its text and its first and last sounding token (token 0 is
    kokoro's leading boundary)."""

    text: str
    first: int
    last: int


@dataclass(frozen=True)
class Timing:
    """A chunk's reported words and its token count, boundaries included (one duration
    each)."""

    words: tuple[TokenWord, ...]
    tokens: int


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

    def state(self) -> tuple:
        """What reporting a chunk changes: ``restore`` it to report the chunk again (halved)."""
        return self.last, tuple(self.glued)

    def restore(self, state: tuple) -> None:
        self.last, self.glued = state[0], list(state[1])


def _touch(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    # overlapping, or written without a character between them
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def token_words(
    words: Sequence,
    vocab: Mapping[str, int],
    silent: Collection[str],
    originals: OriginalWords | None = None,
) -> Timing:
    """The reported words of one chunk of ``words`` (kokoro_ext.text.chunking.Word, whose
    phonemes joined and stripped are the chunk's); without ``originals``, each word
    reports its own text."""
    joined = "".join(w.phonemes for w in words)
    lead, stop = len(joined) - len(joined.lstrip()), len(joined.rstrip())
    position, token = 0, 1  # token 0 is kokoro's leading boundary
    entries: list[list] = []  # [text, first token, last token, texts said, span]
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
        if not text:
            if entries:
                entries[-1][2] = last
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
            previous[2] = last
            previous[3].append(text)
            previous[4] = (min(previous[4][0], span[0]), max(previous[4][1], span[1]))
            continue
        entries.append([text, first, last, [text], span])
    out = []
    for text, first, last, said, span in entries:
        if span is not None and not _overlap(span, originals.last):  # else the chunk before's
            text = (original(join(said), originals.original) or text).strip()
            if originals.ssml:  # what an entity stands for ("&lt;" is "<")
                text = html.unescape(text)
            originals.last = span
        out.append(TokenWord(str(text), first, last))
    return Timing(tuple(out), token + 1)
