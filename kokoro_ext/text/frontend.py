"""The language-specific steps of the text side and ``G2P``, which holds a language's G2P.

The passes are listed, in order, in kokoro_ext.text.pipeline (``TextPipeline``, the text
side's one front door); this module has those that need the language's G2P or its
sentence structure:

* ``say_as``: SSML ``<say-as>`` read as words (English dates spelled out);
* ``carrier`` and ``parts``: the segments as one text, markup as private-use placeholder
  characters that neither normalization nor sentence splitting can touch, cut into
  sentences (kokoro_ext.text.chunking.split_sentences), lazily; a ``<break>`` ends the
  sentence before it with its own pause;
* ``G2P.words``: the G2P of one sentence (the pipeline's G2P pass), as kokoro's ``KPipeline`` does it: misaki
  for English (offline, kokoro_ext.text.g2p), Japanese (misaki's cutlet reader on
  fugashi with unidic-lite) and Mandarin (misaki's ZHG2P), and espeak-ng through
  misaki's EspeakG2P for Spanish, French, Hindi, Italian and Brazilian Portuguese.  The
  Words keep the spans of the text they say (kokoro_ext.text.spans).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Callable

from kokoro_ext.text import normalize as norm
from kokoro_ext.text.chunking import Break, Word, split_sentences, words_of_phonemes
from kokoro_ext.text.clean import PLACEHOLDER_RANGE
from kokoro_ext.text.languages import Language, language, resolve_language  # noqa: F401
from kokoro_ext.text.markup import Inline, Pause, Phonemes, SayAs, Segment, Text
from kokoro_ext.text.spans import Spanned, join, standing_for, sub

_FIRST = PLACEHOLDER_RANGE[0]


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
        return sub(r"\s{2,}", " ", join(s.text for s in self.segments)).strip()


class G2P:
    """One sentence (a Part) in one Kokoro language -> its Words (``words``).

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

    def words(self, part: Part | str) -> list[Word]:
        """One sentence's Words with their phonemes (a str is one plain sentence).  A
        Word's text keeps the spans of the sentence's text it says, where it has them."""
        if isinstance(part, str):
            part = Part((Text(part),))
        with self._lock:
            if self.language.g2p == "misaki-en":
                said = _misaki_text(part.segments)
                # the G2P reads a plain str (slicing a Spanned keeps spans: slower)
                return _located(self._english_g2p().groups(str(said)), said)
            pieces = []
            for segment in part.segments:
                if isinstance(segment, Phonemes):
                    pieces.append(segment.phonemes)
                elif segment.text.strip():
                    pieces.append(self._other_g2p()(str(segment.text)))
            found = words_of_phonemes(" ".join(p.strip() for p in pieces if p.strip()))
            return _with_text(found, part.text)

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
    bounds = [m.span() for m in _SPELLED.finditer(text)]
    if len(bounds) == len(words):
        if isinstance(text, Spanned):
            spelled = text.stretches(bounds)
        else:
            spelled = [text[start:stop] for start, stop in bounds]
        return [Word(t, w.phonemes) for t, w in zip(spelled, words)]
    return [Word(text + " " if i == 0 else "", w.phonemes) for i, w in enumerate(words)]


_SPELLED = re.compile(r"\S+\s*")


def _located(groups: list[tuple[str, str]], said: str) -> list[Word]:
    """The G2P's words, (text, phonemes) pairs, as Words whose text is found in ``said``
    (the G2P's input), in order, with the spans of where it was found; a word the G2P
    spelled otherwise keeps its text as is."""
    if not isinstance(said, Spanned):
        return [Word(text, phonemes) for text, phonemes in groups]
    bounds = _as_said(groups, said)
    if bounds is not None:  # the words are the text as given: cut it at their ends
        pieces = said.stretches(bounds)
        return [Word(piece if text else text, phonemes)
                for piece, (text, phonemes) in zip(pieces, groups)]  # fmt: skip
    out = []
    cursor = 0
    find = said.find
    for whole, phonemes in groups:
        # as the input spells it, whitespace after it included (most words)
        at = find(whole, cursor, cursor + len(whole) + 200) if whole else -1
        if at >= 0:
            cursor = at + len(whole.rstrip())
            out.append(Word(said[at : at + len(whole)], phonemes))
            continue
        text = whole.strip()
        # the G2P may drop symbols: look a little ahead, never back
        at = find(text, cursor, cursor + len(text) + 200) if text else -1
        if at < 0:
            out.append(Word(whole, phonemes))
            continue
        cursor = at + len(text)
        lead = len(whole) - len(whole.lstrip())
        out.append(Word(whole[:lead] + said[at:cursor] + whole[lead + len(text) :], phonemes))
    return out


def _as_said(groups: list[tuple[str, str]], said: str) -> list[tuple[int, int]] | None:
    """Where each word is in ``said`` when the words' text joined is ``said`` (nearly
    every sentence) and finding them one by one, as ``_located`` does otherwise, finds
    each where it stands: no word starts with whitespace (only the whitespace after the
    word before it lies between where that search starts and the word) and none of
    that whitespace is longer than the search looks ahead.  None otherwise."""
    if "".join([text for text, _ in groups]) != said:
        return None
    bounds = []
    at = cursor = 0  # where the word starts; where the search for it would start
    for text, _ in groups:
        size = len(text)
        if size:
            if text[0].isspace() or at - cursor > 200:
                return None
            cursor = at + len(text.rstrip())
        bounds.append((at, at + size))
        at += size
    return bounds


def say_as(segment: SayAs, code: str) -> str:
    """A ``<say-as>`` as the words to say, spanning its content."""
    content = segment.text.strip()
    if segment.interpret_as in ("characters", "spell-out"):
        said = " " + " ".join(c.upper() for c in content if c.isalnum()) + " "
    elif segment.interpret_as == "digits":
        said = " " + " ".join(c for c in content if c.isdigit()) + " "
    else:
        said = " " + spoken_date(content, segment.format, code) + " "
    return standing_for(said, content)


def carrier(segments: Iterable[Segment], code: str) -> tuple[str, dict[str, Segment]]:
    """The text sentences are cut from: the segments' text, other markup as private-use
    placeholder characters (``table`` maps them back)."""
    out: list[str] = []
    table: dict[str, Segment] = {}
    for segment in segments:
        if isinstance(segment, Text):
            out.append(segment.text)
            continue
        mark = chr(_FIRST + len(table))
        if mark > chr(PLACEHOLDER_RANGE[1]):
            raise ValueError("too much markup in one text (over 65,000 elements)")
        table[mark] = segment
        # a pause ends its sentence: a line break after it makes the split there
        out.append(mark + "\n" if isinstance(segment, Pause) else mark)
    text = join(out)
    if code in "ab":  # say-as pads its reading with spaces: none before a period
        text = sub(r"(?<=\w) +(?=[.,;:!?])", "", text)
    return text, table


def parts(text: str, table: dict[str, Segment]) -> Iterator[Part]:
    """The carrier ``text`` cut into Parts (sentences), lazily."""
    pending: Part | None = None
    for sentence in split_sentences(text):
        pieces = _split(sentence.text, table)
        pauses = [p.seconds for p in pieces if isinstance(p, Pause)]
        spoken = tuple([p for p in pieces if not isinstance(p, Pause)] if pauses else pieces)
        if any(s.text and not s.text.isspace() or isinstance(s, Phonemes) for s in spoken):
            if pending is not None:
                yield pending
            pending = Part(spoken, sentence.end)
        if pauses and pending is not None:
            # the break replaces the pause the sentence before it would have had
            pending = replace(pending, end=sum(pauses))
    if pending is not None:
        yield pending


def _split(text: str, table: dict[str, Segment]) -> list[Segment]:
    if not table:  # no markup: no placeholder to look for
        return [Text(text)] if text else []
    out: list[Segment] = []
    start = 0
    for i, char in enumerate(text):
        if char in table:
            if i > start:
                out.append(Text(text[start:i]))
            out.append(table[char])
            start = i + 1
    if start < len(text):
        out.append(Text(text[start:]))
    return out


def _misaki_text(segments: tuple[Segment, ...]) -> str:
    # misaki reads [word](/phonemes/) itself, in context ("the" before a vowel)
    out: list[str] = []
    for segment in segments:
        if isinstance(segment, Phonemes):
            word = sub(r"[\[\]()]", "", segment.text).strip() or "word"
            if ")" in segment.phonemes:
                raise ValueError(f"phonemes {segment.phonemes!r} may not contain ')'")
            out += ["[", word, f"](/{segment.phonemes}/)"]
        elif isinstance(segment, Inline):
            out += ["[", segment.text, f"]({segment.feature})"]
        else:
            out.append(segment.text)
    # misaki aligns its links to spaCy's tokens, which a run of spaces would shift
    return sub(_SPACES, " ", join(out)).strip()


_SPACES = re.compile(r"[ \t]{2,}")


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
