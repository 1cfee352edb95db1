"""SourceStage and DecoderStage against kokoro's Decoder, padded and compiled.

kokoro's noise is reproduced (kokoro_ext.tools.reference.source_noise).  The one non-numerical
difference, source phases on atan2's branch cut, is counted and reported; the decoder is
checked on the spectrum kokoro itself read, and end to end with the flips resolved.
"""

from __future__ import annotations

import pytest
import torch

from kokoro_ext.build.compiler import compile_module
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.export import DecoderStage, SourceStage
from kokoro_ext.build.model import build_model, random_voice, small_config
from kokoro_ext.tools.reference import kokoro_decoder, source_noise
from kokoro_ext.build.stages import STAGES

FRAMES = 8  # valid frames; buckets are FRAMES or longer
SEED = 11
SAMPLES = 600 * FRAMES


@pytest.fixture(scope="module")
def model():
    return build_model(small_config(), seed=0)


@pytest.fixture(scope="module")
def valid_inputs():
    gen = torch.Generator().manual_seed(1)
    asr = torch.randn(1, 512, FRAMES, generator=gen)
    F0 = 80 + 150 * torch.rand(1, 2 * FRAMES, generator=gen)
    F0[:, :3] = 0.0  # unvoiced start
    N = torch.randn(1, 2 * FRAMES, generator=gen)
    style = random_voice()[7][:, :128]
    return asr, F0, N, style


def padded(valid_inputs, bucket):
    """The valid inputs padded to ``bucket`` frames with garbage that must not leak."""
    asr, F0, N, style = valid_inputs
    pad = bucket - FRAMES
    noise = torch.full((1, 600 * bucket, 9), 5.0)
    noise[:, :SAMPLES] = source_noise(SEED, 1, SAMPLES)
    return dict(
        asr=torch.nn.functional.pad(asr, (0, pad), value=50.0),
        F0=torch.nn.functional.pad(F0, (0, 2 * pad), value=300.0),
        N=torch.nn.functional.pad(N, (0, 2 * pad), value=7.0),
        lengths=torch.tensor([FRAMES]),
        style=style,
        noise=noise,
    )


def complex_error(spectrum, reference):
    """Largest |m e^{ip} - m_ref e^{ip_ref}| over the reference's frames: phase-cut free."""
    bins = spectrum.shape[1] // 2
    frames = reference.shape[-1]
    m, p = spectrum[:, :bins, :frames], spectrum[:, bins:, :frames]
    mr, pr = reference[:, :bins], reference[:, bins:]
    return float((torch.polar(m, p) - torch.polar(mr, pr)).abs().max())


def snr_db(got, want):
    return float(20 * torch.log10(want.norm() / (got - want).norm()))


@pytest.mark.parametrize("bucket", [FRAMES, 12, 20])
def test_padded_stages_equal_unpadded_kokoro(model, valid_inputs, bucket, parity_report):
    x = padded(valid_inputs, bucket)
    asr, F0, N, style = valid_inputs
    with torch.no_grad():
        spectrum = SourceStage(model)(x["F0"], x["lengths"], x["noise"])
        ref = kokoro_decoder(model, asr, F0, N, style, SEED)
        audio = DecoderStage(model)(
            x["asr"], x["F0"], x["N"], x["lengths"], style, pad_frames(ref.spectrum, spectrum)
        )
    frames = ref.spectrum.shape[-1]
    assert complex_error(spectrum, ref.spectrum) <= 1e-4
    assert not spectrum[..., frames:].any()
    assert (audio[:, :SAMPLES] - ref.audio).abs().max() <= 1e-4
    assert not audio[:, SAMPLES:].any()
    parity_report(
        f"eager bucket {bucket}: decoder max abs {float((audio[:, :SAMPLES] - ref.audio).abs().max()):.2e}, "
        f"source phase branch-cut flips vs kokoro {ref.phase_flips} of {ref.spectrum.numel() // 2}"
    )


def pad_frames(spectrum, like):
    """kokoro's spectrum (valid frames only) padded with garbage to ``like``'s frames."""
    return torch.nn.functional.pad(spectrum, (0, like.shape[-1] - spectrum.shape[-1]), value=3.0)


@pytest.fixture(scope="module")
def compiled(model):
    return {
        (name, bucket): StageRunner(
            compile_module(
                STAGES[name].module(model), STAGES[name].example(model, bucket)
            ).executable
        )
        for name in ("source", "decoder")
        for bucket in (FRAMES, 12)
    }


@pytest.mark.parametrize("bucket", [FRAMES, 12])
def test_compiled_stages_match_kokoro(model, valid_inputs, compiled, bucket, parity_report):
    x = padded(valid_inputs, bucket)
    asr, F0, N, style = valid_inputs
    (spectrum,) = compiled["source", bucket](x["F0"], x["lengths"], x["noise"])
    spectrum = torch.from_numpy(spectrum)
    ref = kokoro_decoder(model, asr, F0, N, style, SEED)
    # Source stage on the reference input: numerically equal up to the phase cut.
    assert complex_error(spectrum, ref.spectrum) <= 1e-4
    assert not spectrum[..., ref.spectrum.shape[-1] :].any()
    # Decoder stage on the spectrum kokoro read.
    decoder_args = [x["asr"], x["F0"], x["N"], x["lengths"], style]
    (audio,) = compiled["decoder", bucket](*decoder_args, pad_frames(ref.spectrum, spectrum))
    audio = torch.from_numpy(audio)
    assert (audio[:, :SAMPLES] - ref.audio).abs().max() <= 1e-4
    assert not audio[:, SAMPLES:].any()
    # Both stages chained: against kokoro with its branch-cut points read as ours.
    (chained,) = compiled["decoder", bucket](*decoder_args, spectrum)
    chained = torch.from_numpy(chained)
    bins = spectrum.shape[1] // 2
    resolved = kokoro_decoder(model, asr, F0, N, style, SEED, phase=spectrum[:, bins:])
    raw_snr = snr_db(chained[:, :SAMPLES], ref.audio)
    snr = snr_db(chained[:, :SAMPLES], resolved.audio)
    assert snr >= 40.0
    parity_report(
        f"compiled bucket {bucket}: decoder on kokoro's spectrum max abs "
        f"{float((audio[:, :SAMPLES] - ref.audio).abs().max()):.2e}; source+decoder SNR "
        f"{snr:.1f} dB with {resolved.phase_flips} branch-cut flips resolved, {raw_snr:.1f} dB raw"
    )
