"""Compare a build with PyTorch: ``python -m kokoro_ext.validate [--artifacts DIR] [TEXT]``.

Runs the compiled pipeline and, on exactly the inputs each compiled stage received, the
same stage in PyTorch; then kokoro's own ``forward_with_tokens`` with the build's weights,
voice and the same noise.  Prints max-abs error and SNR per stage and for the waveform,
and the number of source-phase points on atan2's branch cut (pi against -pi), which are
not numerical error and are resolved before the waveform SNR is taken (also shown raw).

Each stage output is also compared with the same PyTorch stage run in float64 on the same
inputs, for both the build and PyTorch's float32: where float32 itself cannot resolve a
value to the max-abs shown (a harmonic phase of thousands of radians, F0 in hundreds of
Hz), the two float64 columns show whether the build is any further from exact arithmetic
than kokoro's own float32 computation.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from kokoro_ext.build import environment
from kokoro_ext.build.model import build_model
from kokoro_ext.run.pipeline import synthesize_ids, voice_style
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.tools.engines import torch_provider
from kokoro_ext.tools.reference import kokoro_synthesize
from kokoro_ext.text import phonemes_to_ids


@dataclass
class Comparison:
    """One output compared with its PyTorch reference."""

    name: str
    max_abs: float
    snr_db: float
    note: str = ""
    #: max-abs from the float64 run of the same stage: the build's and PyTorch float32's
    build_vs_f64: float | None = None
    torch_vs_f64: float | None = None


def compare(name: str, got: np.ndarray, want: np.ndarray, note: str = "") -> Comparison:
    """Max-abs error and SNR (dB) of ``got`` against ``want``."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    error = np.linalg.norm(got - want)
    snr = float("inf") if error == 0 else 20 * np.log10(np.linalg.norm(want) / error)
    return Comparison(name, float(np.abs(got - want).max()), snr, note)


def _spectrum_as_complex(s: np.ndarray) -> np.ndarray:
    bins = s.shape[1] // 2
    s = np.asarray(s, np.float64)
    c = s[:, :bins] * np.exp(1j * s[:, bins:])
    return np.stack([c.real, c.imag])


def max_abs(got: np.ndarray, want: np.ndarray, spectrum: bool = False) -> float:
    """Max-abs difference; a source spectrum (magnitude, phase) is compared as complex."""
    if spectrum:
        got, want = _spectrum_as_complex(got), _spectrum_as_complex(want)
    return float(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)).max())


def compare_spectrum(got: np.ndarray, want: np.ndarray) -> Comparison:
    """The source spectrum compared as complex values, which is free of the phase cut.

    The note counts the branch-cut flips: phases that differ by about 2 pi.
    """
    bins = got.shape[1] // 2
    flips = int((np.abs(got[:, bins:] - want[:, bins:]) > np.pi).sum())
    return compare(
        "source.spectrum",
        _spectrum_as_complex(got),
        _spectrum_as_complex(want),
        f"as complex; {flips} branch-cut flips in the phase",
    )


def validate(
    synth: Synthesizer,
    phonemes: str,
    seed: int = 0,
    speed: float = 1.0,
    device: str = "cpu",
    model: torch.nn.Module | None = None,
) -> list[Comparison]:
    """Per-stage and end-to-end comparisons of a build against PyTorch (see module doc),
    PyTorch's stages on ``device`` (``cuda``: a CUDA build against PyTorch on its GPU).
    ``model``: the build's model, where its checkpoint is not at the path the manifest
    records (another machine)."""
    built_from = synth.manifest.weights
    if model is None:
        model = build_model(synth.config, weights=built_from.path, seed=built_from.random_seed or 0)
    eager = torch_provider(model, device=device)
    exact = torch_provider(model, dtype=torch.float64, device=device)
    results: list[Comparison] = []

    def run_both(name: str):
        compiled, reference, reference64 = synth._stage(name), eager(name), exact(name)

        def run(**inputs):
            got, want, want64 = compiled(**inputs), reference(**inputs), reference64(**inputs)
            for out_name, g in got.items():
                w, w64 = want[out_name], want64[out_name]
                spectrum = out_name == "spectrum"
                r = compare_spectrum(g, w) if spectrum else compare(f"{name}.{out_name}", g, w)
                r.build_vs_f64 = max_abs(g, w64, spectrum)
                r.torch_vs_f64 = max_abs(w, w64, spectrum)
                results.append(r)
            return got

        return run

    ids = phonemes_to_ids(phonemes, synth.vocab)
    style = voice_style(synth.voice, len(ids) - 2)
    trace = synthesize_ids(run_both, synth.geometry, ids, style, synth.limits, speed, seed)
    spectrum = torch.from_numpy(trace.stages["source"]["spectrum"])
    bins = spectrum.shape[1] // 2
    raw = kokoro_synthesize(model, ids, torch.from_numpy(style), speed, seed)
    resolved = kokoro_synthesize(
        model, ids, torch.from_numpy(style), speed, seed, phase=spectrum[:, bins:]
    )
    if not np.array_equal(raw.durations.numpy(), trace.durations):
        results.append(
            Comparison(
                "durations",
                float("nan"),
                float("nan"),
                "integer durations differ from kokoro's: waveforms not comparable",
            )
        )
        return results
    results.append(
        compare(
            "waveform vs kokoro",
            trace.audio,
            resolved.audio.numpy(),
            f"{resolved.phase_flips} branch-cut flips resolved",
        )
    )
    results.append(
        compare("waveform vs kokoro (raw)", trace.audio, raw.audio.numpy(), "flips not resolved")
    )
    return results


#: The float32 bound: each stage no further from float64 than twice PyTorch float32's own
#: distance, but for rounding at the scale of an output's float32 resolution, and the
#: waveform this far from kokoro's (branch-cut flips resolved).
STAGE_FACTOR, STAGE_ROUNDING, WAVEFORM_DB = 2.0, 1e-5, 40.0


def float32_bound_failures(results: Sequence[Comparison]) -> list[str]:
    """What in ``results`` breaks the float32 bound, one line each (empty: it holds)."""
    failures = []
    for r in results:
        if r.build_vs_f64 is not None and r.torch_vs_f64 is not None:
            allowed = STAGE_FACTOR * r.torch_vs_f64 + STAGE_ROUNDING
            if not r.build_vs_f64 <= allowed:
                failures.append(f"{r.name}: {r.build_vs_f64:.2e} from float64, bound {allowed:.2e}")
        elif r.name == "waveform vs kokoro" and not r.snr_db >= WAVEFORM_DB:
            failures.append(f"{r.name}: {r.snr_db:.1f} dB, bound {WAVEFORM_DB:.0f} dB")
        elif r.name == "durations":
            failures.append(f"durations: {r.note}")
    return failures


def verdict(
    weight_dtype: str, results: Sequence[Comparison], precision: str = "fp32"
) -> tuple[bool, str]:
    """(passed, what was checked) for a build whose weights are stored as ``weight_dtype``
    and whose convolutions multiply in ``precision`` (the manifest's two fields).

    auto and float32 builds with float32 products compute in float32 on the checkpoint's
    own values (int8 where they lie on an int8 grid, dequantized exactly), so the float32
    bound applies.  A build with int8 or bf16 products, or with weights quantized off a
    grid, is judged by its speech instead: bench/quality.py's word error rate within 0.01
    of the float32 build's, on both sentence sets (``--against`` gives its distance from
    a float32 build stage by stage).
    """
    if precision != "fp32":
        return True, (f"{precision} products (--precision {precision}): the float32 bound does "
                      "not apply; the reduced-precision bound is bench/quality.py's word error "
                      "rate within 0.01 of a float32 build's (--artifacts FP32_BUILD --build "
                      f"{precision}=THIS_BUILD, both sets); --against FP32_BUILD gives the "
                      "distance per stage")
    if weight_dtype == "int8":
        return True, ("weights quantized to int8 (--weight-dtype int8): the float32 bound does "
                      "not apply; compare bench/quality.py's word error rate with a float32 build's")
    failures = float32_bound_failures(results)
    rule = (f"float32 bound: every stage within {STAGE_FACTOR:g}x PyTorch float32's distance "
            f"from float64 (+{STAGE_ROUNDING:g}), waveform >= {WAVEFORM_DB:g} dB from kokoro")
    if failures:
        return False, f"FAILS the {rule}:\n  " + "\n  ".join(failures)
    return True, f"within the {rule}"


def against(synth: Synthesizer, reference: Synthesizer, phonemes: str, seed: int) -> list[str]:
    """This build's distance from ``reference`` (a float32 build of the same checkpoint),
    one line per stage output on the same phonemes, voice and seed; then each stage alone,
    given the reference's inputs (the decoder's, apart from the F0 it integrates)."""
    def snr(got: np.ndarray, want: np.ndarray) -> str:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            return f"shape {got.shape} vs {want.shape}"
        err = np.sum((got - want) ** 2)
        db = 10 * np.log10(np.sum(want**2) / err) if err > 0 else float("inf")
        return f"SNR {db:6.1f} dB, max abs {np.abs(got - want).max():.2e}"

    mine = synth.synthesize_phonemes(phonemes, seed=seed)
    theirs = reference.synthesize_phonemes(phonemes, seed=seed)
    lines = [f"{'whole chain: ' + stage + '.' + name:<36} {snr(v, theirs.stages[stage][name])}"
             for stage, outputs in mine.stages.items() for name, v in outputs.items()]
    ids = phonemes_to_ids(phonemes, synth.vocab)
    style = voice_style(synth.voice, len(ids) - 2)
    for stage in mine.stages:  # this build's stage alone, the reference's for the others
        stages = lambda name, s=stage: (synth if name == s else reference)._stage(name)  # noqa: E731
        alone = synthesize_ids(stages, synth.geometry, ids, style, synth.limits, 1.0, seed)
        lines += [f"{stage + ' alone: ' + stage + '.' + name:<36} {snr(v, theirs.stages[stage][name])}"
                  for name, v in alone.stages[stage].items()]
    lines.append(f"{'whole chain: waveform':<36} {snr(mine.audio, theirs.audio)}")
    return lines


def format_table(results: Sequence[Comparison]) -> str:
    """The comparisons as an aligned text table."""
    lines = [
        f"{'output':<28} {'max abs':>10} {'SNR dB':>8} {'build-f64':>10} {'torch-f64':>10}  note"
    ]
    f64 = lambda v: f"{v:>10.2e}" if v is not None else f"{'':>10}"  # noqa: E731
    for r in results:
        lines.append(
            f"{r.name:<28} {r.max_abs:>10.2e} {r.snr_db:>8.1f} {f64(r.build_vs_f64)} "
            f"{f64(r.torch_vs_f64)}  {r.note}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.validate", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "text", nargs="?", default="Hello world. This is Kokoro, compiled with TVM."
    )
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument("--phonemes", help="phonemes instead of text")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--against", type=Path, metavar="FP32_BUILD",
                        help="also print this build's distance from a float32 build, per stage")
    args = parser.parse_args(argv)
    try:
        environment.check_build_compiler(args.artifacts)
        # the host steps (torch's CPU noise, every stage's outputs): both engines on one noise
        synth = Synthesizer(args.artifacts, device_steps=False)
        phonemes = args.phonemes or synth.phonemize(args.text)
        results = validate(synth, phonemes, args.seed, args.speed)
        reference = Synthesizer(args.against, device_steps=False) if args.against else None
        distances = against(synth, reference, phonemes, args.seed) if reference else []
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(phonemes)
    print(format_table(results))
    if distances:
        print(f"against {args.against}:")
        print("\n".join(distances))
    passed, summary = verdict(synth.manifest.weight_dtype, results, synth.manifest.precision)
    print(summary)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
