"""The whole pipeline on a small-config build: build CLI, Synthesizer, say, validate.

The build has one library per stage for every length; inputs of two lengths are
synthesized at their own lengths and compared per stage and end to end with kokoro's
PyTorch model (same weights and noise).
"""

from __future__ import annotations

import wave

import numpy as np
import pytest

from kokoro_ext.run import artifacts
from kokoro_ext.run.manifest import Limits, Source
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.build.stages import MAX_FRAMES, MAX_TOKENS, STAGES
from kokoro_ext.text import phonemes_to_ids
from kokoro_ext.run.say import main as say_main
from kokoro_ext.build.target import instruction_features, llvm_host, parse_target
from kokoro_ext.tools.validate import float32_bound_failures, verdict, validate

from small_build import limit

PHONEMES = "hˈI ðˈɛɹ."  # 9 phonemes: 11 tokens, about 22 frames
LONGER = "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps."  # lengths no other test uses


@pytest.fixture(scope="module")
def synth(build_dir):
    return Synthesizer(build_dir[0])


def test_build_writes_one_library_per_stage_and_its_weights(build_dir):
    out, log = build_dir
    manifest = artifacts.read_manifest(out)
    assert "RANDOM weights" in log[0]
    assert manifest.limits == Limits(tokens=MAX_TOKENS, frames=MAX_FRAMES)
    assert sorted(manifest.stages) == sorted(STAGES)
    assert sorted(p.name for p in out.glob("*.so")) == sorted(f"{s}.so" for s in STAGES)
    for name, entry in manifest.stages.items():
        assert entry.file == artifacts.stage_file(name)
        assert artifacts.sha256(out / entry.file) == entry.sha256
        weights = out / entry.weights.file
        assert artifacts.sha256(weights) == entry.weights.sha256
        assert weights.stat().st_size == entry.weights.bytes
        assert entry.signature.input_names == STAGES[name].inputs
        assert entry.signature.output_names == STAGES[name].outputs
    # the libraries hold code, the weights files the weights: each stored once
    code = sum((out / e.file).stat().st_size for e in manifest.stages.values())
    assert code < sum(e.weights.bytes for e in manifest.stages.values()) / 10
    assert manifest.config_sha256 == artifacts.sha256(out / artifacts.CONFIG)
    # llvm = this host: its CPU name and exactly its features
    assert manifest.target == parse_target("llvm")
    assert manifest.target["mcpu"] == llvm_host().name
    assert set(manifest.cpu_features) == instruction_features(llvm_host().enabled)
    assert manifest.weights == Source(random_seed=0)
    assert all(state != "not applied" for state in manifest.patches.values())
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".artifacts")]
    # one line per stage; the compiler's warnings went to the log, not to the terminal
    assert sum(line.startswith("[") for line in log) == len(STAGES)
    assert (out / artifacts.LOG).is_file()


@pytest.mark.parametrize("phonemes", [PHONEMES, LONGER])
def test_stages_and_waveform_match_kokoro(synth, phonemes, parity_report):
    results = {r.name: r for r in validate(synth, phonemes, seed=3)}
    trace = synth.synthesize_phonemes(phonemes, seed=3)
    # one library per stage runs each input at its own length: no padding
    assert trace.tokens == len(phonemes_to_ids(phonemes, synth.vocab))
    assert trace.frames == trace.durations.sum()
    assert trace.stages["decoder"]["audio"].shape == (1, 600 * trace.frames)
    for name, r in results.items():
        if name.startswith(("text.", "prosody.", "source.", "decoder.")):
            assert r.max_abs <= 1e-4, (name, r)
    # no further from exact (float64) arithmetic than PyTorch's float32 is, but for
    # rounding at the scale of the output's own float32 resolution; waveform >= 40 dB
    assert float32_bound_failures(list(results.values())) == []
    assert verdict(synth.manifest.weight_dtype, list(results.values()))[0]
    assert "durations" not in results
    parity_report(
        f"pipeline, {trace.tokens} tokens, {trace.frames} frames: "
        + "; ".join(
            f"{r.name} {r.max_abs:.1e} ({r.snr_db:.0f} dB{', ' + r.note if r.note else ''})"
            for r in results.values()
        )
    )


def test_say_writes_a_wav(build_dir, tmp_path, capsys):
    wav = tmp_path / "hi.wav"
    assert say_main(["Hi there.", "-o", str(wav), "--artifacts", str(build_dir[0]), "--show-phonemes"]) == 0
    with wave.open(str(wav)) as f:
        assert f.getframerate() == 24_000 and f.getnchannels() == 1
        frames = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    assert frames.size % 600 == 0 and frames.size > 0
    assert np.abs(frames).max() > 0
    assert "hˈI ðˈɛɹ." in capsys.readouterr().out


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda s: limit(Synthesizer(s.directory)).synthesize_phonemes("hˈI " * 20), "more than one call takes"),
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


def test_validate_applies_the_bound_of_the_builds_weights():
    from kokoro_ext.tools.validate import Comparison

    ok = Comparison("decoder.audio", 1e-6, 100.0, build_vs_f64=2e-6, torch_vs_f64=1e-6)
    far = Comparison("prosody.F0", 1e-3, 60.0, build_vs_f64=5e-4, torch_vs_f64=1e-4)
    quiet = Comparison("waveform vs kokoro", 1e-2, 31.0)
    assert verdict("auto", [ok]) == (True, verdict("float32", [ok])[1])
    passed, summary = verdict("auto", [ok, far, quiet])
    assert not passed
    assert "prosody.F0: 5.00e-04 from float64" in summary and "31.0 dB, bound 40 dB" in summary
    assert "decoder.audio" not in summary
    passed, summary = verdict("int8", [far, quiet])  # lossy weights: judged by their speech
    assert passed and "word error rate" in summary
