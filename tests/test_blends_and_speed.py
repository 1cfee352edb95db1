"""Voice blends through the Synthesizer and say, and the ends of OpenAI's speed range, on
the small build."""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_ext.run import cache
from kokoro_ext.run.errors import BadBlend, TooLong, UnknownVoice
from kokoro_ext.run.manifest import Limits
from kokoro_ext.run.pipeline import LengthOverflow
from kokoro_ext.run.say import main as say_main
from kokoro_ext.run.synthesizer import SPEED_RANGE, Synthesizer
from kokoro_ext.run.voices import NamedVoice
from kokoro_ext.text.chunking import pack

from small_build import FRAMES, limit

PHONEMES = "hˈI ðˈɛɹ."
TEXT = "Nevertheless, the river kept on running quietly."


@pytest.fixture(scope="module")
def synth(build_dir):
    return limit(Synthesizer(build_dir[0]))


@pytest.fixture
def voices(build_dir, tmp_path, monkeypatch):
    """A voices cache with two American voices (the build's and another) and a British one."""
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    directory = cache.voices_dir()
    directory.mkdir(parents=True)
    base = np.load(build_dir[0] / "voice.npy").astype("<f4")
    other = (base * 0.5 + np.random.default_rng(0).normal(0, 0.05, base.shape)).astype("<f4")
    base.tofile(directory / "af_one.bin")
    other.tofile(directory / "af_two.bin")
    other.tofile(directory / "bf_three.bin")
    return base, other


def test_a_blend_speaks_as_its_weighted_mean_pack(synth, voices):
    base, other = voices
    mean = ((2 * base.astype(np.float64) + other) / 3).astype(np.float32)
    blended = synth.synthesize("Hi there.", voice="af_one(2)+af_two(1)")
    assert np.array_equal(blended, synth.synthesize("Hi there.", voice=mean))
    assert not np.array_equal(blended, synth.synthesize("Hi there.", voice="af_one"))
    named = NamedVoice(mean, "af_one(0.6667)+af_two(0.3333)", "a")
    assert np.array_equal(blended, synth.synthesize("Hi there.", voice=named))


def test_a_blend_reads_the_text_in_its_voices_language(synth, voices):
    assert synth._pipeline("af_one+af_two").code == "a"
    assert synth._pipeline("bf_three(3)+bf_x").code == "b"
    assert synth._pipeline(NamedVoice(voices[0], "ef_x", "e")).code == "e"
    assert synth._pipeline(NamedVoice(voices[0], "xx_custom", None)).code == "a"  # the default


@pytest.mark.parametrize(
    "voice, error, words",
    [
        ("af_one+bf_three", BadBlend, "af_one is American English, bf_three is British English"),
        ("af_one(0)+af_two", BadBlend, "must be a positive number"),
        ("af_one+af_nobody", UnknownVoice, "no voice 'af_nobody'"),
        ("af_one+", BadBlend, "empty part"),
    ],
)
def test_a_bad_blend_is_refused_at_the_call(synth, voices, voice, error, words):
    with pytest.raises(error, match=words):
        synth.stream("Hi.", voice=voice)  # before any chunk is asked for
    with pytest.raises(error, match=words):
        synth.synthesize_phonemes(PHONEMES, voice=voice)


def test_say_takes_a_blend(build_dir, voices, tmp_path, capsys):
    out = tmp_path / "blend.wav"
    argv = ["Hi.", "-o", str(out), "--artifacts", str(build_dir[0])]
    assert say_main([*argv, "--voice", "af_one(2)+af_two"]) == 0 and out.stat().st_size > 44
    assert say_main([*argv, "--voice", "af_one+bf_three"]) == 2
    assert "error: voice blend 'af_one+bf_three' mixes languages" in capsys.readouterr().err


def test_the_speed_range_is_openais():
    assert SPEED_RANGE == (0.25, 4.0)


def test_at_the_fastest_every_token_keeps_a_frame(synth):
    fast, plain = (synth.synthesize_phonemes(PHONEMES, speed=s) for s in (4.0, 1.0))
    raw = fast.stages["text"]["duration"][0]
    assert fast.durations.min() >= 1 and fast.frames >= fast.tokens
    assert np.array_equal(fast.durations, np.maximum(np.round(raw / 4.0), 1))
    assert fast.frames <= plain.frames and np.isfinite(fast.audio).all()


def test_at_the_slowest_chunks_are_halved_to_fit_the_frame_limit(synth):
    words = synth._pipeline().words(TEXT)
    pieces = pack(words, synth.chunk_limit)
    slow = list(synth.stream(TEXT, speed=0.25))
    assert len(slow) > len(list(synth.stream(TEXT, speed=0.5))) > len(pieces)
    assert all(c.trace.frames <= FRAMES for c in slow)
    assert all(np.isfinite(c.audio).all() for c in slow)
    assert "".join(c.phonemes for c in slow).replace(" ", "") == "".join(
        p.phonemes for p in pieces
    ).replace(" ", "")
    with pytest.raises(LengthOverflow, match="frames"):  # one call does not split
        synth.synthesize_phonemes("".join(p.phonemes for p in pieces[:1]), speed=0.25)


def test_what_cannot_fit_even_halved_is_refused_clearly(build_dir):
    tight = Synthesizer(build_dir[0])
    tight.limits = Limits(tokens=20, frames=3)  # less than one phoneme at a quarter speed
    with pytest.raises(TooLong, match="cannot be cut shorter") as caught:
        tight.synthesize("Hi.", speed=0.25)
    assert caught.value.param == "input"
