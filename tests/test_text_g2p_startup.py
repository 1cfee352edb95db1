"""The English G2P without spaCy: the same phonemes, and nothing heavy imported."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kokoro_ext.text.g2p import Phonemizer, _align, _lexicon, _misaki_en, _SortedEntries
from kokoro_ext.text.tokenizer import tokenize

SENTENCES = [
    line.strip()
    for line in (Path(__file__).parent / "data" / "g2p_sentences.txt").read_text("utf-8").splitlines()
    if line.strip()
]


@pytest.fixture(scope="module")
def both():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecations when spaCy imports it
        return Phonemizer(), Phonemizer(spacy=True)


def test_the_sentence_set_is_varied():
    text = " ".join(SENTENCES)
    assert len(SENTENCES) >= 70
    for sample in ("n't", "'s", "-", "—", "…", "...", "(", "\"", "“", ":", ";", "$", "%",
                   "e.g.", "U.S.", "](/"):  # fmt: skip
        assert sample in text, sample


@pytest.mark.parametrize("sentence", SENTENCES)
def test_same_phonemes_as_the_spacy_tokenizer(both, sentence):
    light, spacy = both
    assert light(sentence) == spacy(sentence)


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("Don't stop.", ["Do", "n't", "stop", "."]),
        ("“Hi,” he said—no.", ["“", "Hi", ",", "”", "he", "said", "—", "no", "."]),
        ("Dr. Smith, the U.S. and e.g. this.", ["Dr.", "Smith", ",", "the", "U.S.", "and",
                                                "e.g.", "this", "."]),
        ("well-known 10-20 and/or 5km", ["well", "-", "known", "10", "-", "20", "and/or",
                                         "5", "km"]),
        ("Wait... what?!", ["Wait", "...", "what", "?", "!"]),
    ],
)  # fmt: skip
def test_tokens(text, tokens):
    result = tokenize(text)
    assert [t.text for t in result] == tokens
    assert "".join(t.text + t.whitespace_ for t in result) == text
    assert [t.tag_ for t in result if t.text in ",.?!—“”"] == ["."] * sum(
        t in ",.?!—“”" for t in tokens
    )


def test_alignment_is_spacys():
    # the words misaki's link pre-processing sees against the tokens
    assert _align(["I", "[don't]", "x"], ["I", "[", "do", "n't", "]", "x"]) == [0, 1, 1, 1, 1, 2]
    assert _align(["New York", "is"], ["New", "York", "is"]) == [0, 0, 1]


def test_a_fresh_process_imports_neither_spacy_nor_torch():
    code = (
        "import sys, time, json; t = time.perf_counter()\n"
        "from kokoro_ext.text.pipeline import FrontEnd\n"
        "p = FrontEnd('a').phonemize('Hello world.')\n"
        "print(json.dumps([p, time.perf_counter() - t, 'spacy' in sys.modules, "
        "'torch' in sys.modules, 'phonemizer' in sys.modules, 'num2words' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    phonemes, seconds, spacy, torch, espeak, num2words = json.loads(out.stdout)
    assert phonemes == "həlˈO wˈɜɹld."
    assert not spacy and not torch and not espeak  # espeak-ng starts at the first unknown word
    assert not num2words  # imported for the first number
    print(f"fresh process: English G2P ready and first sentence phonemized in {seconds:.2f} s")


@pytest.mark.parametrize("british", [False, True])
def test_lexicon_is_misakis(british):
    en = _misaki_en()
    ours, theirs = _lexicon(en, british), en.Lexicon(british)
    # every key of misaki's grown dictionaries looked up (the Mapping comparison) ...
    assert ours.golds == theirs.golds and ours.silvers == theirs.silvers
    # ... and no other case form of one is found where misaki finds nothing
    for mine, grown in ((ours.golds, theirs.golds), (ours.silvers, theirs.silvers)):
        for key in list(grown):
            for word in {key.lower(), key.upper(), key.capitalize(), key.title(), key.swapcase()}:
                assert mine.get(word) == grown.get(word), word
                assert (word in mine) == (word in grown), word
    assert ours.cap_stresses == theirs.cap_stresses and ours.british == british


LEXICON_FILES = ["us_gold.json", "us_silver.json", "gb_gold.json", "gb_silver.json"]


@pytest.mark.parametrize("file", LEXICON_FILES)
def test_lexicon_files_are_searched_as_json_reads_them(file):
    from importlib.resources import files

    from misaki import data

    raw = files(data).joinpath(file).read_bytes()
    entries = json.loads(raw)
    found = _SortedEntries(raw)
    assert found.usable  # sorted keys, one entry per line: what the binary search needs
    assert all(found.get(key) == value for key, value in entries.items())
    for key in list(entries)[::97]:
        for other in (key + "x", key[:-1], key.upper(), " " + key, key + "\uffff"):
            assert found.get(other) == entries.get(other), other


def test_a_json_file_in_another_form_is_parsed():
    assert not _SortedEntries(b'{"b": "x", "a": "y"}').usable


@pytest.mark.parametrize("british", [False, True])
def test_lexicon_lookups_do_not_parse_the_files(british):
    en = _misaki_en()
    ours, theirs = _lexicon(en, british), en.Lexicon(british)
    for mine, grown in ((ours.golds, theirs.golds), (ours.silvers, theirs.silvers)):
        for key in list(grown)[::89]:
            for word in {key, key.lower(), key.upper(), key.capitalize()}:
                assert mine.get(word) == grown.get(word), word
                assert (word in mine) == (word in grown), word
        assert mine._entries is None
