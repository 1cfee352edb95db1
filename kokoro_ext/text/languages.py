"""The nine Kokoro v1.0 languages: codes, names and which G2P speaks each.

Kokoro names a language by one letter, the first letter of its voices' names
(``ef_dora`` is Spanish); kokoro's ``KPipeline`` picks the G2P by that letter, and so
does this package (kokoro_ext.text.frontend).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

G2PKind = Literal["misaki-en", "espeak", "misaki-ja", "misaki-zh"]


@dataclass(frozen=True)
class Language:
    """One Kokoro language and how its text becomes phonemes."""

    code: str  # kokoro's lang_code, the voices' first letter
    name: str
    g2p: G2PKind
    espeak: str | None = None  # espeak-ng voice for g2p == "espeak" (kokoro's LANG_CODES)


LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language("a", "American English", "misaki-en"),
        Language("b", "British English", "misaki-en"),
        Language("e", "Spanish", "espeak", "es"),
        Language("f", "French", "espeak", "fr-fr"),
        Language("h", "Hindi", "espeak", "hi"),
        Language("i", "Italian", "espeak", "it"),
        Language("j", "Japanese", "misaki-ja"),
        Language("p", "Brazilian Portuguese", "espeak", "pt-br"),
        Language("z", "Mandarin Chinese", "misaki-zh"),
    )
}

#: kokoro's aliases (KPipeline's ALIASES) and the ISO names people type.
ALIASES = {
    "en": "a", "en-us": "a", "en-gb": "b", "es": "e", "fr": "f", "fr-fr": "f", "hi": "h",
    "it": "i", "pt": "p", "pt-br": "p", "ja": "j", "zh": "z",
}  # fmt: skip


def language(code: str) -> Language:
    """The Language for a kokoro code ("e") or alias ("es", "pt-br"); ValueError otherwise."""
    if not isinstance(code, str):
        raise TypeError(f"lang must be a str such as 'a' or 'es', got {type(code).__name__}")
    key = code.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key not in LANGUAGES:
        known = ", ".join(f"{c} {lang.name}" for c, lang in LANGUAGES.items())
        raise ValueError(f"unknown language {code!r}; Kokoro speaks: {known}")
    return LANGUAGES[key]


def language_of_voice(voice: object) -> Language | None:
    """The language a voice's name implies (``ef_dora`` -> Spanish), or None.

    Voices are named ``<language><f|m>_<name>``; a voice file is judged by its file
    name.  Anything else (an array, an unknown prefix) implies nothing.
    """
    if not isinstance(voice, (str, Path)):
        return None
    name = Path(voice).name
    if len(name) < 3 or name[2] != "_" or name[1] not in "fm":
        return None
    return LANGUAGES.get(name[0].lower())


def resolve_language(lang: str | None, voice: object = None) -> Language:
    """The language to speak: ``lang`` if given, else the voice's prefix, else American."""
    if lang is not None:
        return language(lang)
    return language_of_voice(voice) or language("a")
