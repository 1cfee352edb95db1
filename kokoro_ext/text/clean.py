"""What is not read aloud, removed: each kind of cleaning the front end does, in one place.

In the order kokoro_ext.text.pipeline runs them:

``strip_terminal``
    terminal escape sequences (ECMA-48: colours, titles, hyperlinks) removed whole, the
    "[31m" left of a colour code that lost its ESC, overstrike ("N\\bN") read once;
``invisible``
    format characters (zero-width, bidi marks, soft hyphen) removed without a space (they
    never split a word); control characters removed, but a separator (NUL, form feed,
    the information separators) between two words is a word break; line breaks and tabs
    stay;
``compatibility``
    Unicode NFKC (full-width letters and digits, ligatures; "…" is kept, the chunker splits
    on it; "1½" becomes "1 1⁄2"), line breaks as "\\n" (Japanese and Chinese: none; their
    G2Ps map full-width punctuation themselves);
``unconfuse``
    look-alike letters of another script read in the word's own script;
``drop_symbols``
    symbols and emoji with no pronunciation dropped, with a warning;
``drop_other_scripts``
    letters of scripts other than Latin dropped, with a warning (languages written in
    Latin letters).

Each takes a str or a kokoro_ext.text.spans.Spanned and keeps the spans of the latter.
"""

from __future__ import annotations

import re
import unicodedata
import warnings

from kokoro_ext.text.spans import map_chars, sub

# Format characters that glue or separate nothing a reader hears: removed, not spaced.
_INVISIBLE = {"\u00ad", "\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"}
# Control characters other than line breaks and tabs (Unicode category Cc).
_CONTROLS = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]+"
# Those that separate what they stand between: NUL (C strings, find -print0), vertical
# tab, form feed, the information separators FS GS RS US, next line.  The others (BEL,
# DEL, ...) stand for nothing a reader sees: "bell\x07s" is "bells".
_SEPARATORS = frozenset("\x00\x0b\x0c\x1c\x1d\x1e\x1f\x85")
# NFKC would turn these into something the chunker or G2P handles worse ("…" -> "...").
_KEEP_FROM_NFKC = {"…"}
#: Private-use characters are the markup layer's placeholders (kokoro_ext.text.frontend).
PLACEHOLDER_RANGE = (0xF0000, 0xFFFFD)
#: The currency signs kokoro_ext.text.normalize reads in English.
CURRENCY_SIGNS = frozenset("$€£¥₹")
# Symbols the other languages' G2P reads itself (espeak-ng: "%" is "por ciento").
_READ_BY_G2P = set("%$€£¥₹°")
# Symbols misaki's English G2P reads itself ("&" and "@" are punctuation, never dropped):
# what normalize.spell leaves of them when its symbols are off (normalize.Normalization).
_READ_BY_ENGLISH_G2P = CURRENCY_SIGNS | {"%", "+"}

# Terminal escape sequences (ECMA-48): a colour code or a window title is not text.
# (The patterns below are strings, compiled at their first use: re caches them.)
_TERMINAL = (
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: colours (ESC[31m), cursor moves, erases
    # OSC (titles, hyperlinks), DCS, SOS, PM, APC: to their terminator, else the line's end
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\n]*?(?:\x07|\x1b\\|\x9c|(?=\n)|\Z)"
    r"|\x1b[ -/]*[0-~]?"  # other escapes (ESC 7, ESC ( B) and a lone ESC
)
# "[31m", "[1;32m": colour codes whose ESC was lost on the way (but "[5min]" is text)
_SGR_REMNANT = r"\[\d{1,3}(?:;\d{1,3})*m(?!\w*\])"
_OVERSTRIKE = r"[^\n\x08]\x08"  # "N\bN" bold, "_\bN" underline (man pages)

# Letters that look like Latin ones (Unicode's confusables.txt, single letters): a word
# that mixes scripts is read in the script its other letters are written in.
_LOOKALIKES = {
    # Cyrillic
    "а": "a", "с": "c", "ԁ": "d", "е": "e", "һ": "h", "і": "i", "ј": "j", "о": "o",
    "р": "p", "ԛ": "q", "ѕ": "s", "ԝ": "w", "х": "x", "у": "y", "А": "A", "В": "B",
    "С": "C", "Е": "E", "Н": "H", "І": "I", "Ј": "J", "К": "K", "М": "M", "О": "O",
    "Р": "P", "Ѕ": "S", "Т": "T", "Х": "X", "У": "Y", "Ү": "Y", "Ԛ": "Q", "Ԝ": "W",
    # Greek
    "α": "a", "ι": "i", "ν": "v", "ο": "o", "ρ": "p", "υ": "u", "Α": "A", "Β": "B",
    "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Armenian
    "հ": "h", "ո": "n", "ս": "u", "օ": "o",
}  # fmt: skip
_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK", "ARMENIAN")
_WORD = r"[^\W\d_]+"


def strip_terminal(text: str) -> str:
    """``text`` without terminal escape sequences (CSI, OSC, ...), whole, nor the "[31m"
    left of a colour code that lost its ESC; overstruck characters ("N\\bN") once."""
    if "\x1b" in text or re.search("[\x90-\x9f]", text):
        text = sub(_TERMINAL, "", text)
    if "\x08" in text:
        while (struck := sub(_OVERSTRIKE, "", text)) != text:
            text = struck
    return sub(_SGR_REMNANT, "", text) if "[" in text else text


def _between_words(m: re.Match) -> str:
    # a separator between two words ("Hello\0world") is the word break it stands for
    text = m.string
    inside = 0 < m.start() and m.end() < len(text)
    if inside and not _SEPARATORS.isdisjoint(m[0]):
        return "" if text[m.start() - 1].isspace() or text[m.end()].isspace() else " "
    return ""


def invisible(text: str, lang: str = "a") -> str:
    """``text`` without format characters and control characters, but a separator
    (``_SEPARATORS``) between two words is a space; line breaks and tabs kept.  Japanese and Chinese
    also lose other characters of category C but private use ("\\r", unassigned), as
    their G2Ps would read them."""
    cjk = lang in ("j", "z")
    # judged once per distinct character: most texts have none
    removing = {
        c for c in set(text) if not c.isascii() and (
            c in _INVISIBLE or (category := unicodedata.category(c)) == "Cf"
            or (cjk and category[0] == "C" and category not in ("Cc", "Co"))
        )
    }  # fmt: skip
    if removing:
        text = map_chars(text, lambda c: "" if c in removing else c)
    if cjk:  # "\r" is no line break for these G2Ps: a control character like the others
        return sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]+", _between_words, text)
    return sub(_CONTROLS, _between_words, text)


def compatibility(text: str) -> str:
    """NFKC (but "…"), each character on its own; line breaks as "\\n".  A vulgar
    fraction after a digit is a mixed number: "1½" is "1 1⁄2" (NFKC alone: "11⁄2")."""
    # most text is NFKC already (each character then is, on its own)
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        previous = ""

        def compat(char: str) -> str:
            nonlocal previous
            if char in _KEEP_FROM_NFKC:
                out = char
            else:
                out = unicodedata.normalize("NFKC", char)
                if "\u2044" in out and previous[-1:].isdigit():
                    out = " " + out
            if out:
                previous = out
            return out

        text = map_chars(text, compat)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def unconfuse(text: str) -> str:
    """Words mixing Latin, Cyrillic, Greek or Armenian letters, read in one script: the
    look-alike letters (``_LOOKALIKES``) take the script of the word's other letters
    ("Неllо" with a Cyrillic Н, е, о is "Hello"; "Пpивет" with a Latin p is Russian).
    A word every letter of which could be either takes its majority's script (Latin on
    a tie); a word with distinctive letters of two scripts is left as it is."""
    if text.isascii():
        return text
    return sub(_WORD, _unconfuse_word, text)


def _script(char: str) -> str | None:
    if char.isascii():
        return "LATIN"
    script = unicodedata.name(char, "").split(" ", 1)[0]
    return script if script in _SCRIPTS else None


def _unconfuse_word(match: re.Match) -> str:
    word = match[0]
    if word.isascii():
        return word
    scripts = [_script(c) for c in word]
    present = set(scripts)
    if len(present) < 2 or None in present:
        return word
    counts = {s: scripts.count(s) for s in present}
    # the scripts every letter of the word can be written in
    fits = [
        target for target in present
        if all(s == target or _lookalike(c, target) for c, s in zip(word, scripts))
    ]  # fmt: skip
    if not fits:
        return word
    target = max(fits, key=lambda s: (counts[s], s == "LATIN"))
    return "".join(c if s == target else _lookalike(c, target) for c, s in zip(word, scripts))


def _lookalike(char: str, script: str) -> str:
    """``char``'s look-alike in ``script`` ("" if it has none)."""
    latin = char if char.isascii() else _LOOKALIKES.get(char, "")
    if script == "LATIN" or not latin:
        return latin
    return _FROM_LATIN[script].get(latin, "")


_FROM_LATIN: dict[str, dict[str, str]] = {s: {} for s in _SCRIPTS}
for _char, _latin in _LOOKALIKES.items():
    _FROM_LATIN[unicodedata.name(_char).split(" ", 1)[0]].setdefault(_latin, _char)


def drop_symbols(text: str, lang: str = "a") -> str:
    """``text`` without emoji and symbols that have no reading, with a warning naming them.

    Kept: letters, marks, digits, punctuation, spaces, the markup placeholders, and the
    symbols the language's G2P reads itself (English: currency signs, "%", "+").
    """
    kept = _READ_BY_ENGLISH_G2P if lang in ("a", "b") else _READ_BY_G2P
    # judged once per distinct character: most texts have none to drop
    dropping = {
        c for c in set(text)
        if unicodedata.category(c)[0] in "SC" and c not in "\n\t" and c not in kept
        and not PLACEHOLDER_RANGE[0] <= ord(c) <= PLACEHOLDER_RANGE[1]
    }  # fmt: skip
    dropped = [c for c in text if c in dropping] if dropping else []
    if dropping:
        text = map_chars(text, lambda c: " " if c in dropping else c)
    if not text.isascii():
        # variation selectors and skin-tone modifiers ride on the emoji: dropped silently
        text = sub(r"[\ufe0e\ufe0f\U0001f3fb-\U0001f3ff]", "", text)
    shown = "".join(dict.fromkeys(c for c in dropped if c not in "\ufe0e\ufe0f"))
    if shown:
        warnings.warn(f"dropping symbols with no pronunciation: {shown!r}", stacklevel=3)
        text = sub(r"(?<=\S) {2,}(?=\S)", " ", text)
    return text


def is_latin_or_common(char: str) -> bool:
    """False for letters and marks of scripts other than Latin (Cyrillic, CJK, Greek, ...)."""
    if not unicodedata.category(char).startswith(("L", "M")):
        return True
    name = unicodedata.name(char, "")
    return name.startswith(("LATIN", "COMBINING", "MODIFIER LETTER"))


def drop_other_scripts(text: str) -> str:
    """``text`` without letters of other scripts, with a warning naming them.

    The English G2P spells such letters out by their English names (Cyrillic "мир" as
    "em i er") or says "Chinese letter" for each ideograph, which is not speech in any
    language; they are dropped (and the words around them kept) instead.
    """
    if text.isascii():
        return text
    foreign = {c for c in set(text) if not is_latin_or_common(c)}
    if not foreign:
        return text
    shown = "".join(sorted(foreign))
    warnings.warn(
        f"dropping {len(shown)} characters that are not English (Latin) script: "
        f"{shown[:40]!r}{' ...' if len(shown) > 40 else ''}",
        stacklevel=3,
    )
    kept = map_chars(text, lambda c: c if c not in foreign else " ")
    return sub(r"[ \t]{2,}", " ", kept)
