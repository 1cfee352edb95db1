"""Text of one language -> sentences -> Words with Kokoro phonemes: the whole text side.

``FrontEnd(lang)`` ties the pieces together, in this order:

1. markup (kokoro_ext.text.markup): terminal escapes removed; SSML when the text
   starts with ``<speak``, else Markdown (kokoro_ext.text.markdown) unless
   ``markdown=False``; inline ``[word](/phonemes/)`` everywhere;
2. normalization of each text segment (kokoro_ext.text.normalize);
3. sentence splitting (kokoro_ext.text.chunking.split_sentences), lazily; a ``<break>``
   ends the sentence before it with its own pause;
4. G2P of one sentence at a time (``words``), as kokoro's ``KPipeline`` does it: misaki
   for English (offline, kokoro_ext.text.g2p), Japanese (misaki's cutlet reader on
   fugashi with unidic-lite) and Mandarin (misaki's ZHG2P), and espeak-ng through
   misaki's EspeakG2P for Spanish, French, Hindi, Italian and Brazilian Portuguese.

Phoneme segments travel through steps 2 and 3 as private-use placeholder characters,
so that neither normalization nor sentence splitting can touch them.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Callable

from kokoro_ext.text import markup, normalize as norm
from kokoro_ext.text.chunking import (
    Break,
    Word,
    drop_other_scripts,
    split_sentences,
    words_of_phonemes,
)
from kokoro_ext.text.languages import Language, language, language_of_voice
from kokoro_ext.text.markup import Inline, Pause, Phonemes, SayAs, Segment, Text

_FIRST = norm.PLACEHOLDER_RANGE[0]
# Languages written in Latin letters: letters of other scripts are dropped (with a
# warning) rather than spelled out by the G2P in a language they are not.
_LATIN = set("abefip")
# CJK sentence ends: split_sentences knows only Latin punctuation followed by a space.
_CJK_SENTENCE_END = re.compile(r"([。！？!?])(?!\n)")


@dataclass(frozen=True)
class Part:
    """A sentence to phonemize on its own: its segments and how it ends.

    ``end`` is a Break, or the seconds of an explicit pause (SSML ``<break>``).
    """

    segments: tuple[Text | Phonemes | Inline, ...]
    end: Break | float = "sentence"

    @property
    def text(self) -> str:
        """What the sentence says, markup resolved (for display)."""
        return re.sub(r"\s{2,}", " ", "".join(s.text for s in self.segments)).strip()


def resolve_language(lang: str | None, voice: object = None) -> Language:
    """The language to speak: ``lang`` if given, else the voice's prefix, else American."""
    if lang is not None:
        return language(lang)
    return language_of_voice(voice) or language("a")


class FrontEnd:
    """Text in one Kokoro language -> sentences (``sentences``) -> Words (``words``).

    The G2P is built on the first ``words`` call (misaki English takes about a second).
    """

    def __init__(self, lang: str = "a"):
        self.language = language(lang)
        self._g2p: Callable[[str], str] | None = None
        self._english = None  # kokoro_ext.text.g2p.Phonemizer for a and b
        self._lock = threading.Lock()

    @property
    def code(self) -> str:
        return self.language.code

    def sentences(self, text: str, markdown: bool = True) -> Iterator[Part]:
        """``text`` as Parts, in order.  Markup is parsed and the text normalized now
        (a ValueError for malformed markup is raised here); sentences come lazily.
        ``markdown=False`` reads text that is not SSML as written, not as Markdown."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        segments = markup.parse(text, markdown)
        carrier, table = self._carrier(segments)
        return self._parts(carrier, table)

    def carrier(self, segments: list[Segment]) -> str:
        """The text ``sentences`` cuts into sentences, of ``segments`` (markup.parse's):
        their text normalized, other markup as private-use placeholder characters.  The
        Words' text is taken from it, so callers can map Words back to the segments."""
        return self._carrier(segments)[0]

    def _carrier(self, segments: list[Segment]) -> tuple[str, dict[str, Segment]]:
        out: list[str] = []
        table: dict[str, Segment] = {}
        for segment in segments:
            if isinstance(segment, SayAs):
                segment = Text(self._say_as(segment))
            if isinstance(segment, Text):
                out.append(self._normalize(segment.text))
                continue
            mark = chr(_FIRST + len(table))
            if mark > chr(norm.PLACEHOLDER_RANGE[1]):
                raise ValueError("too much markup in one text (over 65,000 elements)")
            table[mark] = segment
            # a pause ends its sentence: a line break after it makes the split there
            out.append(mark + "\n" if isinstance(segment, Pause) else mark)
        carrier = "".join(out)
        if self.code in "ab":  # say-as pads its reading with spaces: none before a period
            carrier = re.sub(r"(?<=\w) +(?=[.,;:!?])", "", carrier)
        return carrier, table

    def _normalize(self, text: str) -> str:
        code = self.code
        if code in "jz":
            # misaki's ja and zh readers map full-width punctuation themselves: no NFKC
            text = norm.drop_symbols(norm.unconfuse(_strip_invisible(text)), code)
            return _CJK_SENTENCE_END.sub("\\1\n", text)
        text = norm.normalize(text, code)
        if code == "h":  # the danda ends a Hindi sentence
            text = re.sub(r"([।॥])(?!\n)", "\\1\n", text)
        return drop_other_scripts(text) if code in _LATIN else text

    def _say_as(self, segment: SayAs) -> str:
        content = segment.text.strip()
        if segment.interpret_as in ("characters", "spell-out"):
            return " " + " ".join(c.upper() for c in content if c.isalnum()) + " "
        if segment.interpret_as == "digits":
            return " " + " ".join(c for c in content if c.isdigit()) + " "
        return " " + spoken_date(content, segment.format, self.code) + " "

    def _parts(self, carrier: str, table: dict[str, Segment]) -> Iterator[Part]:
        pending: Part | None = None
        for sentence in split_sentences(carrier):
            pieces = _split(sentence.text, table)
            pauses = [p.seconds for p in pieces if isinstance(p, Pause)]
            spoken = tuple(p for p in pieces if not isinstance(p, Pause))
            if any(s.text.strip() or isinstance(s, Phonemes) for s in spoken):
                if pending is not None:
                    yield pending
                pending = Part(spoken, sentence.end)
            if pauses and pending is not None:
                # the break replaces the pause the sentence before it would have had
                pending = replace(pending, end=sum(pauses))
        if pending is not None:
            yield pending

    def words(self, part: Part | str) -> list[Word]:
        """One sentence's Words with their phonemes (a str is one plain sentence)."""
        if isinstance(part, str):
            part = Part((Text(part),))
        with self._lock:
            if self.language.g2p == "misaki-en":
                return self._english_g2p().words(_misaki_text(part.segments))
            pieces = []
            for segment in part.segments:
                if isinstance(segment, Phonemes):
                    pieces.append(segment.phonemes)
                elif segment.text.strip():
                    pieces.append(self._other_g2p()(segment.text))
            found = words_of_phonemes(" ".join(p.strip() for p in pieces if p.strip()))
            return _with_text(found, part.text)

    def phonemize(self, text: str, markdown: bool = True) -> str:
        """The phonemes of all of ``text`` (sentences joined by a space)."""
        return " ".join(
            "".join(w.phonemes for w in self.words(part)).strip()
            for part in self.sentences(text, markdown)
        ).strip()

    def _english_g2p(self):
        if self._english is None:
            from kokoro_ext.text.g2p import Phonemizer

            self._english = Phonemizer(british=self.code == "b")
        return self._english

    def _other_g2p(self) -> Callable[[str], str]:
        if self._g2p is None:
            self._g2p = _load_g2p(self.language)
        return self._g2p


def _with_text(words: list[Word], text: str) -> list[Word]:
    """Phoneme Words given the text they say: word by word where the counts agree (the
    G2P kept the word boundaries), else the whole text on the first Word."""
    spelled = re.findall(r"\S+\s*", text)
    if len(spelled) == len(words):
        return [Word(t, w.phonemes) for t, w in zip(spelled, words)]
    return [Word(text + " " if i == 0 else "", w.phonemes) for i, w in enumerate(words)]


def _strip_invisible(text: str) -> str:
    # format (zero-width, bidi) and control characters, but not line breaks and tabs
    return "".join(
        c for c in text if unicodedata.category(c)[0] != "C" or c in "\n\t" or
        unicodedata.category(c) == "Co"
    )


def _split(text: str, table: dict[str, Segment]) -> list[Segment]:
    out: list[Segment] = []
    plain = ""
    for char in text:
        if char in table:
            if plain:
                out.append(Text(plain))
            out.append(table[char])
            plain = ""
        else:
            plain += char
    if plain:
        out.append(Text(plain))
    return out


def _misaki_text(segments: tuple[Segment, ...]) -> str:
    # misaki reads [word](/phonemes/) itself, in context ("the" before a vowel)
    out = ""
    for segment in segments:
        if isinstance(segment, Phonemes):
            word = re.sub(r"[\[\]()]", "", segment.text).strip() or "word"
            if ")" in segment.phonemes:
                raise ValueError(f"phonemes {segment.phonemes!r} may not contain ')'")
            out += f"[{word}](/{segment.phonemes}/)"
        elif isinstance(segment, Inline):
            out += f"[{segment.text}]({segment.feature})"
        else:
            out += segment.text
    # misaki aligns its links to spaCy's tokens, which a run of spaces would shift
    return re.sub(r"[ \t]{2,}", " ", out).strip()


#: The package extra (setup.py) that brings each G2P; English's comes with the run side.
EXTRAS: dict[str, str] = {"espeak": "espeak", "misaki-ja": "ja", "misaki-zh": "zh"}


def _load_g2p(lang: Language) -> Callable[[str], str]:
    """The phonemizer kokoro's KPipeline uses for ``lang`` (not English), offline."""
    try:
        if lang.g2p == "espeak":
            from misaki.espeak import EspeakG2P

            g2p = EspeakG2P(language=lang.espeak)
        elif lang.g2p == "misaki-ja":
            # misaki.ja.JAG2P() reads with this class; importing misaki.ja also needs
            # pyopenjtalk, which has no wheel on PyPI and downloads its dictionary
            from misaki.cutlet import Cutlet

            g2p = Cutlet()
        elif lang.g2p == "misaki-zh":
            import logging

            import jieba
            from misaki.zh import ZHG2P

            jieba.setLogLevel(logging.WARNING)  # not "Building prefix dict..." on stderr

            g2p = ZHG2P(version=None)  # Kokoro v1.0 ("1.1" is Kokoro-82M-v1.1-zh)
        else:
            raise ValueError(f"no G2P for {lang.name}")
    except ImportError as err:
        raise ValueError(
            f"{lang.name} needs {err.name!r}, which is not installed: pip install "
            f"'kokoro-tvm-ext[{EXTRAS[lang.g2p]}]' (./bootstrap.sh installs every language's)"
        ) from None
    except RuntimeError as err:  # phonemizer: espeak-ng library or voice missing
        raise ValueError(f"cannot start espeak-ng for {lang.name}: {err}") from None

    def phonemize(text: str) -> str:
        phonemes, _ = g2p(text)
        return phonemes or ""

    return phonemize


def spoken_date(text: str, fmt: str | None, lang: str) -> str:
    """A date in digits ("2024-03-01", "3/1/2024") read as words (English).

    ``fmt``: ymd, mdy, dmy, md or dm (default ymd for four leading digits, else mdy).
    Other languages get the date as day, month and year numbers for their G2P.
    """
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    if fmt is None:
        fmt = "ymd" if re.match(r"\s*\d{4}", text) else "mdy"
    if len(numbers) != len(fmt):
        raise ValueError(f"<say-as interpret-as=\"date\"> {text!r} is not a {fmt} date")
    parts = dict(zip(fmt, numbers))
    month, day, year = parts.get("m"), parts.get("d"), parts.get("y")
    if not 1 <= month <= 12 or not 1 <= day <= 31:
        raise ValueError(f"<say-as interpret-as=\"date\"> {text!r}: no month {month} day {day}")
    if lang not in ("a", "b"):
        return " ".join(str(n) for n in (day, month, year) if n is not None)
    month_name = norm.MONTHS[month - 1]
    if lang == "b":
        words = f"the {norm.ordinal(day, lang)} of {month_name}"
    else:
        words = f"{month_name} {norm.ordinal(day, lang)}"
    return words + (f", {norm.year(year, lang)}" if year is not None else "")
