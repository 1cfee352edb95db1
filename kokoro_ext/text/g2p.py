"""English text to Kokoro phonemes and phonemes to token ids, without the network.

misaki's ``en.G2P()`` downloads the spaCy model ``en_core_web_sm`` on first use, which
fails offline, and uses spaCy at all only to cut the text into tokens and tag them.
``Phonemizer`` builds the same G2P without a tagger (no part-of-speech tags, so the few
words whose pronunciation depends on the tag take their default; punctuation gets the
tag misaki keys its pauses on) with espeak-ng (shipped by espeakng-loader) as the
fallback for words outside misaki's lexicon.  Its tokens come from
kokoro_ext.text.tokenizer, which splits as spaCy's blank English pipeline does where
that changes the phonemes; spaCy itself (0.5 s to import, 1.5 s with torch installed)
is not imported unless ``Phonemizer(spacy=True)`` asks for it.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
import warnings
from collections.abc import Mapping

from kokoro_ext.text.chunking import Word, group_words
from kokoro_ext.text.tokenizer import tokenize

_PUNCTUATION_TAGGER = "kokoro_ext_punctuation_tagger"
_IMPORT_LOCK = threading.Lock()


class _LazySpacy(types.ModuleType):
    """Stands for ``spacy`` while misaki.en is imported; imports spaCy if ever used."""

    def __getattr__(self, name: str):
        if sys.modules.get("spacy") is self:
            del sys.modules["spacy"]
        return getattr(importlib.import_module("spacy"), name)


def _misaki_en() -> types.ModuleType:
    # misaki/en.py has `import spacy` at the top but needs spaCy only for what
    # _OfflineG2P replaces: let that import find a stand-in instead of loading spaCy
    with _IMPORT_LOCK:
        if "misaki.en" not in sys.modules and "spacy" not in sys.modules:
            stand_in = _LazySpacy("spacy")
            sys.modules["spacy"] = stand_in
            try:
                return importlib.import_module("misaki.en")
            finally:
                if sys.modules.get("spacy") is stand_in:
                    del sys.modules["spacy"]
        return importlib.import_module("misaki.en")


def _align(words: list[str], tokens: list[str]) -> list[int]:
    """spaCy's ``Alignment.from_strings(words, tokens).y2x.data``: for each token, in
    order, the indices of the words that share a character with it (spaces ignored)."""
    owner = [i for i, w in enumerate(words) for c in w if not c.isspace()]
    out: list[int] = []
    position = 0
    for token in tokens:
        size = sum(1 for c in token if not c.isspace())
        out += sorted(set(owner[position : position + size]))
        position += size
    return out


@functools.cache
def _offline_g2p_class() -> type:
    import numpy as np

    en = _misaki_en()

    class OfflineG2P(en.G2P):
        """misaki's en.G2P with kokoro_ext.text.tokenizer in place of spaCy."""

        def tokenize(self, text, tokens, features):
            if self.nlp is not None:  # Phonemizer(spacy=True): misaki's own code
                return super().tokenize(text, tokens, features)
            mutable = [
                en.MToken(
                    text=t.text, tag=t.tag_, whitespace=t.whitespace_,
                    _=en.MToken.Underscore(is_head=True, num_flags="", prespace=False),
                )  # fmt: skip
                for t in tokenize(text)
            ]
            if not features:
                return mutable
            y2x = np.array(_align(tokens, [t.text for t in mutable]))
            # as misaki's G2P.tokenize applies [word](feature) links
            for k, v in features.items():
                for i, j in enumerate(np.where(y2x == k)[0]):
                    if j >= len(mutable):
                        continue
                    if not isinstance(v, str):
                        mutable[j]._.stress = v
                    elif v.startswith("/"):
                        mutable[j]._.is_head = i == 0
                        mutable[j].phonemes = v.lstrip("/") if i == 0 else ""
                        mutable[j]._.rating = 5
                    elif v.startswith("#"):
                        mutable[j]._.num_flags = v.lstrip("#")
            return mutable

    return OfflineG2P


def _lexicon(en: types.ModuleType, british: bool):
    """misaki's ``en.Lexicon(british)`` without re-checking every entry of its shipped
    dictionaries against the vocab (a quarter of a second at every start; the test
    suite compares the two), with each dictionary a ``_GrownDictionary``: read on first
    use (the silver one only for a word the gold one lacks), not grown."""
    lexicon = en.Lexicon.__new__(en.Lexicon)
    lexicon.british, lexicon.cap_stresses = british, (0.5, 2)
    prefix = "gb" if british else "us"
    for kind in ("gold", "silver"):
        setattr(lexicon, f"{kind}s", _GrownDictionary(f"{prefix}_{kind}.json", en.Lexicon))
    return lexicon


class _GrownDictionary(Mapping):
    """``Lexicon.grow_dictionary(entries)`` of one of misaki's lexicon files, as a mapping
    that looks the grown entries up instead of storing them, and reads the file on
    first use.

    grow_dictionary adds, for each entry of two or more letters, its capitalized form
    (``hello`` -> ``Hello``) or, for a capitalized one, its lower-case form, unless the
    file has that key itself: nearly doubling 90,000 entries, 30 MiB and 0.07 s per file
    at every start.  ``_grown`` finds the same entry from the key asked for.  Iterating
    grows the dictionary for real (misaki never iterates; the tests compare every key).
    """

    def __init__(self, file: str, lexicon_class: type):
        self._file = file
        self._grow = lexicon_class.grow_dictionary
        self._entries: dict | None = None
        self._lock = threading.Lock()

    @property
    def entries(self) -> dict:
        """The file's own entries (read on first use)."""
        if self._entries is None:
            import json
            from importlib.resources import files

            from misaki import data

            with self._lock:
                if self._entries is None:
                    text = files(data).joinpath(self._file).read_text("utf-8")
                    self._entries = json.loads(text)
        return self._entries

    def _grown(self, word: str):
        """The value ``grow_dictionary`` gives ``word``, None where it has none."""
        entries = self.entries
        value = entries.get(word)
        if value is not None or not isinstance(word, str):
            return value  # the file's own entries win (grow_dictionary: {**grown, **file})
        # from a lower-case entry: word is its capitalized form
        lower = word.lower()
        if lower in entries and len(lower) >= 2 and lower.capitalize() == word != lower:
            return entries[lower]
        # from a capitalized entry: word is its lower-case form
        capital = word.capitalize()
        if (capital in entries and len(capital) >= 2 and capital != capital.lower()
                and capital.lower() == word):  # fmt: skip
            return entries[capital]
        return None

    def __getitem__(self, word):
        value = self._grown(word)
        if value is None:
            raise KeyError(word)
        return value

    def __contains__(self, word) -> bool:
        return self._grown(word) is not None

    def get(self, word, default=None):
        value = self._grown(word)
        return default if value is None else value

    def __iter__(self):
        return iter(self._grow(self.entries))

    def __len__(self) -> int:
        return len(self._grow(self.entries))


class _LazyFallback:
    """misaki's EspeakFallback, started on the first word outside the lexicon: importing
    phonemizer takes a few tenths of a second that text within the lexicon never needs."""

    def __init__(self, british: bool):
        self.british = british
        self._fallback = None
        self._lock = threading.Lock()

    def __call__(self, token):
        with self._lock:
            if self._fallback is None:
                from misaki.espeak import EspeakFallback

                self._fallback = EspeakFallback(british=self.british)
        return self._fallback(token)


def _register_punctuation_tagger() -> None:
    from spacy.language import Language

    if _PUNCTUATION_TAGGER in Language.factories:
        return

    @Language.component(_PUNCTUATION_TAGGER)
    def tag_punctuation(doc):
        # misaki keeps punctuation (kokoro's pauses) only for tokens tagged as punctuation.
        for token in doc:
            if token.is_punct:
                token.tag_ = {"(": "-LRB-", ")": "-RRB-"}.get(token.text, ".")
        return doc


class Phonemizer:
    """``Phonemizer()(text) -> phonemes``: misaki English G2P, offline.

    ``spacy=True`` tokenizes with spaCy's blank English pipeline instead of
    kokoro_ext.text.tokenizer (the same phonemes, half a second to a second and a half
    more to start; kept to test the one against the other).
    """

    def __init__(self, british: bool = False, spacy: bool = False):
        en = _misaki_en()
        g2p = _offline_g2p_class().__new__(_offline_g2p_class())  # not __init__: no download
        g2p.version, g2p.british, g2p.unk = None, british, ""
        g2p.nlp = None
        if spacy:
            import spacy as spacy_module

            _register_punctuation_tagger()
            g2p.nlp = spacy_module.blank("en")
            g2p.nlp.add_pipe(_PUNCTUATION_TAGGER)
        g2p.lexicon = _lexicon(en, british)
        g2p.fallback = _LazyFallback(british)
        self._g2p = g2p

    def __call__(self, text: str) -> str:
        """The phoneme string for ``text`` (words misaki cannot pronounce are dropped)."""
        phonemes, _ = self._g2p(text)
        return phonemes.strip()

    def words(self, text: str) -> list[Word]:
        """``text`` as Words (kokoro_ext.text.chunking) with their phonemes.

        Their phonemes joined are ``self(text)``.  Text that gets no phonemes (a symbol
        misaki has no pronunciation for, such as "%" after a number) is dropped with a
        warning naming it.
        """
        _, tokens = self._g2p(text)
        # a hyphen joining words ("thirty-four", "well-known") is not text left unsaid
        silent = [t.text for t in tokens if not t.phonemes and t.text.strip() not in ("", "-")]
        if silent:
            warnings.warn(
                f"dropping text with no pronunciation: {' '.join(silent)!r}", stacklevel=2
            )
        return group_words([(t.text, t.phonemes or "", t.whitespace) for t in tokens])


def phonemes_to_ids(phonemes: str, vocab: Mapping[str, int]) -> list[int]:
    """Token ids for ``phonemes`` with kokoro's boundary token 0 on both ends.

    Symbols outside the vocab are dropped, as kokoro does, with a warning naming them.
    """
    unknown = sorted({p for p in phonemes if p not in vocab})
    if unknown:
        warnings.warn(f"dropping symbols with no Kokoro token: {''.join(unknown)!r}", stacklevel=2)
    return [0, *(vocab[p] for p in phonemes if p in vocab), 0]
