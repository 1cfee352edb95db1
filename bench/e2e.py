"""End-to-end synthesis time at full size: our TVM build against the tools people use.

Engines, all with the same weights, voice, input and harmonic-source noise:

  PyTorch eager   kokoro 0.9.4 ``KModel.forward_with_tokens`` (the baseline)
  torch.compile   inductor on the four stage modules (kokoro_ext.build.stages)
  ONNX Runtime    the stage modules exported to fp32 ONNX, CPU provider
  TVM             ``python -m kokoro_ext.build`` artifacts, run by kokoro_ext.run.pipeline

The last three run through the same host pipeline (kokoro_ext.tools.engines), each input at its
own token and frame lengths (the TVM build runs every length with one library per stage;
the other engines' stage modules are exported per shape).  bench/user.py measures what a
user gets (fresh processes, G2P, real texts); this bench isolates the stages.  Calls are interleaved across engines and input lengths, warm-up
(compilation, export, first load) excluded and reported apart; the table shows medians.
FLOPs are counted on kokoro's model with torch.utils.flop_counter and set against the
machine's fp32 peak as measured by a large matrix product.  An engine that cannot be
set up or fails its warm-up is reported in one line and left out.  Writes e2e.txt and
e2e.json to ``--out``, then the chart (``--plot``, default OUT/e2e.png) if matplotlib is
installed.

    python bench/e2e.py [--tokens 32,64,128,256] [--repeat 5] [--out /tmp/kokoro-e2e]
                        [--engines eager,compile,onnx,tvm] [--reuse] [--plot e2e.png]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness import cpu_model, load_engine, plot_if_possible, write_results
from kokoro_ext.build.cli import parse_args
from kokoro_ext.build.driver import build
from kokoro_ext.tools.engines import StageTimer, onnx_provider, torch_provider
from kokoro_ext.build.model import build_model, load_config, load_voice, random_voice
from kokoro_ext.run.manifest import Limits
from kokoro_ext.run.pipeline import synthesize_ids, voice_style
from kokoro_ext.run.synthesizer import SAMPLE_RATE, Synthesizer
from kokoro_ext.build.stages import Geometry
from kokoro_ext.text import Phonemizer, phonemes_to_ids

TEXT = (
    "Kokoro is an open-weight text to speech model with eighty two million parameters. "
    "Despite its lightweight architecture, it delivers quality comparable to larger models "
    "while being significantly faster and more cost-efficient. With Apache-licensed "
    "weights, Kokoro can be deployed anywhere from production environments to personal "
    "projects, and on small devices that have no accelerator at all."
)
ENGINES = {
    "eager": "PyTorch eager",
    "compile": "torch.compile",
    "onnx": "ONNX Runtime",
    "tvm": "TVM (kokoro_ext)",
}


def measured_peak_gflops(threads: int, size: int = 4096, repeat: int = 5) -> float:
    """fp32 GFLOP/s of PyTorch's best case, a large square matrix product."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(_seconds(lambda: torch.mm(a, b)) for _ in range(repeat))
    return 2 * size**3 / best / 1e9


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def phoneme_inputs(lengths: list[int], vocab: dict[str, int]) -> dict[int, list[int]]:
    """Token ids of exactly each length (boundary tokens included), cut from TEXT's phonemes."""
    phonemes = Phonemizer()(TEXT)
    symbols = [p for p in phonemes if p in vocab]
    inputs = {}
    for n in lengths:
        body = (symbols * (n // len(symbols) + 1))[: n - 2]
        inputs[n] = phonemes_to_ids("".join(body), vocab)
    return inputs


def snr_db(got: np.ndarray, want: np.ndarray) -> float:
    n = min(len(got), len(want))
    error = np.linalg.norm(got[:n] - want[:n])
    return float("inf") if error == 0 else float(20 * np.log10(np.linalg.norm(want[:n]) / error))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="32,64,128,256")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--out", type=Path, default=Path("/tmp/kokoro-e2e"))
    parser.add_argument("--config", type=Path)
    parser.add_argument("--weights", type=Path)
    parser.add_argument("--voice", type=Path)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="reuse the TVM build in --out")
    parser.add_argument("--plot", type=Path, help="the PNG chart (default OUT/e2e.png)")
    args = parser.parse_args()
    engines = args.engines.split(",")
    lengths = sorted(int(v) for v in args.tokens.split(","))
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    config = load_config(args.config)
    model = build_model(config, weights=args.weights, seed=args.seed).eval()
    voice = (load_voice(args.voice) if args.voice else random_voice(args.seed)).numpy()
    geometry = Geometry.from_model(model)
    inputs = phoneme_inputs(lengths, config["vocab"])
    styles = {n: voice_style(voice, n - 2) for n in lengths}

    def kokoro(n: int) -> np.ndarray:
        torch.manual_seed(args.seed)  # the source noise every other engine is given
        with torch.no_grad():
            audio, _ = model.forward_with_tokens(
                torch.tensor([inputs[n]]), torch.from_numpy(styles[n]), 1.0
            )
        return audio.numpy()

    frames, flops = {}, {}
    for n in lengths:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            _, durations = model.forward_with_tokens(
                torch.tensor([inputs[n]]), torch.from_numpy(styles[n]), 1.0
            )
        frames[n], flops[n] = int(durations.sum()), counter.get_total_flops()
    # every engine at the input's own lengths (the TVM build runs any length; the other
    # engines' stages are exported per shape)
    limits = Limits(tokens=max(lengths), frames=max(frames.values()))

    def tvm_engine() -> StageTimer:
        tvm_dir = args.out / "tvm"
        if not args.reuse:
            build_args = ["--out", str(tvm_dir), "--target", args.target, "--seed", str(args.seed)]
            for flag in ("config", "weights", "voice"):
                if getattr(args, flag):
                    build_args += [f"--{flag}", str(getattr(args, flag))]
            if not args.weights:
                build_args += ["--random-weights"]  # the same random model as above
            build(parse_args(build_args))
        return StageTimer(Synthesizer(tvm_dir)._stage)

    setups = {"tvm": tvm_engine,
              "onnx": lambda: onnx_provider(model, args.out / "onnx", args.threads),
              "compile": lambda: torch_provider(model, compile=True)}
    runs, skipped = {}, {}
    for engine in [e for e in engines if e in setups]:
        runs[engine], reason = load_engine(engine, setups[engine])
        if reason:
            skipped[engine] = reason
    engines = [e for e in engines if e not in skipped]
    stage_timer = runs.get("tvm")

    def run(engine: str, n: int) -> np.ndarray:
        if engine == "eager":
            return kokoro(n)
        trace = synthesize_ids(
            runs[engine], geometry, inputs[n], styles[n], limits, 1.0, args.seed
        )
        return trace.audio

    first, audio = {}, {}
    for n in lengths:
        for engine in list(engines):
            start = time.perf_counter()
            audio[engine, n], reason = load_engine(engine, lambda: run(engine, n))
            if reason:
                skipped[engine] = f"warm-up at {n} tokens: {reason}"
                engines.remove(engine)
                del audio[engine, n]
                continue
            first[engine, n] = time.perf_counter() - start
            print(f"warm-up {ENGINES[engine]:<18} {n:>4} tokens: {first[engine, n]:7.1f} s",
                  flush=True)
    first = {k: v for k, v in first.items() if k[0] in engines}
    if not engines:
        raise SystemExit("error: no engine left to time")
    if stage_timer is not None:
        stage_timer.seconds.clear()

    times: dict[tuple[str, int], list[float]] = {key: [] for key in first}
    stage_times: dict[int, dict[str, list[float]]] = {n: {} for n in lengths}
    for rep in range(args.repeat):
        for n in lengths:
            order = engines[rep % len(engines):] + engines[: rep % len(engines)]
            for engine in order:
                times[engine, n].append(_seconds(lambda: run(engine, n)))
                if engine == "tvm":
                    for stage, values in stage_timer.seconds.items():
                        stage_times[n].setdefault(stage, []).append(values[-1])

    peak = measured_peak_gflops(args.threads)
    lines = [
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; {args.threads} threads per engine",
        f"torch {torch.__version__}, measured fp32 peak {peak:.0f} GFLOP/s "
        f"(torch.mm 4096^3); {args.repeat} interleaved runs, median",
        "",
        f"{'tokens':>6} {'frames':>6} {'audio s':>7}  {'engine':<18} {'median s':>8} {'RTF':>6} "
        f"{'x eager':>7} {'GFLOP/s':>8} {'% peak':>6} {'first s':>7} {'SNR dB':>6}",
    ]
    results = []
    for n in lengths:
        seconds_of_audio = frames[n] * geometry.samples_per_frame / SAMPLE_RATE
        eager = statistics.median(times["eager", n]) if "eager" in engines else float("nan")
        for engine in engines:
            median = statistics.median(times[engine, n])
            gflops = flops[n] / median / 1e9
            snr = snr_db(audio[engine, n], audio["eager", n]) if "eager" in engines else 0.0
            results.append(
                {"tokens": n, "engine": engine, "median": median, "ratio": median / eager}
            )
            lines.append(
                f"{n:>6} {frames[n]:>6} {seconds_of_audio:>7.2f}  {ENGINES[engine]:<18} "
                f"{median:>8.3f} {median / seconds_of_audio:>6.3f} {median / eager:>7.2f} "
                f"{gflops:>8.1f} {100 * gflops / peak:>6.1f} {first[engine, n]:>7.1f} {snr:>6.1f}"
            )
    if "tvm" in engines:
        lines += ["", "TVM per stage, median s:"]
        stages = ("text", "prosody", "source", "decoder")
        lines.append(f"{'tokens':>6} {'frames':>6} " + " ".join(f"{s:>8}" for s in stages)
                     + f" {'host':>8} {'total':>8}")
        for n in lengths:
            per = {s: statistics.median(stage_times[n][s]) for s in stages}
            total = statistics.median(times["tvm", n])
            lines.append(
                f"{n:>6} {frames[n]:>6} " + " ".join(f"{per[s]:>8.3f}" for s in stages)
                + f" {total - sum(per.values()):>8.3f} {total:>8.3f}"
            )
    lines.append("")
    lines.append("SNR dB: the waveform against PyTorch eager's, raw (atan2 branch-cut flips in the "
                 "source phase are not resolved here; see kokoro_ext.tools.validate)")
    lines += [f"skipped {engine}: {reason}" for engine, reason in skipped.items()]
    result = {"rows": results, "lengths": lengths, "engines": engines, "skipped": skipped,
              "threads": args.threads, "peak_gflops": peak, "cpu": cpu_model()}
    write_results(args.out, "e2e", result, "\n".join(lines))
    if plot_if_possible(plot, result, args.plot or args.out / "e2e.png"):
        print(f"wrote {args.plot or args.out / 'e2e.png'}")


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    results, lengths, engines = result["rows"], result["lengths"], result["engines"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(engines)
    x = np.arange(len(lengths))
    for i, engine in enumerate(engines):
        rows = {r["tokens"]: r for r in results if r["engine"] == engine}
        left.bar(x + i * width, [rows[n]["median"] for n in lengths], width, label=ENGINES[engine])
        right.bar(x + i * width, [rows[n]["ratio"] for n in lengths], width, label=ENGINES[engine])
    for ax, title in ((left, "median synthesis time (s)"), (right, "time / PyTorch eager")):
        ax.set_xticks(x + 0.4 - width / 2, [str(n) for n in lengths])
        ax.set_xlabel("tokens")
        ax.set_title(title)
    right.axhline(0.3, color="k", linestyle="--", linewidth=1, label="goal 0.3x")
    left.set_yscale("log")
    right.legend(fontsize=8)
    fig.suptitle(f"Kokoro-82M end to end, {cpu_model()}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
