"""Bad input on the small build: a clear error or a documented safe result, never NaN."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kokoro_ext.run.pipeline import NonFiniteOutput
from kokoro_ext.run.synthesizer import Synthesizer

PHONEMES = "hˈI ðˈɛɹ."


@pytest.fixture(scope="module")
def synth(build_dir):
    return Synthesizer(build_dir[0])


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_empty_text_is_refused_at_the_call(synth, text):
    with pytest.raises(ValueError, match="empty or only whitespace"):
        synth.stream(text)  # before any chunk is asked for
    with pytest.raises(ValueError, match="empty or only whitespace"):
        synth.synthesize(text)


def test_text_must_be_a_string(synth):
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        synth.synthesize(b"hello")


@pytest.mark.parametrize("text", ["!!! ...", "???", "— … ,", "“”"])
def test_punctuation_only_has_nothing_to_say(synth, text):
    with pytest.raises(ValueError, match="nothing to say in English"):
        synth.synthesize(text)


@pytest.mark.parametrize("text", ["Привет мир", "你好世界", "Ελληνικά."])
def test_other_scripts_alone_have_nothing_to_say(synth, text):
    with pytest.warns(UserWarning, match="not English \\(Latin\\) script"):
        with pytest.raises(ValueError, match="nothing to say in English"):
            synth.synthesize(text)


def test_other_scripts_are_dropped_from_english(synth):
    with pytest.warns(UserWarning, match="'Пвеирт'"):
        chunks = list(synth.stream("Hi Привет there."))
    assert [c.text for c in chunks] == ["Hi there."]
    assert np.array_equal(chunks[0].audio, synth.synthesize("Hi there."))


def test_text_without_a_pronunciation_is_dropped_with_a_warning(synth):
    # "%" is read ("percent", kokoro_ext.text.normalize); "☂" has no reading
    with pytest.warns(UserWarning, match="no pronunciation: '☂'"):
        audio = synth.synthesize("Up 4.5% today ☂.")
    assert audio.size and np.isfinite(audio).all()


@pytest.mark.parametrize(
    "text", ["I ❤ NY 🙂", "Café naïve, 123 and 4.5!", "Zyxquorb.", "x" * 8]
)
def test_odd_but_english_input_gives_finite_audio(synth, text):
    audio = synth.synthesize(text)
    assert audio.dtype == np.float32 and audio.size > 0 and np.isfinite(audio).all()


@pytest.mark.parametrize("speed", [float("nan"), 0.249, 4.01, float("inf"), "fast", None, 10**400])
def test_speed_outside_the_range_is_refused(synth, speed):
    with pytest.raises(ValueError, match=r"speed must be in \[0.25, 4.0\]"):
        synth.synthesize_phonemes(PHONEMES, speed=speed)
    with pytest.raises(ValueError, match=r"speed must be in \[0.25, 4.0\]"):
        synth.stream("Hi.", speed=speed)


@pytest.mark.parametrize("speed", [0.25, 4.0])
def test_speed_at_the_ends_of_the_range_works(synth, speed):
    audio = synth.synthesize("Hi there.", speed=speed)  # chunked: slow speech is long
    assert audio.size and np.isfinite(audio).all()


@pytest.mark.parametrize(
    "voice", [np.zeros((510, 256)), np.zeros((511, 1, 256)), torch.zeros(1, 256)]
)
def test_voice_of_the_wrong_shape_names_the_expected_one(synth, voice):
    with pytest.raises(ValueError, match=r"must have shape \[510, 1, 256\]"):
        synth.synthesize_phonemes(PHONEMES, voice=voice)


def test_voice_with_nan_is_refused(synth):
    voice = synth.voice.copy()
    voice[3, 0, 7] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        synth.synthesize("Hi.", voice=voice)


def test_voice_files_are_checked(synth, tmp_path):
    pt, npy = tmp_path / "bad.pt", tmp_path / "bad.npy"
    torch.save(torch.zeros(510, 256), pt)
    np.save(npy, np.zeros((510, 256), np.float32))
    with pytest.raises(ValueError, match=r"bad.pt must have shape \[510, 1, 256\]"):
        synth.synthesize_phonemes(PHONEMES, voice=pt)
    with pytest.raises(ValueError, match=r"bad.npy must have shape \[510, 1, 256\]"):
        synth.synthesize_phonemes(PHONEMES, voice=npy)
    good = tmp_path / "good.npy"
    np.save(good, synth.voice)
    assert np.array_equal(
        synth.synthesize_phonemes(PHONEMES, voice=good).audio,
        synth.synthesize_phonemes(PHONEMES).audio,
    )


@pytest.mark.parametrize("stage", ["text", "prosody", "source", "decoder"])
def test_a_stage_returning_nan_is_named(synth, monkeypatch, stage):
    real = synth._stage

    def broken(name):
        run = real(name)
        if name != stage:
            return run

        def poisoned(**inputs):
            outputs = {k: o.copy() for k, o in run(**inputs).items()}
            next(iter(outputs.values()))[...] = np.nan
            return outputs

        return poisoned

    monkeypatch.setattr(synth, "_stage", broken)
    with pytest.raises(NonFiniteOutput, match=f"the {stage} stage returned non-finite"):
        synth.synthesize("Hi there.")


def test_voice_file_with_nan_is_refused(synth, tmp_path):
    voice = torch.from_numpy(synth.voice.copy())
    voice[3, 0, 7] = float("nan")
    path = tmp_path / "nan.pt"
    torch.save(voice, path)
    with pytest.raises(ValueError, match="nan.pt holds NaN or Inf"):
        synth.synthesize_phonemes(PHONEMES, voice=path)
