"""Which weights a build stores as int8 (``--weight-dtype``).

  float32  none: every weight in float32.
  int8     every convolution filter and linear weight the native kernels take, quantized
           per output channel; lossless where the checkpoint's values lie on an int8 grid,
           symmetric max / 127 quantization elsewhere.
  auto     (the default) the weights whose values lie on an int8 grid: all of Kokoro-82M
           v1.0 int8's quantized weights, none of a float32 checkpoint's.  Lossless: the
           build computes with the float32 values the checkpoint holds.

The grid is found by the native quantizer itself (cpp/include/kokoro_ext/quantized.h),
which reports the rows it could not put on one; kokoro_ext.build.passes.quantize then
sends the kernels that take the chosen weights to their int8 forms.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np
import tvm_ffi

from kokoro_ext.run import kernels, native

WeightDtype = Literal["auto", "int8", "float32"]
WEIGHT_DTYPES: tuple[str, ...] = ("auto", "int8", "float32")


def lossy_rows(weight: np.ndarray) -> int | None:
    """Output channels of ``weight`` that int8 would not hold exactly: a conv1d filter
    [C_out, C_in, K] or a linear weight [out, in]; None for any other array."""
    native.load()
    w = np.asarray(weight)
    if w.dtype != np.float32 or w.ndim not in (2, 3) or 0 in w.shape:
        return None
    if w.ndim == 3:
        blocks = (w.shape[0] + 7) // 8
        q = np.empty((blocks, w.shape[2], w.shape[1], 8), np.int8)
        scale = np.empty(blocks * 8, np.float32)
        transform, w = kernels.TAPS_FILTER_Q8, np.ascontiguousarray(w)
    else:
        w = np.ascontiguousarray(w.T)  # [in, out]: a scale per output column, as addmm takes it
        q, scale = np.empty(w.shape, np.int8), np.empty(w.shape[1], np.float32)
        transform = kernels.COLUMNS_Q8
    arrays = [tvm_ffi.from_dlpack(a) for a in (w, q, scale)]
    return int(tvm_ffi.get_global_func(transform)(*arrays))


def int8_weights(named: Iterable[tuple[str, np.ndarray]], dtype: WeightDtype) -> frozenset[str]:
    """The names of the weights to store as int8 under ``dtype``, of (name, array) pairs."""
    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {dtype!r}")
    if dtype == "float32":
        return frozenset()
    chosen = set()
    for name, array in named:
        lossy = lossy_rows(array)
        if lossy is not None and (dtype == "int8" or lossy == 0):
            chosen.add(name)
    return frozenset(chosen)
