"""The front end in the Synthesizer: languages, explicit pauses, errors (small build)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.say import main as say
from kokoro_ext.text.chunking import pause_after
from kokoro_ext.text.frontend import resolve_language
from kokoro_ext.text.languages import LANGUAGES, language, language_of_voice
from kokoro_ext.run.wav import SAMPLE_RATE


@pytest.mark.parametrize(
    "code, name",
    [("a", "American English"), ("en-gb", "British English"), ("es", "Spanish"),
     ("F", "French"), ("hi", "Hindi"), ("it", "Italian"), ("ja", "Japanese"),
     ("pt-br", "Brazilian Portuguese"), ("zh", "Mandarin Chinese")],
)  # fmt: skip
def test_language_codes_and_aliases(code, name):
    assert language(code).name == name


def test_unknown_language_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown language 'de'.*e Spanish"):
        language("de")
    with pytest.raises(TypeError, match="lang must be a str"):
        language(5)


@pytest.mark.parametrize(
    "lang, voice, code",
    [(None, "ef_dora", "e"), (None, "jf_alpha", "j"), (None, "/x/zm_yunxi.bin", "z"),
     (None, "bm_george", "b"), ("f", "af_heart", "f"), (None, None, "a"),
     (None, "my_voice.npy", "a")],
)  # fmt: skip
def test_language_from_lang_else_voice_prefix(lang, voice, code):
    assert resolve_language(lang, voice).code == code


def test_every_voice_prefix_is_a_language():
    assert {language_of_voice(f"{c}f_x").code for c in LANGUAGES} == set(LANGUAGES)


def test_pause_after_takes_breaks_and_seconds():
    assert pause_after("sentence") == 0.3 and pause_after(0.75) == 0.75


@pytest.fixture(scope="module")
def synth(build_dir):
    return Synthesizer(build_dir[0])


def test_ssml_break_is_silence_of_that_length(synth):
    chunks = list(synth.stream('<speak>Hello <break time="700ms"/> world.</speak>'))
    assert [c.text for c in chunks] == ["Hello", "world."]
    assert chunks[1].pause == pytest.approx(0.7)
    audio = np.concatenate([c.joined() for c in chunks])
    start = len(chunks[0].audio)
    assert np.all(audio[start : start + round(0.7 * SAMPLE_RATE)] == 0)
    assert len(audio) == len(chunks[0].audio) + round(0.7 * SAMPLE_RATE) + len(chunks[1].audio)


def test_malformed_ssml_fails_before_the_first_chunk(synth):
    with pytest.raises(ValueError, match="SSML line 1, column 8: <b> is not supported"):
        synth.stream("<speak><b>x</b></speak>")


def test_lang_picks_the_g2p(build_dir):
    spanish = Synthesizer(build_dir[0], lang="es")
    assert spanish.phonemize("hola") == "ˈola"
    # without lang, the voice's name decides; the build's voice speaks American English
    assert Synthesizer(build_dir[0]).phonemize("hola") != "ˈola"
    with pytest.raises(ValueError, match="unknown language"):
        Synthesizer(build_dir[0], lang="xx")


def test_say_takes_lang(build_dir, tmp_path, capsys):
    out = tmp_path / "hola.wav"
    assert say(["--artifacts", str(build_dir[0]), "--lang", "e", "-o", str(out), "--show-phonemes", "Hola."]) == 0
    assert "ˈola." in capsys.readouterr().out and out.stat().st_size > 44
    assert say(["--artifacts", str(build_dir[0]), "--lang", "klingon", "Hi."]) == 2
    assert "unknown language 'klingon'" in capsys.readouterr().err


def test_markdown_is_read_unless_switched_off(synth):
    assert [c.text for c in synth.stream("# Steps\n- **Mix** it\n- Bake")] == [
        "Steps.", "Mix it.", "Bake.",
    ]  # fmt: skip
    assert synth.phonemize("**Hello** world.") == synth.phonemize("Hello world.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "#" has no reading: dropped with a warning
        literal = list(synth.stream("# Use **bold**", markdown=False))
        assert "ˈæstəɹ" in synth.phonemize("Use **bold**", markdown=False)
    assert "**" in literal[0].text and "ˈæstəɹ" in "".join(c.phonemes for c in literal)
