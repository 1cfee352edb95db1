"""Offline English G2P: misaki's lexicon with espeak-ng fallback, no spaCy download."""

from __future__ import annotations

import pytest

from kokoro_ext.build.model import load_config
from kokoro_ext.text import Phonemizer, phonemes_to_ids


@pytest.fixture(scope="module")
def phonemizer():
    import spacy.cli

    def no_download(*args, **kwargs):
        raise AssertionError("the G2P tried to download a spaCy model")

    original, spacy.cli.download = spacy.cli.download, no_download
    try:
        yield Phonemizer()
    finally:
        spacy.cli.download = original


def test_lexicon_words_and_punctuation(phonemizer):
    assert phonemizer("Hello world!") == "həlˈO wˈɜɹld!"
    assert phonemizer("Yes, maybe.") == "jˈɛs, mˈAbi."


def test_unknown_word_goes_to_espeak(phonemizer):
    phonemes = phonemizer("Zyxquorb")
    assert phonemes and all(c.isprintable() for c in phonemes)


def test_phonemes_to_ids_adds_boundaries_and_names_dropped_symbols():
    vocab = load_config()["vocab"]
    assert phonemes_to_ids("hə", vocab) == [0, vocab["h"], vocab["ə"], 0]
    with pytest.warns(UserWarning, match="'§'"):
        assert phonemes_to_ids("h§", vocab) == [0, vocab["h"], 0]
