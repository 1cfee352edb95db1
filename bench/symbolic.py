"""Each stage compiled once with a symbolic time axis against its static-shape build.

    python bench/symbolic.py [--config small|full] [--stages text,prosody,source,decoder]
                             [--lengths 37,61] [--repeat 5] [--plot symbolic.png]

For every stage: export with the build's symbolic batch and time axes
(``StageSpec.dynamic``), import, compile with the project's pipeline (native-kernel
dispatch included), run at each length; compile the static-shape stage at the same length; print compile time,
run time (best of ``--repeat``) and the max-abs difference of the two, and how many
GEMM-shaped ops were left to TVM's generic lowering.  Random weights: speed and parity,
not speech.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from kokoro_ext.build.compiler import compile_module
from kokoro_ext.build.model import build_model, load_config, small_config
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.stages import STAGES
from kokoro_ext.build.backend import resolve


def _compile(module, example, dynamic, target):
    start = time.perf_counter()
    compiled = compile_module(module, example, target, dynamic_shapes=dynamic)
    return StageRunner(compiled.executable), time.perf_counter() - start


def _timed(runner, inputs, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = runner(*inputs)
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="small", help="small, full, or a config.json")
    parser.add_argument("--stages", default="text,prosody,decoder")
    parser.add_argument("--lengths", default="37,61")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out", type=Path, default=Path("bench/results/symbolic.json"))
    parser.add_argument("--plot", type=Path, default=Path("bench/results/symbolic.png"))
    args = parser.parse_args(argv)
    config = {"small": small_config(), "full": load_config(None)}.get(args.config) or load_config(
        Path(args.config)
    )
    model = build_model(config, seed=0)
    target = resolve(args.target)
    lengths = [int(n) for n in args.lengths.split(",")]
    rows = []
    for stage in args.stages.split(","):
        spec = STAGES[stage]
        module = spec.module(model).eval()
        # exactly what the build compiles: the stage's batch and time axes symbolic
        example = spec.batched_example(model, lengths[0])
        symbolic, symbolic_compile = _compile(module, example, spec.dynamic(model), target)
        for length in lengths:
            inputs = spec.example(model, length)
            torch.manual_seed(length)
            inputs = tuple(
                torch.randint(1, 100, t.shape) if t.dtype == torch.int64 and t.ndim == 2
                else torch.tensor([length]) if t.dtype == torch.int64
                else torch.randn(t.shape)
                for t in inputs
            )  # fmt: skip
            static, static_compile = _compile(module, inputs, None, target)
            static_s, static_out = _timed(static, inputs, args.repeat)
            symbolic_s, symbolic_out = _timed(symbolic, inputs, args.repeat)
            diff = max(float(np.abs(a - b).max()) for a, b in zip(static_out, symbolic_out))
            rows.append(
                dict(stage=stage, length=length, static_ms=1e3 * static_s,
                     symbolic_ms=1e3 * symbolic_s, max_abs=diff,
                     static_compile_s=static_compile, symbolic_compile_s=symbolic_compile)
            )  # fmt: skip
            r = rows[-1]
            print(
                f"{stage:8s} {length:5d}  static {r['static_ms']:9.1f} ms  symbolic "
                f"{r['symbolic_ms']:9.1f} ms  ratio {r['symbolic_ms'] / r['static_ms']:5.2f}  "
                f"max-abs {diff:.2e}  compile {static_compile:.0f}s / {symbolic_compile:.0f}s",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": args.config, "target": target, "rows": rows}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    labels = [f"{r['stage']}@{r['length']}" for r in rows]
    x = np.arange(len(rows))
    plt.figure(figsize=(max(6, len(rows)), 4))
    plt.bar(x - 0.2, [r["static_ms"] for r in rows], 0.4, label="static shape")
    plt.bar(x + 0.2, [r["symbolic_ms"] for r in rows], 0.4, label="symbolic (one library)")
    plt.xticks(x, labels, rotation=30)
    plt.ylabel("ms per call")
    plt.title(f"symbolic vs static stages ({args.config} config)")
    plt.legend()
    plt.tight_layout()
    plt.savefig(args.plot)
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
