"""Kokoro-FastAPI's inline tags in a speech input, as it reads them.

``[pause:Xs]`` (seconds, digits with an optional fraction) is a silence wherever it is
written: Kokoro-FastAPI reads it in every input, at most ``max_pause`` seconds
(its ``max_pause_duration_s``, 60).  With a request's ``allow_voice_tags``,
``[voice:NAME]`` switches the speaker until the next one (a name, an OpenAI name, a blend
or a request's ``voice_aliases`` name, as ``voice`` takes them) and ``[rate:X]`` the pace
(a factor on ``speed``; a voice tag sets it back to 1, or to the pace of the alias it
names); text before the first voice tag is the request ``voice``'s.  The input is split
at the tags into Speak and Pause parts, in order; neighbouring Speak parts of the same
voice and pace are one.  ``ssml_to_tags`` is Kokoro-FastAPI's SSML translation onto the
tags (its ``ssml: true``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from kokoro_ext.run.errors import BadInput

V = TypeVar("V")

#: Kokoro-FastAPI's patterns (its text_processor and schemas): a voice tag's name may
#: hold letters, digits and ``_+-(). `` (blends with weights), and case is not matched.
VOICE_NAME_BODY = r"[a-zA-Z0-9_][a-zA-Z0-9_+\-(). ]*"
PAUSE_TAG = re.compile(r"\[pause:(\d+(?:\.\d+)?)s\]", re.IGNORECASE)
VOICE_TAG = re.compile(rf"\[voice:\s*({VOICE_NAME_BODY}?)\s*\]", re.IGNORECASE)
CONTROL_TAG = re.compile(
    rf"\[voice:\s*({VOICE_NAME_BODY}?)\s*\]|\[rate:\s*(\d+(?:\.\d+)?)\s*\]"
    r"|\[baserate:\s*(\d+(?:\.\d+)?)\s*\]",
    re.IGNORECASE,
)
#: What opens a tag: with tags on, one that does not parse is refused rather than spoken
#: ("[voice:@x]", "[pause:1]", "[rate:fast]").
TAG_START = re.compile(r"\[(?:voice|rate|baserate|pause):", re.IGNORECASE)
#: Kokoro-FastAPI's max_pause_duration_s: a longer pause is this long.
MAX_PAUSE = 60.0
#: Kokoro-FastAPI's pace bounds (those of ``speed``): a tag's pace is held inside them.
RATE_RANGE = (0.25, 4.0)


class BadTag(BadInput):
    """A tag of the input that cannot be read: malformed, or naming no voice here."""

    param = "input"


@dataclass(frozen=True)
class Speak(Generic[V]):
    """Text spoken in ``voice`` at ``rate`` times the request's speed."""

    voice: V
    rate: float
    text: str


@dataclass(frozen=True)
class Pause:
    """Seconds of silence."""

    seconds: float


def clamp_rate(rate: float) -> float:
    return min(max(rate, RATE_RANGE[0]), RATE_RANGE[1])


def check_tags(text: str) -> None:
    """BadTag naming the first thing that opens a tag but is none."""
    for match in TAG_START.finditer(text):
        at = match.start()
        if not (CONTROL_TAG.match(text, at) or PAUSE_TAG.match(text, at)):
            end = text.find("]", at)
            shown = text[at:end + 1 if 0 <= end < at + 60 else at + 40]
            raise BadTag(
                f"malformed tag {shown!r} at character {at + 1}: write [voice:NAME], "
                "[rate:X] or [pause:Xs] (X a number such as 0.5)"
            )


def voice_names(text: str) -> list[str]:
    """The names of the input's voice tags, each once, in order."""
    return list(dict.fromkeys(m.group(1).strip() for m in VOICE_TAG.finditer(text)))


def split(
    text: str,
    voice: V,
    voice_tags: bool,
    resolve: Callable[[str], tuple[V, float | None]] | None = None,
    base_rate: float | None = None,
    max_pause: float = MAX_PAUSE,
) -> list[Speak[V] | Pause]:
    """``text`` as its parts in order: Speak parts (whitespace trimmed, none empty) and
    Pause parts (each over 0 s, at most ``max_pause``).

    ``voice_tags``: read voice and rate tags (else only pauses, with ``voice`` at rate 1,
    or ``base_rate``); ``resolve`` maps a voice tag's name to the voice and the pace its
    alias carries (None: none); ``base_rate``: the pace of the request's own voice alias.
    """
    if voice_tags:
        check_tags(text)
        spans = _voice_spans(text, voice, resolve, base_rate or 1.0)
    else:
        spans = [(voice, 1.0 if base_rate is None else base_rate, text)]
    parts: list[Speak[V] | Pause] = []
    for speaker, rate, span in spans:
        pieces = PAUSE_TAG.split(span)  # text, seconds, text, ...
        for index, piece in enumerate(pieces):
            if index % 2:
                seconds = min(float(piece), max_pause)
                if seconds > 0:
                    parts.append(Pause(seconds))
            elif piece.strip():
                parts.append(Speak(speaker, rate, piece.strip()))
    return parts


def _voice_spans(text: str, voice: V, resolve, base: float) -> list[tuple[V, float, str]]:
    """(voice, rate, text) spans between the voice and rate tags, as Kokoro-FastAPI's
    split_by_voice: a rate tag scales the voice's base pace (its alias's, else 1); a voice
    tag sets both back; spans of the same voice and pace are joined with a space."""
    spans: list[tuple[V, float, str]] = []
    scale = 1.0
    at = 0

    def add(piece: str) -> None:
        piece = piece.strip()
        if not piece:
            return
        rate = clamp_rate(base * scale)
        if spans and spans[-1][:2] == (voice, rate):
            spans[-1] = (voice, rate, f"{spans[-1][2]} {piece}")
        else:
            spans.append((voice, rate, piece))

    for match in CONTROL_TAG.finditer(text):
        add(text[at:match.start()])
        at = match.end()
        name, rate, baserate = match.groups()
        if name is not None:
            if resolve is None:
                raise ValueError("voice tags need a resolve function")
            voice, alias_rate = resolve(name.strip())
            base, scale = alias_rate or 1.0, 1.0
        elif rate is not None:
            scale = float(rate)
        else:
            base = float(baserate)
    add(text[at:])
    return spans


# --- SSML, translated onto the tags -------------------------------------------------------

#: The elements Kokoro-FastAPI's translator reads, and what each becomes (GET /dev/ssml's
#: "elements"); the others' markup is dropped and their text spoken ("ignored").
SSML_ELEMENTS: dict[str, str | None] = {
    "speak": "Root element, container only",
    "break": "Silence from time= or strength=, becomes [pause:Ns]",
    "voice": "Speaker change from name=, becomes [voice:name] and reverts at the closing tag, "
             "needs a request voice",
    "prosody": "rate= only, becomes [rate:x] and reverts at the closing tag, pitch and volume "
               "are ignored",
    "phoneme": "Pronunciation from ph=, alphabet=ipa only, becomes [word](/ipa/)",
    "sub": "Speaks alias= in place of the text",
    "desc": "Dropped with its text, an audio description is not speech",
    "emphasis": None, "say-as": None, "lang": None, "audio": None, "mark": None,
    "p": None, "s": None, "w": None,
}  # fmt: skip
#: <break strength=...> in seconds.
BREAK_STRENGTHS = {"none": 0.0, "x-weak": 0.0, "weak": 0.25, "medium": 0.5, "strong": 1.0,
                   "x-strong": 1.5}
#: <prosody rate=...> keywords; other values are a percentage or a bare factor.
PROSODY_RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25,
                 "x-fast": 1.5}
#: Deepest element nesting translated (Kokoro-FastAPI's ssml_max_depth).
SSML_MAX_DEPTH = 10
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$", re.IGNORECASE)
_PROLOG = re.compile(r"(?:\s|<\?[^>]*\?>|<!--.*?-->)*", re.DOTALL)
_BLOCKS = {"p", "s"}


class BadSSML(BadInput):
    """SSML that cannot be translated: not well-formed, a DTD, or nested too deep."""

    param = "input"


def is_ssml(text: str) -> bool:
    """Whether ``text`` is an SSML document: its root (after a prolog) is ``<speak>``."""
    return bool(re.match(r"<speak[\s/>]", _PROLOG.sub("", text, count=1)))


def ssml_to_tags(text: str, voice: str = "", voice_tags: bool = True,
                 max_pause: float = MAX_PAUSE) -> str:
    """An SSML document (one whose root is ``<speak>``) as text with the tags, as
    Kokoro-FastAPI translates it; any other text unchanged.  ``<voice>`` and
    ``<prosody rate>`` become tags only with ``voice_tags`` and a request ``voice`` (to go
    back to at their end); else their text is spoken as it is."""
    if _PROLOG.sub("", text, count=1)[:9].upper() == "<!DOCTYPE":  # no entity expansion
        raise BadSSML("Malformed SSML: DTD is not supported")
    if not is_ssml(text):
        return text
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        raise BadSSML(f"Malformed SSML: {error}") from None
    parts: list[str] = []
    _render(root, parts, voice_tags and bool(voice), voice, 1.0, 0, max_pause)
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def _seconds(element: ET.Element, max_pause: float) -> float:
    time = element.get("time")
    match = _TIME.match(time) if time else None
    if match:
        value = float(match[1])
        return min(value / 1000 if match[2].lower() == "ms" else value, max_pause)
    return BREAK_STRENGTHS.get(element.get("strength", "medium"), 0.5)


def _rate(value: str) -> float:
    value = value.strip().lower()
    if value in PROSODY_RATES:
        return PROSODY_RATES[value]
    try:
        return clamp_rate(float(value[:-1]) / 100 if value.endswith("%") else float(value))
    except ValueError:
        return 1.0


def _render(element: ET.Element, parts: list[str], control: bool, voice: str, rate: float,
            depth: int, max_pause: float) -> None:
    if depth > SSML_MAX_DEPTH:
        raise BadSSML(f"Malformed SSML: nesting deeper than {SSML_MAX_DEPTH} levels is not translated")
    tag = element.tag.split("}")[-1].lower()  # namespaced or not
    if tag == "break":
        seconds = _seconds(element, max_pause)
        if seconds > 0:
            parts.append(f" [pause:{seconds}s] ")
        return
    phonemes = element.get("ph")
    if tag == "phoneme" and phonemes and element.get("alphabet", "ipa").lower() == "ipa":
        parts.append(f"[{''.join(element.itertext()).strip()}](/{phonemes.strip()}/)")
        return
    if tag == "sub":
        parts.append(element.get("alias") or "".join(element.itertext()))
        return
    if tag == "desc":
        return
    inner_voice, inner_rate = voice, rate
    if tag == "voice" and control and element.get("name"):
        inner_voice = element.get("name").strip()
        parts.append(f" [voice:{inner_voice}] ")
        if rate != 1.0:
            parts.append(f" [rate:{rate}] ")
    if tag == "prosody" and control and element.get("rate"):
        inner_rate = _rate(element.get("rate", ""))
        if inner_rate != rate:
            parts.append(f" [rate:{inner_rate}] ")
    if tag in _BLOCKS:
        parts.append(" ")
    if element.text:
        parts.append(element.text)
    for child in element:
        _render(child, parts, control, inner_voice, inner_rate, depth + 1, max_pause)
        if child.tail:
            parts.append(child.tail)
    if tag in _BLOCKS:
        parts.append(" ")
    if inner_voice != voice:
        parts.append(f" [voice:{voice}] ")
        if rate != 1.0:
            parts.append(f" [rate:{rate}] ")
    if inner_rate != rate:
        parts.append(f" [rate:{rate}] ")
