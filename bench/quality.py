"""Intelligibility and fidelity of the real model: ``python bench/quality.py [--artifacts DIR]``.

On a fixed set of English sentences (SENTENCES: 24, from two words to fourteen,
statements, questions, instructions, names and numbers spelled out), speaks each with

  tvm       this project's build (``--artifacts``, a build of the real weights);
  pytorch   kokoro's own ``KModel.forward_with_tokens`` with the same (dequantized)
            weights, voice, phonemes and harmonic-source noise (kokoro_ext.tools.reference);
  onnx-int8 the original ``kokoro-v1.0.int8.onnx`` under ONNX Runtime, called as
            kokoro-onnx 0.6.1 calls it (tokens with the boundary 0s, the voice row
            ``len(tokens) - 1``, a float speed; 2 intra-op threads);
  espeak-ng the formant synthesizer, from the text, as a floor;

and transcribes every waveform with pocketsphinx (its bundled US English model; audio
resampled from 24 kHz, espeak-ng's 22.05 kHz, to 16 kHz).  The three Kokoro engines get
the same phonemes (this project's offline G2P) and the voice ``--voice`` (af_heart).
An engine that cannot load (a missing package, model file or build) is reported in one
line and left out; without tvm, pytorch makes its own noise and there is no SNR.

Reports the word error rate over the whole set per engine (edits / reference words,
after lower-casing and dropping punctuation) and the waveform SNR of tvm against
pytorch, per sentence and over the set (source-phase branch-cut flips resolved as in
kokoro_ext.tools.validate).  Writes ``quality.json`` (every transcript), ``quality.txt`` (the
tables) and ``quality.png`` (a chart) to ``--out`` (default bench/results).

Word timing: each word's start as this project predicts it (kokoro_ext.run.timestamps,
from the tvm build's durations) against its start in pocketsphinx's forced alignment of
the same audio to the spoken words (``Decoder.set_align_text``, then ``Decoder.seg()``
in 10 ms frames); the median and 95th percentile of the distance over every word the two
share (``word_start_error_*``; a sentence whose words are not all in pocketsphinx's
dictionary is left out).

``--build NAME=DIR`` (repeatable) adds another build of this project as engine
``tvm-NAME``, given the same phonemes, voice and seed: its word error rate, and its
waveform SNR against the ``--artifacts`` build per sentence (``snr_vs_tvm``).  With
``--artifacts`` a float32-products build (``--precision fp32``) and ``--build int8=DIR``
the default one, this is a reduced precision's distance from float32.  The SNR of a
whole waveform is bounded by the prosody stage's F0 (the harmonic source integrates it
into a phase), so it is low for any change there; WER is what tells.  Where a build
predicts other durations (the default build's int8 text stage moves some by a frame),
the waveforms do not line up and the table gives the difference in frames instead.

``--set written`` speaks WRITTEN instead: sentences full of numbers, money, dates and
abbreviations, scored against their spoken form (kokoro_ext.text.normalize), into
``quality-written.*``.

Needs: ``pip install -e ".[bench]"`` (pocketsphinx, onnxruntime, torch, matplotlib for
the chart) and espeak-ng (apt-get).  The results are written before the chart is drawn.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import load_engine, read_wav, skipped, write_results
from kokoro_ext.run.wav import SAMPLE_RATE, write_wav
from kokoro_ext.tools.distance import edit_distance

ASR_RATE = 16_000

SENTENCES = (
    "Hello world.",
    "Good morning, how are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "Please close the door when you leave the room.",
    "It is going to rain this afternoon, so take an umbrella.",
    "My brother works at a small hospital in the city.",
    "We should meet again next week to finish the project.",
    "Can you tell me where the nearest train station is?",
    "She bought three apples and a loaf of bread at the market.",
    "The children played in the garden until the sun went down.",
    "Turn left at the second light and then drive straight ahead.",
    "I think the meeting was moved to Thursday morning.",
    "Water boils at one hundred degrees.",
    "The music was so loud that nobody could hear the phone ring.",
    "Reading a good book is the best way to spend a quiet evening.",
    "Our team won the game in the last minute.",
    "Do not forget to call your mother on her birthday.",
    "The price of the house went up again this year.",
    "He opened the window to let some fresh air into the kitchen.",
    "Thank you very much for your help.",
    "The doctor said that I need to get more sleep and drink more water.",
    "There are seven days in a week and twelve months in a year.",
    "The old man walked slowly along the river with his dog.",
    "Computers can now translate speech from one language to another in real time.",
)


# -- audio and text helpers -----------------------------------------------------------


def resample(audio: np.ndarray, rate: int, target: int = ASR_RATE) -> np.ndarray:
    """Band-limited resampling by the FFT (the clip is short; edges are quiet)."""
    if rate == target:
        return audio.astype(np.float32)
    n_out = int(round(len(audio) * target / rate))
    spectrum = np.fft.rfft(audio.astype(np.float64))
    kept = np.zeros(n_out // 2 + 1, dtype=complex)
    m = min(len(kept), len(spectrum))
    kept[:m] = spectrum[:m]
    return (np.fft.irfft(kept, n_out) * (n_out / len(audio))).astype(np.float32)


#: Written forms (numbers, money, dates, times, units, abbreviations) that the text front
#: end spells out (kokoro_ext.text.normalize); ``--set written``.  Their reference for
#: the word error rate is the spoken form, ``normalize(text)``.
WRITTEN = (
    "Dr. Smith paid $1,234.56 for the car on March 3rd.",
    "The meeting starts at 3:45 pm on 2024-03-01.",
    "Prices rose 12% in 1999, then fell 5% in 2001.",
    "The store is 5 km away, on Main St. near the park.",
    "She ran 10 km in 45 min and drank 2 L of water.",
    "Mr. and Mrs. Jones have 3 kids, aged 5-10.",
    "It costs €5 or £3.50, e.g. about the price of a coffee.",
    "The 21st century began on January 1st, 2001.",
    "Call me at 9:05 am or write to info@example.com.",
    "The temperature dropped to -5 degrees at 6:30 am.",
    "He was born on July 4th, 1976, in St. Louis.",
    "The box weighs 10 kg and is 30 cm wide.",
    "Prof. Brown gave 2 talks, at 10:00 and at 2 pm.",
    "Only 0.5% of the 1,000,000 users saw the bug.",
    "Tickets cost $25 each, or $5 million for the stadium.",
    "Visit www.example.com for 50% off, bread, milk, etc.",
)


def spoken(text: str, written: bool) -> str:
    """The words a listener should hear: ``text``, or its normalized form (``--set written``)."""
    if not written:
        return text
    from kokoro_ext.text.normalize import normalize

    return normalize(text, "a")


def words(text: str) -> list[str]:
    """Lower-case words without punctuation (apostrophes inside words kept)."""
    return re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())


class Recognizer:
    """pocketsphinx with its bundled US English acoustic model, dictionary and LM."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self.decoder = Decoder(samprate=ASR_RATE, loglevel="FATAL")

    def __call__(self, audio: np.ndarray, rate: int) -> str:
        pcm = (np.clip(resample(audio, rate), -1, 1) * 32767).astype("<i2").tobytes()
        self.decoder.start_utt()
        self.decoder.process_raw(pcm, full_utt=True)
        self.decoder.end_utt()
        hyp = self.decoder.hyp()
        return hyp.hypstr if hyp is not None else ""


class Aligner:
    """pocketsphinx's forced alignment: where each word of a known text starts."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self.decoder = Decoder(samprate=ASR_RATE, loglevel="FATAL")
        self.frame = 1.0 / float(self.decoder.config["frate"])

    def __call__(self, audio: np.ndarray, rate: int, text: str) -> list[tuple[str, float]] | None:
        """(word, start seconds) of ``text``'s words in ``audio``; None if it cannot align."""
        try:
            self.decoder.set_align_text(" ".join(words(text)))
        except RuntimeError:  # a word the dictionary lacks
            return None
        pcm = (np.clip(resample(audio, rate), -1, 1) * 32767).astype("<i2").tobytes()
        self.decoder.start_utt()
        self.decoder.process_raw(pcm, full_utt=True)
        self.decoder.end_utt()
        return [
            (re.sub(r"\(\d+\)$", "", seg.word), seg.start_frame * self.frame)
            for seg in self.decoder.seg()
            if not seg.word.startswith(("<", "["))  # silence, noise, utterance ends
        ]


def start_errors(predicted, aligned: list[tuple[str, float]]) -> list[float]:
    """|predicted start - aligned start| (s) of each word the two lists share, in order.

    ``predicted``: TimedWords; one of several spoken words ("thirty-four") is timed by
    its first."""
    import difflib

    ours = [(words(w.text)[0], w.start) for w in predicted if words(w.text)]
    matcher = difflib.SequenceMatcher(None, [w for w, _ in ours], [w for w, _ in aligned],
                                      autojunk=False)
    return [
        abs(ours[i + k][1] - aligned[j + k][1])
        for i, j, n in matcher.get_matching_blocks() for k in range(n)
    ]


def snr_db(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    error = np.linalg.norm(got - want)
    return float("inf") if error == 0 else float(20 * np.log10(np.linalg.norm(want) / error))


# -- the engines ----------------------------------------------------------------------


def onnx_session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_int8(session, ids: list[int], voice: np.ndarray, speed: float) -> np.ndarray:
    """kokoro-onnx 0.6.1's ``_infer``: ids with the boundary 0s, style row n - 1."""
    tokens = ids[1:-1]
    style = voice[min(len(tokens), len(voice)) - 1]  # Kokoro._style_for
    inputs = {
        "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
        "style": np.asarray(style, dtype=np.float32),
        "speed": np.array([speed], dtype=np.float32),
    }
    return np.asarray(session.run(None, inputs)[0], np.float32).ravel()


def espeak(text: str, voice: str = "en-us") -> tuple[np.ndarray, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "espeak.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
        return read_wav(path)


# -- the bench ------------------------------------------------------------------------


def build_facts(synth) -> dict:
    """What this bench reads from a build's manifest, the one place it does: the checkpoint
    it was made from (None for random weights) and its target."""
    path = synth.manifest.weights.path
    return {"weights": Path(path) if path else None, "target": dict(synth.manifest.target)}


class FrontEnd:
    """Phonemes and vocabulary without a build: the offline G2P and the packaged config."""

    def __init__(self) -> None:
        from kokoro_ext import KOKORO_82M_CONFIG
        from kokoro_ext.text import Phonemizer

        self.config = json.loads(KOKORO_82M_CONFIG.read_text())
        self.vocab = self.config["vocab"]
        self.phonemize = Phonemizer()


def load_tvm(artifacts: Path):
    from kokoro_ext.run.synthesizer import Synthesizer

    # the host steps: the source stage's spectrum in the trace, torch's CPU noise as kokoro's
    synth = Synthesizer(artifacts, device_steps=False)
    if build_facts(synth)["weights"] is None:
        raise ValueError(f"{artifacts} was built with random weights; build the real model")
    return synth


def load_pytorch(config: dict, weights: Path, threads: int):
    import torch

    from kokoro_ext.build.model import build_model
    from kokoro_ext.tools.reference import kokoro_synthesize

    torch.set_num_threads(threads)
    model = build_model(config, weights=weights)

    def speak(ids: list[int], style: np.ndarray, seed: int, spectrum: np.ndarray | None):
        # the harmonic source's phase: tvm's (same noise, hence the SNR) or kokoro's own
        phase = None
        if spectrum is not None:
            phase = torch.from_numpy(spectrum)[:, spectrum.shape[1] // 2:]
        reference = kokoro_synthesize(model, ids, torch.from_numpy(style), 1.0, seed,
                                      phase=phase)
        return reference.audio.numpy().ravel(), reference.durations.numpy(), reference.phase_flips

    return speak


def load_onnx_int8(path: Path, threads: int):
    if not path.is_file():
        raise FileNotFoundError(f"no {path}")
    return onnx_session(path, threads)


def run(args: argparse.Namespace) -> dict:
    from kokoro_ext.run.cache import default_weights
    from kokoro_ext.run.pipeline import voice_style
    from kokoro_ext.run.voices import load_voice_array
    from kokoro_ext.text import phonemes_to_ids

    try:
        recognize = Recognizer()
    except ImportError as error:
        raise SystemExit(f"error: no speech recognizer to score with ({error}); "
                         "pip install pocketsphinx") from None
    synth, _ = load_engine("tvm", lambda: load_tvm(args.artifacts))
    front = synth if synth is not None else FrontEnd()
    try:
        weights = build_facts(synth)["weights"] if synth is not None else default_weights()
    except ValueError as error:
        weights = None
        skipped("pytorch", str(error).splitlines()[0])
    pytorch = None
    if weights is not None:
        pytorch, _ = load_engine(
            "pytorch", lambda: load_pytorch(front.config, weights, args.threads))
    onnx_path = args.onnx or default_weights()
    session, _ = load_engine("onnx-int8", lambda: load_onnx_int8(Path(onnx_path), args.threads))
    have_espeak = shutil.which("espeak-ng") is not None
    if not have_espeak:
        skipped("espeak-ng", "no espeak-ng executable (apt-get install espeak-ng)")
    voice = load_voice_array(args.voice)
    aligner = Aligner() if synth is not None else None
    others, other_dirs = {}, {}
    for name, directory in args.builds:
        other, _ = load_engine(f"tvm-{name}", lambda d=directory: load_tvm(d))
        if other is not None:
            others[f"tvm-{name}"], other_dirs[f"tvm-{name}"] = other, str(directory)
    engines = [e for e, up in (("tvm", synth), ("pytorch", pytorch), ("onnx-int8", session),
                               ("espeak-ng", have_espeak)) if up is not None and up is not False]
    engines[1:1] = list(others)
    if not engines:
        raise SystemExit("error: no engine loaded")

    rows = []
    for i, text in enumerate(args.sentences):
        phonemes = front.phonemize(text)
        ids = phonemes_to_ids(phonemes, front.vocab)
        said = spoken(text, args.set == "written")
        row = {"text": text, "said": said, "phonemes": phonemes, "heard": {}, "seconds": {},
               "snr_db": None, "phase_flips": None, "snr_vs_tvm": {}}
        audio = {}
        trace = None
        if synth is not None:
            started = time.perf_counter()
            trace = synth.synthesize_phonemes(phonemes, voice=voice, seed=args.seed)
            row["seconds"]["tvm"] = time.perf_counter() - started
            audio["tvm"] = (trace.audio, SAMPLE_RATE)
            row["word_start_errors"] = word_start_errors(synth, text, said, phonemes, trace, aligner)
        for engine, other in others.items():
            started = time.perf_counter()
            other_trace = other.synthesize_phonemes(phonemes, voice=voice, seed=args.seed)
            samples = other_trace.audio
            row["seconds"][engine] = time.perf_counter() - started
            audio[engine] = (samples, SAMPLE_RATE)
            if trace is not None and len(samples) == len(trace.audio):
                row["snr_vs_tvm"][engine] = snr_db(samples, trace.audio)
            elif trace is not None:  # other durations: the waveforms do not line up
                row.setdefault("frames_vs_tvm", {})[engine] = other_trace.frames - trace.frames
        if pytorch is not None:
            spectrum = trace.stages["source"]["spectrum"] if trace is not None else None
            started = time.perf_counter()
            kokoro, durations, row["phase_flips"] = pytorch(
                ids, voice_style(voice, len(ids) - 2), args.seed, spectrum)
            row["seconds"]["pytorch"] = time.perf_counter() - started
            audio["pytorch"] = (kokoro, SAMPLE_RATE)
            if trace is not None and np.array_equal(durations, trace.durations):
                row["snr_db"] = snr_db(trace.audio, kokoro)
        if session is not None:
            started = time.perf_counter()
            audio["onnx-int8"] = (onnx_int8(session, ids, voice, 1.0), SAMPLE_RATE)
            row["seconds"]["onnx-int8"] = time.perf_counter() - started
        if have_espeak:
            audio["espeak-ng"] = espeak(said)
        for engine, (samples, rate) in audio.items():
            row["heard"][engine] = recognize(samples, rate)
            if args.keep_wavs:
                args.keep_wavs.mkdir(parents=True, exist_ok=True)
                write_wav(args.keep_wavs / f"{i:02d}-{engine}.wav", samples, rate)
        row["errors"] = {
            e: edit_distance(words(said), words(heard)) for e, heard in row["heard"].items()
        }
        rows.append(row)
        print(f"[{i + 1}/{len(args.sentences)}] {text}", flush=True)
        for engine in engines:
            print(f"    {engine:<10} {row['errors'][engine]:>2} err  {row['heard'][engine]}", flush=True)
    reference_words = sum(len(words(r["said"])) for r in rows)
    wer = {e: sum(r["errors"][e] for r in rows) / reference_words for e in engines}
    pairs = [(r["snr_db"], r) for r in rows if r["snr_db"] is not None]
    starts = [e for r in rows for e in (r.get("word_start_errors") or [])]
    return {
        "artifacts": str(args.artifacts),
        "weights": str(weights) if weights else None,
        "onnx": str(onnx_path),
        "voice": str(args.voice),
        "seed": args.seed,
        "threads": args.threads,
        "target": build_facts(synth)["target"] if synth is not None else None,
        "engines": engines,
        "reference_words": reference_words,
        "wer": wer,
        "snr_db_min": min((s for s, _ in pairs), default=None),
        "snr_db_median": float(np.median([s for s, _ in pairs])) if pairs else None,
        "snr_mismatched_durations": len(rows) - len(pairs),
        "word_start_words": len(starts),
        "word_start_error_median": float(np.median(starts)) if starts else None,
        "word_start_error_p95": float(np.percentile(starts, 95)) if starts else None,
        "word_start_unaligned": sum(r.get("word_start_errors") is None for r in rows),
        "builds": other_dirs,
        "rows": rows,
    }


def word_start_errors(synth, text, said, phonemes, trace, aligner) -> list[float] | None:
    """The tvm words' predicted starts against pocketsphinx's alignment (None: not aligned)."""
    from kokoro_ext.run.synthesizer import SILENT_SYMBOLS
    from kokoro_ext.run.timestamps import chunk_words

    from kokoro_ext.text import Word

    # the Words of the phonemes synthesize_phonemes got (Synthesizer.phonemize's join)
    front, spoken_words = synth._pipeline(), []
    for part in front.sentences(text):
        found = front.words(part)
        if found:
            if spoken_words:
                spoken_words.append(Word("", " "))
            spoken_words += [*found[:-1], Word(found[-1].text, found[-1].phonemes.rstrip())]
    if "".join(w.phonemes for w in spoken_words).strip() != phonemes:
        return None
    frame = synth.geometry.samples_per_frame / SAMPLE_RATE
    predicted = chunk_words(spoken_words, trace.durations, synth.vocab, SILENT_SYMBOLS, 0.0, frame)
    aligned = aligner(trace.audio, SAMPLE_RATE, said)
    return None if aligned is None else start_errors(predicted, aligned)


def format_tables(result: dict) -> str:
    engines = result["engines"]
    lines = [
        f"quality: {len(result['rows'])} sentences, {result['reference_words']} words, voice "
        f"{result['voice']}, seed {result['seed']}, pocketsphinx (en-us) at 16 kHz",
        "",
        f"{'engine':<10} {'WER':>6} {'errors':>7}",
    ]
    for e in engines:
        errors = sum(r["errors"][e] for r in result["rows"])
        lines.append(f"{e:<10} {result['wer'][e]:>6.3f} {errors:>7}")
    lines.append("")
    if result["snr_db_min"] is not None:
        lines.append(
            f"waveform tvm vs pytorch (same weights, voice, noise): SNR min "
            f"{result['snr_db_min']:.1f} dB, median {result['snr_db_median']:.1f} dB"
            + (f"; {result['snr_mismatched_durations']} sentences with other durations"
               if result["snr_mismatched_durations"] else ""))
    else:
        lines.append("waveform tvm vs pytorch: no SNR (both are needed, with the same durations)")
    if result.get("word_start_error_median") is not None:
        lines.append(
            f"word starts, tvm's durations vs pocketsphinx's alignment: median "
            f"{result['word_start_error_median'] * 1000:.0f} ms, 95th percentile "
            f"{result['word_start_error_p95'] * 1000:.0f} ms over {result['word_start_words']} words"
            + (f" ({result['word_start_unaligned']} sentences not aligned)"
               if result["word_start_unaligned"] else ""))
    builds = list(result.get("builds", {}))
    for e in builds:
        snrs = [r["snr_vs_tvm"][e] for r in result["rows"] if e in r["snr_vs_tvm"]]
        moved = sum(e in r.get("frames_vs_tvm", {}) for r in result["rows"])
        if snrs:
            same = f" over the {len(snrs)} sentences of the same durations" if moved else ""
            lines.append(f"waveform {e} vs tvm (same phonemes, voice, seed): SNR min "
                         f"{min(snrs):.1f} dB, median {float(np.median(snrs)):.1f} dB{same}")
        if moved:
            lines.append(f"durations {e} vs tvm: {moved} of {len(result['rows'])} sentences "
                         "last other numbers of frames (the table's +/-N fr), their waveforms "
                         "not comparable sample by sample")
    lines += [
        "",
        f"{'#':>2} {'SNR dB':>7} " + "".join(f" {e + ' dB':>14}" for e in builds)
        + " " + " ".join(f"{e:>9}" for e in engines) + "  sentence",
    ]
    for i, r in enumerate(result["rows"]):
        snr = f"{r['snr_db']:.1f}" if r["snr_db"] is not None else "-"
        vs = "".join(
            f" {r['snr_vs_tvm'][e]:>14.1f}" if e in r["snr_vs_tvm"]
            else f" {r['frames_vs_tvm'][e]:>+11d} fr" if e in r.get("frames_vs_tvm", {})
            else f" {'-':>14}"
            for e in builds)
        lines.append(
            f"{i:>2} {snr:>7}{vs} " + " ".join(f"{r['errors'][e]:>9}" for e in engines)
            + f"  {r['text']}"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    engines = result["engines"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2]})
    bars = left.bar(engines, [result["wer"][e] for e in engines], color=[f"C{i}" for i in range(len(engines))])
    left.bar_label(bars, fmt="%.3f")
    left.set_ylabel("word error rate (pocketsphinx)")
    left.set_title(f"WER, {len(result['rows'])} sentences")
    snrs = [r["snr_db"] if r["snr_db"] is not None else np.nan for r in result["rows"]]
    right.bar(range(len(snrs)), snrs, color="C0")
    right.axhline(40, color="k", linestyle="--", linewidth=1, label="40 dB")
    right.set_xlabel("sentence")
    right.set_ylabel("SNR of tvm vs pytorch (dB)")
    right.set_title("waveform fidelity, same weights and noise")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _named_build(value: str) -> tuple[str, Path]:
    name, sep, directory = value.partition("=")
    if not sep or not name or not directory:
        raise argparse.ArgumentTypeError(f"--build takes NAME=DIR, got {value!r}")
    return name, Path(directory)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"), help="a build of the real model")
    parser.add_argument("--onnx", type=Path, help="the int8 ONNX model (default: the fetched one)")
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--first", type=int, help="only the first N sentences (a quick look)")
    parser.add_argument("--build", dest="builds", action="append", default=[], type=_named_build,
                        metavar="NAME=DIR", help="another build, as engine tvm-NAME (repeatable)")
    parser.add_argument("--keep-wavs", type=Path, help="also write every waveform here")
    parser.add_argument(
        "--set", choices=("plain", "written"), default="plain",
        help="plain: SENTENCES; written: WRITTEN, full of numbers, money, dates and "
        "abbreviations (results as quality-written.*)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    sentences = WRITTEN if args.set == "written" else SENTENCES
    args.sentences = sentences[: args.first] if args.first else sentences
    result = run(args)
    result["set"] = args.set
    name = "quality" if args.set == "plain" else "quality-written"
    write_results(args.out, name, result, format_tables(result), plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
