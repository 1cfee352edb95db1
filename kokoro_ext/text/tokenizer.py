"""A small English tokenizer that splits as misaki needs it, in place of spaCy's.

misaki's English G2P runs spaCy only to cut the text into tokens (Kokoro's offline G2P
has no tagger: kokoro_ext.text.g2p), but ``import spacy`` costs half a second, and
1.5 s when torch is installed (thinc imports it).  ``tokenize`` follows the rules of
spaCy's English tokenizer that change what misaki says: punctuation split off the
ends of words (so that it is tagged and kept as a pause), clitics ("'s", "n't"),
hyphens and slashes between words, and abbreviations that keep their period ("Dr.",
"e.g.", "U.S.").  tests/test_text_g2p_startup.py checks that it gives the phonemes the
spaCy tokenizer gives on a varied set of sentences.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

# spaCy's English prefixes and suffixes that are single characters ("." is special)
_PREFIX = set("\"'“‘«([{*<¿¡$£€¥₹#&")
_SUFFIX = set("\"'”’»)]}>,;:!?%°#")
_CLITICS = ("'s", "’s", "'S", "n't", "n’t", "'m", "’m", "'re", "’re", "'ve", "’ve", "'ll",
            "’ll", "'d", "’d")  # fmt: skip
# units spaCy cuts off a number ("5km" -> "5", "km")
_UNITS = re.compile(
    r"(?<=\d)(km|m|dm|cm|mm|ha|µm|nm|yd|in|ft|kg|g|mg|µg|t|lb|oz|m/s|km/h|kmh|mph|hPa|Pa|"
    r"mbar|mb|MB|kb|KB|gb|GB|tb|TB|T|G|M|K|am|pm|a\.m\.|p\.m\.)$"
)
# words that keep their period (spaCy's tokenizer exceptions that matter here)
_ABBREVIATIONS = frozenset(
    "Mr. Mrs. Ms. Dr. St. Mt. Jr. Prof. Gen. Gov. Rep. Sen. Rev. Co. Corp. Inc. Ltd. Bros. "
    "vs. Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec. Ala. Ariz. Ark. "
    "Calif. Colo. Conn. Del. Fla. Ga. Ill. Ind. Kan. Ky. La. Md. Mass. Mich. Minn. Miss. "
    "Mo. Mont. Neb. Nev. Okla. Ore. Pa. Tenn. Va. Wash. Wis. a.m. p.m. e.g. i.e. Ph.D. "
    "PhD.".split()
)
# "U.S.", "A.", "m.": initials keep their period (spaCy splits a period only after a
# lower-case letter, a digit or punctuation, and has single letters as exceptions)
_KEEPS_PERIOD = re.compile(r"(?:[A-Za-z]\.)*[A-Z]\.|[a-z]\.")
_INFIX = re.compile(
    r"(\.\.+|…"  # ellipses anywhere
    r"|(?<=[^\W_])(?:--|-|–|—|~)(?=[^\W\d_])"  # well-known, 5-km, yes—no
    r"|(?<=[^\W_])[:<>=](?=[^\W\d_])"  # a:b
    r"|(?<=[^\W\d_]),(?=[^\W\d_])"  # a,b
    r"|(?<=\d)[-+*^](?=[\d-]))"  # 10-20, 2+2
)


@dataclass
class Token:
    """What misaki reads of a spaCy token: its text, tag and the whitespace after it."""

    text: str
    tag_: str
    whitespace_: str


def _is_punct(text: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in text)


def _tag(text: str) -> str:
    # the tags misaki keys punctuation on (kokoro_ext.text.g2p's tagger, spaCy-free)
    if text in ("(", ")"):
        return {"(": "-LRB-", ")": "-RRB-"}[text]
    return "." if _is_punct(text) else ""


def _split_word(word: str) -> list[str]:
    prefixes: list[str] = []
    suffixes: list[str] = []
    while True:
        if word in _ABBREVIATIONS:
            break
        if len(word) > 1 and word[0] in _PREFIX:
            prefixes.append(word[0])
            word = word[1:]
            continue
        if word.endswith(("...", "…")) and len(word) > 1 and word.rstrip(".…"):
            cut = len(word.rstrip(".…"))
            suffixes.append(word[cut:])
            word = word[:cut]
            continue
        unit = _UNITS.search(word)
        if unit is not None and unit.start() > 0:
            suffixes.append(unit[0])
            word = word[: unit.start()]
            continue
        if len(word) > 1 and word[-1] == "." and not _KEEPS_PERIOD.fullmatch(word):
            suffixes.append(".")
            word = word[:-1]
            continue
        if len(word) > 1 and word[-1] in _SUFFIX:
            suffixes.append(word[-1])
            word = word[:-1]
            continue
        clitic = next((c for c in _CLITICS if word.endswith(c) and len(word) > len(c)), None)
        if clitic is not None:
            suffixes.append(clitic)
            word = word[: -len(clitic)]
            continue
        break
    middle = [p for p in _INFIX.split(word) if p] if word else []
    return prefixes + middle + suffixes[::-1]


@functools.lru_cache(maxsize=1 << 16)
def _tagged(word: str) -> tuple[tuple[str, str], ...]:
    """``word``'s tokens (``_split_word``) with their tags: the same for the same word,
    kept for the next time it comes (most text says the same words again)."""
    return tuple((part, _tag(part)) for part in _split_word(word))


def tokenize(text: str) -> list[Token]:
    """``text`` as Tokens; their texts and whitespace join back to ``text``."""
    tokens: list[Token] = []
    for match in re.finditer(r"(\S+)(\s*)", text):
        parts = _tagged(match[1])
        last = len(parts) - 1
        for i, (part, tag) in enumerate(parts):
            tokens.append(Token(part, tag, match[2][:1] if i == last else ""))
        # spaCy keeps extra whitespace as tokens of its own
        if len(match[2]) > 1:
            tokens.append(Token(match[2][1:], "_SP", ""))
    return tokens
