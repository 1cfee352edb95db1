"""Long text on the small build: Synthesizer.stream / synthesize in chunks, say --stream."""

from __future__ import annotations

import io
import itertools
import wave

import numpy as np
import pytest

from kokoro_ext.run.synthesizer import SAMPLE_RATE, Synthesizer, join
from kokoro_ext.run.say import main as say_main
from kokoro_ext.text import PAUSES, phonemes_to_ids
from kokoro_ext.text.chunking import pack, pack_evenly, split_sentences

from small_build import FRAMES, TOKENS, limit

TEXT = "Hello there. How are you today, my old friend? Fine; thanks.\n\nA new paragraph."


@pytest.fixture(scope="module")
def synth(build_dir):
    return limit(Synthesizer(build_dir[0]))


@pytest.fixture(scope="module")
def chunks(synth):
    return list(synth.stream(TEXT, seed=7))


def test_chunks_fit_the_limits_and_keep_every_word(synth, chunks):
    assert synth.chunk_limit == TOKENS - 2
    assert len(chunks) > len(list(split_sentences(TEXT)))  # sentences had to be split
    assert all(len(c.phonemes) <= synth.chunk_limit for c in chunks)
    # exact shapes: no padding on either axis
    assert all(c.trace.tokens == len(phonemes_to_ids(c.phonemes, synth.vocab)) for c in chunks)
    assert all(c.trace.frames == c.trace.durations.sum() <= FRAMES for c in chunks)
    assert " ".join(c.text for c in chunks).split() == TEXT.split()
    assert all(np.isfinite(c.audio).all() and c.audio.size > 0 for c in chunks)


def test_chunk_i_is_synthesize_phonemes_with_seed_plus_i(synth, chunks):
    for i, chunk in enumerate(chunks):
        assert (chunk.index, chunk.seed) == (i, 7 + i)
        again = synth.synthesize_phonemes(chunk.phonemes, seed=7 + i).audio
        assert np.array_equal(chunk.audio, again), i


def test_pauses_follow_how_the_previous_chunk_ended(chunks):
    assert chunks[0].pause == 0.0
    after = {c.text: n.pause for c, n in zip(chunks, chunks[1:])}

    def pause_after(suffix):
        return after[next(t for t in after if t.endswith(suffix))]

    assert pause_after("there.") == PAUSES["sentence"]
    assert pause_after("today,") == PAUSES["clause"]
    assert pause_after("Fine;") == PAUSES["clause"]
    assert pause_after("thanks.") == PAUSES["paragraph"]


def test_synthesize_is_the_chunks_joined_with_their_pauses(synth, chunks):
    audio = synth.synthesize(TEXT, seed=7)
    assert np.array_equal(audio, join(chunks))
    pauses = sum(round(c.pause * SAMPLE_RATE) for c in chunks)
    assert audio.size == sum(c.audio.size for c in chunks) + pauses
    first = chunks[0].audio.size
    silence = round(chunks[1].pause * SAMPLE_RATE)
    assert not audio[first : first + silence].any()


def test_short_text_is_one_chunk_as_before(synth):
    assert np.array_equal(
        synth.synthesize("Hi there.", seed=3), synth.synthesize_phonemes("hˈI ðˈɛɹ.", seed=3).audio
    )


def _document(characters):
    sentences = [
        "The quick brown fox jumps over the lazy dog.",
        "Nevertheless, the river kept on running, quietly and without end!",
        "Is this the real life; is this just fantasy?",
    ]
    text = " ".join(itertools.islice(itertools.cycle(sentences), characters // 40))
    return text[:characters]


def test_first_chunks_of_100k_characters_come_before_the_rest_is_phonemized(synth, monkeypatch):
    text = _document(100_000)
    assert len(text) == 100_000
    calls = []
    g2p = synth._pipeline().g2p  # the G2P pass the pipeline calls
    original = g2p.words
    monkeypatch.setattr(g2p, "words", lambda t: calls.append(t) or original(t))
    stream = synth.stream(text, seed=0)
    first = next(stream)
    assert len(calls) == 1 and calls[0].text == "The quick brown fox jumps over the lazy dog."
    assert first.text and np.isfinite(first.audio).all()
    rest = list(itertools.islice(stream, 4))
    assert len(rest) == 4 and len(calls) <= 3
    spoken = " ".join(c.text for c in [first, *rest]).split()
    assert spoken == text.split()[: len(spoken)]


def test_a_chunk_too_long_for_the_frame_limit_is_halved(synth):
    # at half speed every token lasts twice as long: full chunks overflow 48 frames
    text = "Nevertheless, the river kept on running quietly."
    words = synth._pipeline().words(text)
    pieces = pack(words, synth.chunk_limit)
    chunks = list(synth.stream(text, speed=0.5))
    assert len(chunks) > len(pieces)
    assert all(c.trace.frames <= FRAMES for c in chunks)
    assert "".join(c.phonemes for c in chunks).replace(" ", "") == "".join(
        p.phonemes for p in pieces
    ).replace(" ", "")
    assert " ".join(c.text for c in chunks).split() == text.split()


def test_chunk_limit_as_a_number_and_as_a_function_of_the_chunk_index(synth, chunks):
    # the build's limit is the default, and a number is a limit for every chunk
    assert [c.phonemes for c in synth.stream(TEXT, seed=7, chunk_limit=TOKENS - 2)] == [
        c.phonemes for c in chunks
    ]
    small = list(synth.stream(TEXT, seed=7, chunk_limit=6))
    assert len(small) > len(chunks) and all(len(c.phonemes) <= 6 for c in small)
    # a function is asked for each chunk's limit just before the chunk is cut: a short
    # first chunk, then the rest of its sentence packed again with the larger limit
    asked = []

    def limit(index):
        asked.append(index)
        return 4 if index == 0 else 100  # more than the build takes: its limit then

    text = "How are you today, my old friend?"
    got = list(synth.stream(text, chunk_limit=limit))
    assert len(got[0].phonemes) <= 4
    assert all(len(c.phonemes) <= synth.chunk_limit for c in got)
    words = synth._pipeline().words(text)
    first = next(n for n in range(1, len(words) + 1)
                 if "".join(w.phonemes for w in words[:n]).strip() == got[0].phonemes)
    rest = pack_evenly(words[first:], synth.chunk_limit)
    assert [c.phonemes for c in got[1:]] == [p.phonemes for p in rest]
    assert sorted(set(asked)) == list(range(len(got)))
    assert " ".join(c.text for c in got).split() == text.split()
    with pytest.raises(ValueError, match="chunk_limit"):
        synth.stream(TEXT, chunk_limit=0)


def test_a_first_chunk_cut_short_ends_at_its_sentences_first_clause(synth):
    # "Sure," alone (5 phonemes), not as many words as the limit takes ("Sure, I can")
    text = "Sure, I can help with that."
    first = min(12, synth.chunk_limit - 1)
    got = list(synth.stream(text, chunk_limit=lambda i: first if i == 0 else 100))
    assert got[0].text == "Sure," and got[0].phonemes == "ʃˈʊɹ,"
    words = synth._pipeline().words(text)
    assert [c.phonemes for c in got[1:]] == [p.phonemes for p in pack_evenly(words[1:], synth.chunk_limit)]
    # a first clause the limit does not take: cut where the limit falls (pack_evenly)
    late = "Turn left at the next light, then keep straight."
    got = list(synth.stream(late, chunk_limit=lambda i: first if i == 0 else 100))
    assert got[0].phonemes == pack_evenly(synth._pipeline().words(late), first)[0].phonemes
    assert not got[0].text.endswith(",")
    # at the build's limit (no first chunk cut short) the sentence is packed evenly
    assert [c.phonemes for c in synth.stream(text)] == [
        p.phonemes for p in pack_evenly(words, synth.chunk_limit)
    ]


def _wav_frames(path):
    with wave.open(str(path)) as f:
        assert f.getframerate() == SAMPLE_RATE and f.getnchannels() == 1
        return np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")


def test_say_streams_a_document_from_a_file(build_dir, tmp_path, capsys):
    chunks = list(Synthesizer(build_dir[0]).stream(TEXT, seed=7))  # say's limits
    document = tmp_path / "doc.txt"
    document.write_text(TEXT, encoding="utf-8")
    wav = tmp_path / "doc.wav"
    argv = ["-f", str(document), "--stream", "-o", str(wav), "--artifacts", str(build_dir[0])]
    assert say_main([*argv, "--seed", "7", "--show-phonemes"]) == 0
    assert capsys.readouterr().out.splitlines() == [c.phonemes for c in chunks]
    expected = (np.clip(join(chunks), -1, 1) * 32767).astype("<i2")
    assert np.array_equal(_wav_frames(wav), expected)


def test_say_reads_stdin(build_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi there."))
    wav = tmp_path / "stdin.wav"
    assert say_main(["-", "-o", str(wav), "--artifacts", str(build_dir[0]), "--show-phonemes"]) == 0
    assert "hˈI ðˈɛɹ." in capsys.readouterr().out
    assert _wav_frames(wav).size > 0


def test_say_wants_one_source_of_text(build_dir, tmp_path, capsys):
    assert say_main(["--artifacts", str(build_dir[0])]) == 2
    assert say_main(["Hi", "-f", str(tmp_path / "x.txt")]) == 2
    assert say_main(["-f", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert "either as an argument" in err and "cannot read" in err
