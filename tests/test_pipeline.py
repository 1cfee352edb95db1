"""The whole pipeline on a small-config build: build CLI, Synthesizer, say, validate.

The build has two token and two frame buckets; the same input is synthesized in the
smallest buckets that fit and in larger ones (padding must not change the result), and
compared per stage and end to end with kokoro's PyTorch model (same weights and noise).
"""

from __future__ import annotations

import wave

import numpy as np
import pytest

from kokoro_ext import artifacts
from kokoro_ext.runtime import Synthesizer
from kokoro_ext.say import main as say_main
from kokoro_ext.target import HostCPU, instruction_features, parse_target
from kokoro_ext.validate import validate

from small_build import FRAMES, TOKENS

PHONEMES = "hˈI ðˈɛɹ."  # 9 phonemes: 11 tokens, about 22 frames


@pytest.fixture(scope="module")
def synth(build_dir):
    return Synthesizer(build_dir[0])


def test_build_writes_stages_and_manifest(build_dir):
    out, log = build_dir
    manifest = artifacts.read_manifest(out)
    assert "RANDOM weights" in log[0]
    assert manifest["buckets"] == {"tokens": list(TOKENS), "frames": list(FRAMES)}
    assert len(manifest["stages"]) == 2 + 3 * 2
    for entry in manifest["stages"].values():
        assert artifacts.sha256(out / entry["file"]) == entry["sha256"]
    assert manifest["config_sha256"] == artifacts.sha256(out / artifacts.CONFIG)
    # llvm = this host: its CPU name and exactly its features
    assert manifest["target"] == parse_target("llvm")
    assert manifest["target"]["mcpu"] == HostCPU.detect().name
    assert set(manifest["cpu_features"]) == instruction_features(HostCPU.detect().enabled)
    assert manifest["weights"] == {"random_seed": 0}
    assert all(state != "not applied" for state in manifest["patches"].values())
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".artifacts")]


@pytest.mark.parametrize("buckets", ["smallest", "larger"])
def test_stages_and_waveform_match_kokoro(synth, buckets, parity_report):
    if buckets == "larger":  # same input, padded further
        synth.token_buckets, synth.frame_buckets = [TOKENS[1]], [FRAMES[1]]
    try:
        results = {r.name: r for r in validate(synth, PHONEMES, seed=3)}
        trace = synth.synthesize_phonemes(PHONEMES, seed=3)
    finally:
        synth.token_buckets, synth.frame_buckets = list(TOKENS), list(FRAMES)
    want = (TOKENS[0], FRAMES[0]) if buckets == "smallest" else (TOKENS[1], FRAMES[1])
    assert (trace.token_bucket, trace.frame_bucket) == want
    assert sum(trace.durations) < trace.frame_bucket or buckets == "smallest"
    for name, r in results.items():
        if name.startswith(("text.", "prosody.", "source.", "decoder.")):
            assert r.max_abs <= 1e-4, (name, r)
    assert "durations" not in results
    assert results["waveform vs kokoro"].snr_db >= 40.0
    parity_report(
        f"pipeline, buckets {want}: "
        + "; ".join(
            f"{r.name} {r.max_abs:.1e} ({r.snr_db:.0f} dB{', ' + r.note if r.note else ''})"
            for r in results.values()
        )
    )


def test_padding_does_not_change_the_audio(synth):
    small = synth.synthesize_phonemes(PHONEMES, seed=5)
    synth.token_buckets, synth.frame_buckets = [TOKENS[1]], [FRAMES[1]]
    try:
        large = synth.synthesize_phonemes(PHONEMES, seed=5)
    finally:
        synth.token_buckets, synth.frame_buckets = list(TOKENS), list(FRAMES)
    assert large.frame_bucket > small.frame_bucket
    assert small.audio.shape == large.audio.shape
    assert np.abs(small.audio - large.audio).max() <= 1e-4


def test_say_writes_a_wav(build_dir, tmp_path, capsys):
    wav = tmp_path / "hi.wav"
    assert say_main(["Hi there.", "-o", str(wav), "--artifacts", str(build_dir[0])]) == 0
    with wave.open(str(wav)) as f:
        assert f.getframerate() == 24_000 and f.getnchannels() == 1
        frames = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    assert frames.size % 600 == 0 and frames.size > 0
    assert np.abs(frames).max() > 0
    assert "hˈI ðˈɛɹ." in capsys.readouterr().out


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda s: s.synthesize_phonemes("hˈI " * 20), "more than the largest tokens bucket"),
        (lambda s: s.synthesize_phonemes(PHONEMES, speed=5.0), "speed must be in"),
        (lambda s: s.synthesize_phonemes("   "), "no phonemes to synthesize"),
    ],
)
def test_bad_input_is_named(synth, call, message):
    with pytest.raises(ValueError, match=message):
        call(synth)


def test_not_a_build_directory(tmp_path):
    with pytest.raises(ValueError, match="not a kokoro_ext build"):
        Synthesizer(tmp_path)
