"""Build the compiled stages: ``python -m kokoro_ext.build --target llvm [options]``.

Compiles every stage (kokoro_ext.build.stages) once, for every length, and writes one library
per stage, the stage's weights (in the layout the library's ``main`` takes: the
checkpoint's parameters through the library's own weight transform, run here once and
stored once: kokoro_ext.run.weights), the config, the default voice and a manifest to
``--out``.  The weights are the real Kokoro-82M v1.0 that ``python -m kokoro_ext.build.fetch``
downloaded, unless ``--weights FILE`` or ``--random-weights`` says otherwise.
``--weights-only`` re-points an existing build at other weights of the same architecture
without compiling (the built libraries transform them).  The directory is replaced only
when the whole build succeeded (kokoro_ext.build.driver); the compiler's messages go to
``build.log`` in it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kokoro_ext.build.driver import DEFAULT_OUT, BuildOptions, build
from kokoro_ext.build.frontend import LSTM_BACKENDS
from kokoro_ext.build.backend import targets_help
from kokoro_ext.build.precision import PRECISIONS, WEIGHT_DTYPES
from kokoro_ext.run.cache import DEFAULT_VOICE
from kokoro_ext.run.wire import FORMATS


def parse_args(argv: Sequence[str] | None = None) -> BuildOptions:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--target",
        default="llvm",
        help="TVM target: llvm (this host's CPU, the default), 'llvm -mcpu=<cpu>' or a JSON "
        "dict; e.g. 'llvm -mcpu=x86-64-v2' for artifacts that run on any recent x86-64; or "
        "a GPU or a browser: " + "; ".join(targets_help()),
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="artifacts directory (default: ./artifacts)"
    )
    parser.add_argument(
        "--config", type=Path, help="Kokoro config.json (default: the shipped Kokoro-82M)"
    )
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument(
        "--weights",
        type=Path,
        help="kokoro-v1_0.pth checkpoint or kokoro-v1.0 ONNX export (.onnx, int8 or float32); "
        "default: the Kokoro-82M v1.0 int8 model `python -m kokoro_ext.build.fetch` downloaded",
    )
    weights.add_argument(
        "--random-weights",
        action="store_true",
        help="deterministic random weights and voice (--seed) instead: noise, not speech "
        "(for tests and other configs)",
    )
    parser.add_argument(
        "--voice",
        help=f"default voice of the build: a name ({DEFAULT_VOICE}, ...) or a .bin/.npy/.pt "
        f"voice pack [510, 1, 256] (default: {DEFAULT_VOICE}; random with --random-weights)",
    )
    parser.add_argument(
        "--weights-only",
        action="store_true",
        help="keep the compiled stages of --out and store the weights of --weights (or the "
        "default model) for them: another Kokoro v1.0 checkpoint without compiling",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random weights/voice with --random-weights",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="stages compiled at once, one process each (default: the number of cores)",
    )
    # the options below: left out, the target's default; one it cannot honour is refused
    parser.add_argument(
        "--lstm-backend",
        choices=LSTM_BACKENDS,
        help="a CPU's LSTM: the native kernel (default) or TVM's own; a GPU's is its own",
    )
    parser.add_argument(
        "--dense",
        choices=("native", "tvm"),
        help="conv1d/addmm on the native BLAS kernels (a CPU's default) or TVM's own "
        "lowering (a GPU's only)",
    )
    parser.add_argument(
        "--weight-dtype",
        choices=WEIGHT_DTYPES,
        help="a CPU's weights stored as int8 with a scale per output channel, dequantized where the "
        "kernels read them: auto (default) those on an int8 grid, lossless (all of the int8 "
        "checkpoint's quantized weights, none of a float32 one); int8 every convolution and "
        "linear weight (lossy off a grid); float32 none",
    )
    parser.add_argument(
        "--wire",
        choices=FORMATS,
        help="a browser build's large float32 weights on the wire, widened to float32 by "
        "the page: float16 (default), int8 with a float32 scale per row (4x smaller, "
        "0.03 more word errors: docs/browser.md), or float32",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="what the layers on int8 weights multiply in: auto (default) int8 where "
        "the target has AVX512_VNNI, else bf16 where it has AVX512_BF16, else fp32; int8 "
        "(int8 x int8, the inputs quantized per tile or per row), bf16, or fp32 (the "
        "float32 build's arithmetic)",
    )
    return BuildOptions(**vars(parser.parse_args(argv)))


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        build(options)
    except (ValueError, FileNotFoundError) as err:
        _report(err)
        return 2
    except Exception as err:
        if not getattr(err, "__notes__", None):
            raise  # failed before the build's log was opened: the traceback is all there is
        _report(err, f"{type(err).__name__}: ")  # the traceback is in the log
        return 1
    return 0


def _report(err: BaseException, kind: str = "") -> None:
    print(f"error: {kind}{err}", file=sys.stderr)
    for note in getattr(err, "__notes__", ()):
        print(note, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
