"""English text to Kokoro phonemes and phonemes to token ids, without the network.

misaki's ``en.G2P()`` downloads the spaCy model ``en_core_web_sm`` on first use, which
fails offline.  ``Phonemizer`` builds the same G2P on a blank spaCy English pipeline
(tokenizer only: no part-of-speech tags, so the few words whose pronunciation depends
on the tag take their default; punctuation gets the tag misaki keys its pauses on) with
espeak-ng (shipped by espeakng-loader) as the fallback for words outside misaki's lexicon.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from kokoro_ext.text.chunking import Word, group_words


_PUNCTUATION_TAGGER = "kokoro_ext_punctuation_tagger"


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
    """``Phonemizer()(text) -> phonemes``: misaki English G2P, offline."""

    def __init__(self, british: bool = False):
        import spacy
        from misaki import en

        _register_punctuation_tagger()
        from misaki.espeak import EspeakFallback

        g2p = en.G2P.__new__(en.G2P)  # bypass __init__, which downloads a spaCy model
        g2p.version, g2p.british, g2p.unk = None, british, ""
        g2p.nlp = spacy.blank("en")
        g2p.nlp.add_pipe(_PUNCTUATION_TAGGER)
        g2p.lexicon = en.Lexicon(british)
        g2p.fallback = EspeakFallback(british=british)
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
