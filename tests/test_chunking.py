"""Long text in chunks (kokoro_ext.text.chunking): pure functions, no G2P, no TVM."""

from __future__ import annotations

import random
import re

import pytest

from kokoro_ext.text.chunking import (
    MAX_SENTENCE,
    PAUSES,
    Piece,
    Word,
    drop_other_scripts,
    first_clause,
    group_words,
    pack,
    pack_evenly,
    size,
    split_in_two,
    split_sentences,
    words_of_phonemes,
)


def _sentences(text):
    return [(s.text, s.end) for s in split_sentences(text)]


def test_sentences_keep_their_punctuation_and_how_they_end():
    text = 'Dr. Smith paid $4.50 at 5 p.m. He said "Hi." Then: left; gone!  Wow… really?\n\n' \
        "A heading\nand a line"
    assert _sentences(text) == [
        ('Dr. Smith paid $4.50 at 5 p.m. He said "Hi."', "sentence"),
        ("Then:", "clause"),
        ("left;", "clause"),
        ("gone!", "sentence"),
        ("Wow…", "sentence"),
        ("really?", "paragraph"),
        ("A heading", "sentence"),
        ("and a line", "sentence"),
    ]


def test_sentences_are_split_lazily():
    text = "One. " * 100_000
    first = next(iter(split_sentences(text)))
    assert first.text == "One." and first.end == "sentence"


def test_text_without_punctuation_is_cut_before_g2p():
    text = "word " * 1000
    parts = list(split_sentences(text))
    assert all(len(p.text) <= MAX_SENTENCE for p in parts) and len(parts) == 5
    assert " ".join(p.text for p in parts).split() == text.split()
    assert [p.end for p in parts] == ["word"] * 4 + ["sentence"]


@pytest.mark.parametrize("text", ["", "   \n\n  ", "\n"])
def test_no_sentences_in_blank_text(text):
    assert _sentences(text) == []


def test_glued_tokens_stay_one_word_unless_clause_punctuation_separates_them():
    tokens = [
        ("“", "“", ""), ("Quoted", "kwˈOTᵻd", ""), ("”", "”", " "),
        ("Jones", "ʤˈOnz", ""), ("—", "—", ""), ("and", "ænd", ""), (",", ",", " "),
        ("so", "sˌO", ""),
    ]
    words = group_words(tokens)
    assert [w.text for w in words] == ["“Quoted” ", "Jones—", "and, ", "so"]
    assert [w.end for w in words] == ["word", "clause", "clause", "word"]
    assert "".join(w.phonemes for w in words) == "“kwˈOTᵻd” ʤˈOnz—ænd, sˌO"


def _pack(phonemes, limit):
    return [(p.phonemes, p.end) for p in pack(words_of_phonemes(phonemes), limit)]


def test_a_sentence_that_fits_is_one_chunk():
    assert _pack("hˈI ðˈɛɹ.", 9) == [("hˈI ðˈɛɹ.", "sentence")]


def test_chunks_break_after_clause_punctuation_first():
    # "wˈʌn tˈu, θɹˈi" would fit as well
    phonemes = "wˈʌn tˈu, θɹˈi fˈɔɹ fˈIv"
    assert _pack(phonemes, 16) == [("wˈʌn tˈu,", "clause"), ("θɹˈi fˈɔɹ fˈIv", "sentence")]


def test_a_clause_too_short_to_be_worth_a_chunk_is_not_broken_after():
    # "ə," is under a third of the limit: the cut goes at the last space that fits
    chunks = _pack("ə, bˈi sˈi dˈi ˈi ˈɛf", 12)
    assert chunks == [("ə, bˈi sˈi", "word"), ("dˈi ˈi ˈɛf", "sentence")]


def test_only_a_word_longer_than_a_chunk_is_cut_between_phonemes():
    chunks = _pack("ə ˌɛksˌɛksˈɛksˈɛks bˈi", 7)
    assert chunks == [("ə", "word"), ("ˌɛksˌɛk", "phoneme"), ("sˈɛksˈɛ", "phoneme"),
                      ("ks bˈi", "sentence")]
    # stress marks stay with the vowel after them, length marks with the sound before
    assert _pack("ˈaːˈbːˈcː", 3) == [("ˈaː", "phoneme"), ("ˈbː", "phoneme"), ("ˈcː", "sentence")]


def test_a_cut_word_gives_its_text_to_its_first_piece():
    pieces = pack([Word("Supercalifragilistic ", "sˌupəɹkˌæləfɹˌæʤəlˈɪstɪk ")], 10)
    assert [p.text for p in pieces] == ["Supercalifragilistic", "", ""]
    assert "".join(p.phonemes for p in pieces) == "sˌupəɹkˌæləfɹˌæʤəlˈɪstɪk"


def test_evenly_packed_a_sentence_over_the_limit_does_not_end_in_a_word_or_two():
    phonemes = "ðə hˈɪstəɹi ʌv ðə sˈɪTi ɡˈOz bˈæk nˈɪɹli tˈu θˈWzᵊnd jˈɪɹz."
    greedy = _pack(phonemes, 50)
    assert greedy[-1] == ("θˈWzᵊnd jˈɪɹz.", "sentence")  # 14 of 59 left to the last
    even = [(p.phonemes, p.end) for p in pack_evenly(words_of_phonemes(phonemes), 50)]
    assert len(even) == len(greedy) == 2
    assert even == [("ðə hˈɪstəɹi ʌv ðə sˈɪTi ɡˈOz", "word"), ("bˈæk nˈɪɹli tˈu θˈWzᵊnd jˈɪɹz.", "sentence")]
    # clause punctuation is still preferred, and what fits in one chunk stays one
    assert pack_evenly(words_of_phonemes("wˈʌn tˈu, θɹˈi fˈɔɹ fˈIv"), 16) == pack(
        words_of_phonemes("wˈʌn tˈu, θɹˈi fˈɔɹ fˈIv"), 16)
    assert len(pack_evenly(words_of_phonemes(phonemes), 100)) == 1
    # a word cut between phonemes: the chunks as pack cut them
    cut = words_of_phonemes("ə ˌɛksˌɛksˈɛksˈɛks bˈi")
    assert pack_evenly(cut, 7) == pack(cut, 7)


@pytest.mark.parametrize("limit", [18, 126])
def test_evenly_packed_chunks_are_as_many_and_no_larger(limit):
    for sentence in split_sentences(_document(20_000, seed=1)):
        words = _fake_words(sentence.text)
        greedy, even = pack(words, limit, sentence.end), pack_evenly(words, limit, sentence.end)
        assert len(even) <= len(greedy)
        assert max(size(p.words) for p in even) <= max(size(p.words) for p in greedy)
        assert [w for p in even for w in p.words] == list(words)
        assert even[-1].end == sentence.end


def test_a_first_clause_is_the_words_up_to_the_first_clause_punctuation_that_fit():
    words = words_of_phonemes("ʃˈʊɹ, ˈI kæn hˈɛlp, wɪð ðˈæt.")
    assert first_clause(words, 16) == 1  # "Sure," and not "Sure, I can help,"
    assert first_clause(words, 5) == 1 and first_clause(words, 4) == 0  # "ʃˈʊɹ," is 5
    # no clause punctuation, or only at the end: nothing to cut
    assert first_clause(words_of_phonemes("jˌʊɹ mˈiTɪŋ stˈɑɹts."), 16) == 0
    assert first_clause(words_of_phonemes("ʃˈʊɹ,"), 16) == 0
    late = words_of_phonemes("tˈɜɹn lˈɛft æt ðə nˈɛkst lˈIt, ðɛn kˈip stɹˈAt.")
    assert first_clause(late, 16) == 0 and first_clause(late, 40) == 6


def test_chunk_limit_must_be_positive():
    with pytest.raises(ValueError, match="at least 1 phoneme"):
        pack(words_of_phonemes("ə"), 0)


def test_halving_splits_at_the_word_boundary_nearest_the_middle():
    piece = Piece(tuple(words_of_phonemes("ə bˈi sˈi, dˈi ˈi ˈɛf ʤˈi")), "sentence")
    left, right = split_in_two(piece)
    assert (left.phonemes, left.end) == ("ə bˈi sˈi, dˈi", "word")
    assert (right.phonemes, right.end) == ("ˈi ˈɛf ʤˈi", "sentence")
    one_word = Piece((Word("abc. ", "ˈæbk. "),), "sentence")
    left, right = split_in_two(one_word)
    assert (left.text, left.phonemes, left.end) == ("abc.", "ˈæb", "phoneme")
    assert (right.text, right.phonemes, right.end) == ("", "k.", "sentence")
    assert split_in_two(Piece((Word("a", "ˈæː"),), "sentence")) is None


def _fake_words(sentence):
    # a stand-in G2P: tokens as misaki makes them, phonemes the lower-cased letters
    tokens = [(t, t.lower(), ws) for t, ws in re.findall(r"(\w+|[^\w\s])(\s*)", sentence)]
    return group_words(tokens)


def _document(characters, seed=0):
    rng = random.Random(seed)
    vocabulary = [
        "the", "a", "house", "river", "quickly", "understand", "nevertheless", "I", "walked",
        "extraordinary", "of", "and", "it", "seventeen", "light", "counterproductive",
    ]
    parts, length = [], 0
    while length < characters:
        words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 60))]
        for _ in range(rng.randint(0, 3)):
            words[rng.randrange(len(words))] += ","
        sentence = " ".join(words) + rng.choice([".", "!", "?", ";", ":", "", "\n", ".\n\n"])
        parts.append(sentence)
        length += len(sentence) + 1
    return " ".join(parts)[:characters]


@pytest.mark.parametrize("limit", [18, 126])
def test_100k_characters_fit_and_come_back_whole(limit):
    text = _document(100_000)
    assert len(text) == 100_000
    chunks = [
        piece
        for sentence in split_sentences(text)
        for piece in pack(_fake_words(sentence.text), limit, sentence.end)
    ]
    assert all(0 < size(p.words) <= limit for p in chunks)
    assert all(p.end in PAUSES for p in chunks)
    # no word is cut (none is longer than a chunk) and every word comes back, in order
    assert all(p.end != "phoneme" for p in chunks)
    spoken = [w for p in chunks for w in re.findall(r"\w+", p.text)]
    assert spoken == re.findall(r"\w+", text)
    assert [w for p in chunks for w in p.phonemes.split()] == [
        w for p in chunks for w in p.text.lower().split()
    ]


def test_letters_of_other_scripts_are_dropped_with_a_warning_naming_them():
    with pytest.warns(UserWarning, match=r"not English \(Latin\) script: 'Пвеимрт'"):
        assert drop_other_scripts("Hello Привет мир world.") == "Hello world."
    with pytest.warns(UserWarning, match="你好"):
        assert drop_other_scripts("你好").strip() == ""


def test_latin_letters_digits_and_symbols_are_kept(recwarn):
    text = "Café naïve 4.5% I ❤ NY — “quoted” Ångström"
    assert drop_other_scripts(text) == text
    assert not recwarn.list
