"""Markup in the text: an SSML subset and misaki's inline ``[word](/phonemes/)``.

Which text is SSML: text whose first non-blank characters are ``<speak`` is parsed as
SSML (XML: ``&lt;`` for "<", ``&amp;`` for "&"); any other text is plain, and a "<" or
"&" in it is read as a symbol ("a < b": "a less than b").  Markup is never read aloud.

The SSML subset (anything else is a ValueError naming its line and column):

``<speak>``
    the root; once, around everything.
``<break time="500ms"/>``, ``<break time="1.5s"/>``, ``<break strength="strong"/>``
    silence of that length (at most 10 s) where the break is: the sentence before it
    ends there and the break replaces the pause that would follow it.  Strengths: none
    0, x-weak 0.05 s, weak 0.15 s, medium 0.3 s (the default), strong 0.6 s, x-strong
    1 s.  A break before the first word or after the last adds nothing.
``<p>``, ``<s>``
    a paragraph, a sentence: as a blank line, a line break.
``<say-as interpret-as="characters">`` (or ``spell-out``), ``"digits"``, ``"date"``
    the content letter by letter, digit by digit, or as a date (``format`` = ymd, mdy,
    dmy, md, dm; default ymd when it starts with four digits, else mdy).
``<sub alias="...">``
    says the alias instead of the content.
``<phoneme ph="...">``
    says the Kokoro phonemes in ``ph`` (the model's own symbols, as ``phonemize``
    prints them) instead of the content; ``alphabet``, if given, must be ``kokoro`` or
    ``ipa`` (Kokoro's symbols are IPA with a few letters of its own).

Text that is not SSML is read as Markdown (kokoro_ext.text.markdown: emphasis markers
unsaid, headings and list items as sentences, links as their text, code blocks skipped)
unless ``markdown=False``, which reads it as written.

In any text, ``[word](/phonemes/)`` says ``word`` with those Kokoro phonemes (misaki's
syntax; kokoro supports it).  For English, misaki's other inline forms (``[word](-1)``
stress, ``[word](#flags#)``) go to misaki as they are; elsewhere they say the word.
Other links (``[text](url)``) say their text.

Terminal escape sequences are removed from any text first
(kokoro_ext.text.normalize.strip_terminal).
"""

from __future__ import annotations

import re
import xml.parsers.expat
from dataclasses import dataclass

from kokoro_ext.text import markdown as md
from kokoro_ext.text.chunking import PAUSES
from kokoro_ext.text.clean import strip_terminal
from kokoro_ext.text.spans import Spanned, group, join, standing_for, sub

#: Longest ``<break>``: SSML's own limit.
MAX_BREAK = 10.0
STRENGTHS = {
    "none": 0.0, "x-weak": PAUSES["word"], "weak": PAUSES["clause"],
    "medium": PAUSES["sentence"], "strong": PAUSES["paragraph"], "x-strong": 1.0,
}  # fmt: skip
SAY_AS = ("characters", "spell-out", "digits", "date")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]*)\)")


@dataclass(frozen=True)
class Text:
    """Text to normalize and phonemize."""

    text: str


@dataclass(frozen=True)
class Phonemes:
    """Kokoro phonemes said as they are, standing for ``text``."""

    phonemes: str
    text: str


@dataclass(frozen=True)
class Inline:
    """misaki's ``[text](feature)`` with a feature other than phonemes (English G2P)."""

    text: str
    feature: str


@dataclass(frozen=True)
class Pause:
    """Silence of ``seconds`` that ends the sentence before it."""

    seconds: float


@dataclass(frozen=True)
class SayAs:
    """Text read a given way: ``characters``, ``digits`` or ``date`` (with ``format``)."""

    text: str
    interpret_as: str
    format: str | None = None


Segment = Text | Phonemes | Inline | Pause | SayAs


def is_ssml(text: str) -> bool:
    """True if ``text`` is SSML: its first non-blank characters are ``<speak``."""
    return re.match(r"\s*<speak[\s>/]", text) is not None


def parse(text: str, markdown: bool = True) -> list[Segment]:
    """``text`` as segments: SSML if ``is_ssml(text)``, else Markdown (``markdown``) or
    text as written; all with links.  Terminal escape sequences are removed first.

    Raises ValueError naming the position (line and column, from 1) of malformed markup.
    """
    return segments(strip_terminal(text), markdown)


def segments(text: str, markdown: bool = True) -> list[Segment]:
    """``parse`` of text whose terminal escapes are already removed."""
    out: list[Segment] = []
    if is_ssml(text):
        for segment in _parse_ssml(text):
            out += _links(segment.text) if isinstance(segment, Text) else [segment]
    elif markdown:
        for piece, code in md.read(text):
            out += [Text(piece)] if code else _links(piece, text)  # inline code is never a link
    else:
        out = _links(text)
    return [s for s in out if not (isinstance(s, Text) and not s.text)]


def _links(text: str, whole: str | None = None) -> list[Segment]:
    """Links in ``text``, a piece of ``whole`` (for the position errors name)."""
    out: list[Segment] = []
    position = 0
    for match in _LINK.finditer(text):
        out.append(Text(text[position : match.start()]))
        word, feature = group(match, 1), match[2]
        if len(feature) > 1 and feature[0] == "/" and feature[-1] == "/":
            phonemes = feature[1:-1]
            if not phonemes.strip():
                at = match.start() if whole is None else max(whole.find(match[0]), 0)
                raise ValueError(
                    f"empty phonemes in {match[0]!r} at character {at + 1}: "
                    "write [word](/phonemes/)"
                )
            out.append(Phonemes(phonemes, word))
        else:
            out.append(Inline(word, feature))
        position = match.end()
    out.append(Text(text[position:]))
    return out


def parse_time(value: str) -> float:
    """``"500ms"`` or ``"1.5s"`` -> seconds; ValueError for anything else or > MAX_BREAK."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*", value)
    if match is None:
        raise ValueError(f'time="{value}" is not a duration such as "500ms" or "1.5s"')
    seconds = float(match[1]) / (1000 if match[2] == "ms" else 1)
    if seconds > MAX_BREAK:
        raise ValueError(f'time="{value}" is longer than {MAX_BREAK:g} s')
    return seconds


class _SSML:
    """Expat handlers collecting segments; errors carry the parser's position."""

    def __init__(self, parser: xml.parsers.expat.XMLParserType, source: str):
        self.parser = parser
        self.segments: list[Segment] = []
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.content = ""  # text inside say-as, sub or phoneme
        self.source = source
        # expat counts bytes of UTF-8: the character each byte belongs to
        self.chars: list[int] | None = None
        if isinstance(source, Spanned) and not source.isascii():
            self.chars = [
                i for i, c in enumerate(source) for _ in c.encode("utf-8", "surrogatepass")
            ]
            self.chars.append(len(source))

    def spanned(self, data: str) -> str:
        """Character data as it stands in the source (an entity: spanning the reference)."""
        source = self.source
        if not isinstance(source, Spanned):
            return data
        byte = self.parser.CurrentByteIndex
        at = byte if self.chars is None else self.chars[byte]
        if str.__eq__(source[at : at + len(data)], data):
            return source[at : at + len(data)]
        end = source.find(";", at) + 1 if source.startswith("&", at) else at + len(data)
        return standing_for(data, source[at : max(end, at + 1)])

    def error(self, message: str) -> ValueError:
        line, column = self.parser.CurrentLineNumber, self.parser.CurrentColumnNumber + 1
        return ValueError(f"SSML line {line}, column {column}: {message}")

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if not self.stack and name != "speak":
            raise self.error(f"the root element must be <speak>, not <{name}>")
        if self.stack and name == "speak":
            raise self.error("<speak> inside <speak>")
        if self.stack and self.stack[-1][0] in ("say-as", "sub", "phoneme", "break"):
            raise self.error(f"<{name}> inside <{self.stack[-1][0]}>: it may hold only text")
        allowed = {
            "speak": {"version", "xmlns", "xml:lang"}, "p": set(), "s": set(),
            "break": {"time", "strength"}, "say-as": {"interpret-as", "format", "detail"},
            "sub": {"alias"}, "phoneme": {"ph", "alphabet"},
        }  # fmt: skip
        if name not in allowed:
            raise self.error(
                f"<{name}> is not supported; the subset is <speak>, <p>, <s>, <break>, "
                "<say-as>, <sub> and <phoneme>"
            )
        extra = set(attrs) - allowed[name] - {a for a in attrs if a.startswith("xmlns:")}
        if extra:
            raise self.error(f"<{name}> has no attribute {sorted(extra)[0]!r}")
        self._check(name, attrs)
        self.stack.append((name, attrs))
        self.content = ""
        if name in ("p", "s"):
            self.segments.append(Text("\n\n" if name == "p" else "\n"))
        elif name == "break":
            self.segments.append(Pause(self._break(attrs)))

    def _check(self, name: str, attrs: dict[str, str]) -> None:
        if name == "say-as":
            kind = attrs.get("interpret-as")
            if kind not in SAY_AS:
                raise self.error(
                    f"<say-as interpret-as={kind!r}>: use one of {', '.join(SAY_AS)}"
                )
            fmt = attrs.get("format")
            if fmt is not None and (kind != "date" or fmt not in ("ymd", "mdy", "dmy", "md", "dm")):
                raise self.error(f"<say-as format={fmt!r}>: dates take ymd, mdy, dmy, md or dm")
        elif name == "sub" and "alias" not in attrs:
            raise self.error('<sub> needs alias="what to say"')
        elif name == "phoneme":
            if not attrs.get("ph", "").strip():
                raise self.error('<phoneme> needs ph="Kokoro phonemes"')
            if attrs.get("alphabet", "kokoro") not in ("kokoro", "ipa"):
                raise self.error(f"<phoneme alphabet={attrs['alphabet']!r}>: use kokoro or ipa")

    def _break(self, attrs: dict[str, str]) -> float:
        if "time" in attrs:
            try:
                return parse_time(attrs["time"])
            except ValueError as err:
                raise self.error(f"<break {err}") from None
        strength = attrs.get("strength", "medium")
        if strength not in STRENGTHS:
            raise self.error(f"<break strength={strength!r}>: use one of {', '.join(STRENGTHS)}")
        return STRENGTHS[strength]

    def end(self, name: str) -> None:
        _, attrs = self.stack.pop()
        if name == "say-as":
            self.segments.append(SayAs(self.content, attrs["interpret-as"], attrs.get("format")))
        elif name == "sub":  # the alias is said where the content is written
            self.segments.append(Text(standing_for(attrs["alias"], self.content)))
        elif name == "phoneme":
            self.segments.append(Phonemes(attrs["ph"].strip(), self.content.strip()))
        elif name in ("p", "s"):
            self.segments.append(Text("\n\n" if name == "p" else "\n"))
        self.content = ""

    def text(self, data: str) -> None:
        if not self.stack:
            return
        data = self.spanned(data)
        if self.stack[-1][0] in ("say-as", "sub", "phoneme"):
            self.content += sub(r"\s+", " ", data)
        else:
            # in SSML, line breaks are layout: <p> and <s> give the structure
            self.segments.append(Text(sub(r"\s+", " ", data)))


def _parse_ssml(text: str) -> list[Segment]:
    parser = xml.parsers.expat.ParserCreate()
    handlers = _SSML(parser, text)
    parser.StartElementHandler = handlers.start
    parser.EndElementHandler = handlers.end
    parser.CharacterDataHandler = handlers.text
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as err:
        reason = xml.parsers.expat.errors.messages[err.code]
        hint = (
            ' (in SSML write "<" as &lt; and "&" as &amp;)'
            if err.code
            in (
                xml.parsers.expat.errors.codes[xml.parsers.expat.errors.XML_ERROR_INVALID_TOKEN],
                xml.parsers.expat.errors.codes[
                    xml.parsers.expat.errors.XML_ERROR_UNDEFINED_ENTITY
                ],
            )
            else ""
        )
        raise ValueError(
            f"SSML line {err.lineno}, column {err.offset + 1}: {reason}{hint}"
        ) from None
    return _merge(handlers.segments)


def _merge(segments: list[Segment]) -> list[Segment]:
    # expat delivers text in several pieces: join neighbouring Text segments
    out: list[Segment] = []
    for segment in segments:
        if isinstance(segment, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(join((out[-1].text, segment.text)))
        else:
            out.append(segment)
    return out
