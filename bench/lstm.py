"""LSTM benchmark: IR size, compile time and run time against sequence length.

At Kokoro's sizes (bidirectional, hidden 256 per direction, input 640 by default),
for each sequence length it compares

  unrolled  the stock TVM 0.27 import: torch's Core ATen decomposition unrolls the
            time loop into Relax ops before the importer sees it (the default of
            from_exported_program without tvm_patches/0003)
  tir       our packed_lstm op lowered to one TIR time loop (kokoro_ext.build.kernels)
  native    our packed_lstm op lowered to the C++ kernel (cpp/src/lstm.cc)
  torch     torch.nn.LSTM, eager, on the same input

and prints IR lines (Relax + TIR as printed by TVMScript), compile time (tvm.compile
for llvm) and median run time.  The unrolled import is skipped above --max-unrolled
steps, where its compile time runs into minutes.

    python bench/lstm.py [--input 640] [--lengths 16 64 256 1024] [--plot lstm.png]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.run import native
from kokoro_ext.build.export import PackedLSTM
from kokoro_ext.build.frontend import custom_convert_map

HIDDEN = 256


class _TorchLSTM(torch.nn.Module):
    def __init__(self, lstm):
        super().__init__()
        self.lstm = lstm

    def forward(self, x):
        return self.lstm(x)[0]


def _import(lstm: torch.nn.LSTM, path: str, steps: int) -> tvm.IRModule:
    x = torch.zeros(1, steps, lstm.input_size)
    if path == "unrolled":
        ep = torch.export.export(_TorchLSTM(lstm), (x,)).run_decompositions()
        return from_exported_program(ep, run_ep_decomposition=False)
    ep = torch.export.export(PackedLSTM.from_lstm(lstm).eval(), (x, torch.tensor([steps])))
    return from_exported_program(ep, custom_convert_map=custom_convert_map(path))


def build(lstm: torch.nn.LSTM, path: str, steps: int, x: np.ndarray):
    """Import and compile one path; return (IR lines, compile seconds, callable)."""
    if path == "torch":
        xt = torch.from_numpy(x)
        return None, None, lambda: lstm(xt)[0].numpy()
    mod = _import(lstm, path, steps)
    ir_lines = len(mod.script(show_meta=False).splitlines())
    start = time.perf_counter()
    ex = tvm.compile(mod, target="llvm")
    compile_s = time.perf_counter() - start
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(x)]
    if path != "unrolled":
        args.append(tvm.runtime.tensor(np.array([steps], dtype="int64")))

    def run():
        out = vm["main"](*args)
        return (out[0] if isinstance(out, tvm.ir.Array | list | tuple) else out).numpy()

    return ir_lines, compile_s, run


def measure(lstm: torch.nn.LSTM, paths: list[str], steps: int, repeat: int) -> dict:
    """Per path: IR lines, compile s, median run s and max error against torch.

    Run times are taken in interleaved rounds (every path once per round) so that
    machine noise hits all paths alike.
    """
    x = np.random.default_rng(0).standard_normal((1, steps, lstm.input_size), dtype="float32")
    with torch.no_grad():
        want = lstm(torch.from_numpy(x))[0].numpy()
        built = {p: build(lstm, p, steps, x) for p in paths}
        errors = {p: float(np.abs(built[p][2]() - want).max()) for p in paths}  # + warm-up
        times = {p: [] for p in paths}
        for _ in range(repeat):
            for p in paths:
                start = time.perf_counter()
                built[p][2]()
                times[p].append(time.perf_counter() - start)
    return {
        p: {
            "ir_lines": built[p][0],
            "compile_s": built[p][1],
            "run_s": statistics.median(times[p]),
            "max_err": errors[p],
        }
        for p in paths
    }


def _cell(value, spec: str, width: int) -> str:
    return ("-" if value is None else format(value, spec)).rjust(width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", type=int, default=640, help="LSTM input size (640 or 512)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--max-unrolled", type=int, default=256, help="skip unrolled above")
    parser.add_argument("--max-tir", type=int, default=1024, help="skip the TIR loop above")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--plot", help="write a PNG chart here (needs matplotlib)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # torch.export deprecation chatter

    torch.set_num_threads(args.threads)
    native.load()
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(args.input, HIDDEN, batch_first=True, bidirectional=True).eval()
    print(
        f"bidirectional LSTM, input {args.input}, hidden {HIDDEN}, batch 1, "
        f"{args.threads} thread(s), TVM {tvm.__version__}"
    )
    header = f"{'steps':>6} {'path':<9} {'IR lines':>9} {'compile s':>10} {'run ms':>10} {'max err':>9}"
    print(header)
    print("-" * len(header))
    rows = []
    for steps in args.lengths:
        paths = ["unrolled", "tir", "native", "torch"]
        if steps > args.max_unrolled:
            print(f"{steps:>6} {'unrolled':<9} {'skipped: compile time grows with steps':>41}")
            paths.remove("unrolled")
        if steps > args.max_tir:
            print(f"{steps:>6} {'tir':<9} {'skipped: scalar loop, see --max-tir':>41}")
            paths.remove("tir")
        for path, r in measure(lstm, paths, steps, args.repeat).items():
            rows.append((steps, path, r))
            print(
                f"{steps:>6} {path:<9} {_cell(r['ir_lines'], 'd', 9)} "
                f"{_cell(r['compile_s'], '.2f', 10)} {r['run_s'] * 1e3:10.2f} {r['max_err']:9.1e}",
                flush=True,
            )
    if args.plot:
        _plot(rows, args.plot)


def _plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, key, label in zip(
        axes, ("ir_lines", "compile_s", "run_s"), ("IR lines", "compile time [s]", "run time [s]")
    ):
        for name in ("unrolled", "tir", "native", "torch"):
            pts = [(s, r[key]) for s, p, r in rows if p == name and r[key] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
