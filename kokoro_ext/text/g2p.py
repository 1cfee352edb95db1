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
import json
import sys
import threading
import types
import warnings
from collections.abc import Mapping
from json.decoder import scanstring

from kokoro_ext.text.chunking import Word, word_groups
from kokoro_ext.text.tokenizer import tokenize

_PUNCTUATION_TAGGER = "kokoro_ext_punctuation_tagger"
#: Most lexicon answers kept (the tokenizer keeps as many splits).
_KNOWN_MOST = 65536
_JSON = json.JSONDecoder()
_IMPORT_LOCK = threading.Lock()


class _LazySpacy(types.ModuleType):
    """Stands for ``spacy`` while misaki.en is imported; imports spaCy if ever used."""

    def __getattr__(self, name: str):
        if sys.modules.get("spacy") is self:
            del sys.modules["spacy"]
        return getattr(importlib.import_module("spacy"), name)


class _LazyNum2Words(types.ModuleType):
    """Stands for ``num2words`` while misaki.en is imported: misaki's ``num2words`` then
    imports the real one on its first call."""

    def __init__(self):
        super().__init__("num2words")
        self.num2words = _num2words


def _num2words(number, **options) -> str:
    if isinstance(sys.modules.get("num2words"), _LazyNum2Words):
        del sys.modules["num2words"]  # called while another thread imports misaki.en
    from num2words import num2words

    return num2words(number, **options)


def _misaki_en() -> types.ModuleType:
    # misaki/en.py imports spacy and num2words at the top, but needs spaCy only for what
    # _OfflineG2P replaces and num2words (which loads its fifty languages: 0.02 s) only
    # for numbers: let those imports find stand-ins instead
    with _IMPORT_LOCK:
        if "misaki.en" in sys.modules:
            return sys.modules["misaki.en"]
        stand_ins = [
            m for m in (_LazySpacy("spacy"), _LazyNum2Words()) if m.__name__ not in sys.modules
        ]
        sys.modules.update((m.__name__, m) for m in stand_ins)
        try:
            return importlib.import_module("misaki.en")
        finally:
            for module in stand_ins:
                if sys.modules.get(module.__name__) is module:
                    del sys.modules[module.__name__]


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

    underscore = en.MToken.Underscore

    def _underscore():
        # Underscore(is_head=True, num_flags="", prespace=False), the same dict and
        # attributes, without addict's __setitem__ and _hook for each plain value
        made = underscore()
        dict.update(made, is_head=True, num_flags="", prespace=False)
        return made

    class OfflineG2P(en.G2P):
        """misaki's en.G2P with kokoro_ext.text.tokenizer in place of spaCy."""

        def tokenize(self, text, tokens, features):
            if self.nlp is not None:  # Phonemizer(spacy=True): misaki's own code
                return super().tokenize(text, tokens, features)
            mutable = [
                en.MToken(text=t.text, tag=t.tag_, whitespace=t.whitespace_, _=_underscore())
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
    at every start.  ``_grown`` finds the same entry from the key asked for, in the file's
    bytes (``_SortedEntries``) rather than in the parsed file.  Iterating grows the
    dictionary for real (misaki never iterates; the tests compare every key).
    """

    def __init__(self, file: str, lexicon_class: type):
        self._file = file
        self._grow = lexicon_class.grow_dictionary
        self._entries: dict | None = None
        self._sorted: _SortedEntries | None = None
        self._lock = threading.Lock()
        self._known: dict[str, object] = {}  # _grown's answers so far

    def _bytes(self) -> bytes:
        from importlib.resources import files

        from misaki import data

        return files(data).joinpath(self._file).read_bytes()

    @property
    def entries(self) -> dict:
        """The file's own entries (parsed on first use)."""
        if self._entries is None:
            with self._lock:
                if self._entries is None:
                    self._entries = json.loads(self._bytes())
        return self._entries

    def _entry(self, word: str):
        """The file's own entry for ``word``, None where it has none."""
        if self._entries is not None:
            return self._entries.get(word)
        if self._sorted is None:
            with self._lock:
                if self._sorted is None:
                    self._sorted = _SortedEntries(self._bytes())
        if not self._sorted.usable:
            return self.entries.get(word)
        return self._sorted.get(word)

    def _grown(self, word: str):
        """The value ``grow_dictionary`` gives ``word``, None where it has none (kept:
        misaki asks for the same words again and again)."""
        if word.__class__ is str:  # a str subclass may compare as another str
            try:
                return self._known[word]
            except KeyError:
                pass
        value = self._find(word)
        if word.__class__ is str:
            if len(self._known) >= _KNOWN_MOST:  # a server reads unbounded vocabularies
                self._known.clear()
            self._known[word] = value
        return value

    def _find(self, word: str):
        if not isinstance(word, str):
            return None
        value = self._entry(word)
        if value is not None:
            return value  # the file's own entries win (grow_dictionary: {**grown, **file})
        # from a lower-case entry: word is its capitalized form
        lower = word.lower()
        if len(lower) >= 2 and lower.capitalize() == word != lower:
            value = self._entry(lower)
            if value is not None:
                return value
        # from a capitalized entry: word is its lower-case form
        capital = word.capitalize()
        if len(capital) >= 2 and capital != capital.lower() and capital.lower() == word:
            return self._entry(capital)
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


class _SortedEntries:
    """The entries of a JSON object file looked up in its bytes, without parsing the file.

    misaki's lexicons are as ``json.dump(..., indent=2, sort_keys=True)`` writes them:
    each entry starts a line with two spaces and its key, deeper lines are indented
    further, and the keys come in Python's string order.  A binary search over the bytes
    finds a key's line in a few dozen probes, where parsing the 3 MB file took 0.05 s at
    every start for the handful of words a sentence looks up.  ``usable`` is false for a
    file not in that form (the caller parses it then).  A key's value is parsed once:
    misaki gets the same object for the same key, as from a dict.
    """

    _ENTRY = b'\n  "'  # the newline before a top-level key

    def __init__(self, data: bytes):
        self._data = data
        self.usable = data.startswith(b"{" + self._ENTRY) and data.rstrip().endswith(b"\n}")
        self._found: dict[str, object] = {}

    def get(self, word: str):
        """The value of key ``word``, None where the file has no such key."""
        if word in self._found:
            return self._found[word]
        data, entry = self._data, self._ENTRY
        value = None
        lo, hi = 0, len(data)  # where the newline before ``word``'s entry is, if anywhere
        while lo < hi:
            mid = (lo + hi) // 2
            at = data.find(entry, mid, hi + len(entry) - 1)
            if at < 0:  # no entry starts in [mid, hi)
                hi = mid
                continue
            line = data[at + 1 : data.find(b"\n", at + 1)].decode("utf-8")
            key, _ = scanstring(line, len(entry) - 1)
            if key == word:
                value = self._value(at)
                break
            if key < word:
                lo = at + 1
            else:  # none between mid and this entry: before mid, if anywhere
                hi = mid
        self._found[word] = value
        return value

    def _value(self, at: int):
        following = self._data.find(self._ENTRY, at + 1)
        text = self._data[at + 1 : following if following >= 0 else None].decode("utf-8")
        _, end = scanstring(text, len(self._ENTRY) - 1)
        start = text.index(":", end) + 1
        while text[start].isspace():
            start += 1
        return _JSON.raw_decode(text, start)[0]


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
        return [Word(text, phonemes) for text, phonemes in self.groups(text, stacklevel=3)]

    def groups(self, text: str, stacklevel: int = 2) -> list[tuple[str, str]]:
        """``words(text)`` as (text, phonemes) pairs (for a caller that makes its own
        Words); ``stacklevel`` is the warning's, as warnings.warn counts it from here."""
        _, tokens = self._g2p(text)
        # a hyphen joining words ("thirty-four", "well-known") is not text left unsaid
        silent = [t.text for t in tokens if not t.phonemes and t.text.strip() not in ("", "-")]
        if silent:
            warnings.warn(
                f"dropping text with no pronunciation: {' '.join(silent)!r}", stacklevel=stacklevel
            )
        return word_groups([(t.text, t.phonemes or "", t.whitespace) for t in tokens])


def phonemes_to_ids(phonemes: str, vocab: Mapping[str, int]) -> list[int]:
    """Token ids for ``phonemes`` with kokoro's boundary token 0 on both ends.

    Symbols outside the vocab are dropped, as kokoro does, with a warning naming them.
    """
    unknown = sorted({p for p in phonemes if p not in vocab})
    if unknown:
        warnings.warn(f"dropping symbols with no Kokoro token: {''.join(unknown)!r}", stacklevel=2)
    return [0, *(vocab[p] for p in phonemes if p in vocab), 0]
