"""Run the products.h kernels (conv1d_winograd, conv1d_taps, addmm) on fixed inputs and
save their outputs: ``python tests/products_probe.py OUT.npz``, with $KOKORO_EXT_LIBRARY
naming the kernel library to load (tests/test_products_isa.py)."""

import sys

import numpy as np
import tvm_ffi

from kokoro_ext.build.passes.winograd import pack_taps, winograd_filter
from kokoro_ext.run import native

CONVS = [(64, 48, 700, 11, 5), (64, 64, 301, 7, 1), (40, 22, 257, 3, 3)]  # C_in, C_out, T, K, d
ADDMMS = [(15, 96, 80), (1, 40, 300), (70, 33, 50)]  # M, K, N


def inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    convs = [
        (rng.standard_normal((1, ci, t), dtype=np.float32),
         rng.standard_normal((co, ci, k), dtype=np.float32) / np.sqrt(ci * k),
         rng.standard_normal(co, dtype=np.float32), k, d)
        for ci, co, t, k, d in CONVS
    ]
    addmms = [
        (rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32),
         rng.standard_normal(n, dtype=np.float32))
        for m, k, n in ADDMMS
    ]
    return convs, addmms


def main(out: str) -> None:
    native.load()
    winograd = tvm_ffi.get_global_func("kokoro_ext.conv1d_winograd")
    taps = tvm_ffi.get_global_func("kokoro_ext.conv1d_taps")
    addmm = tvm_ffi.get_global_func("kokoro_ext.addmm")
    convs, addmms = inputs()
    results = []
    for x, w, b, k, d in convs:
        pad = d * (k - 1) // 2
        y = np.empty((1, w.shape[0], x.shape[2]), np.float32)
        if w.shape[0] >= 48:
            winograd(tvm_ffi.Shape([pad, d, k]), *[tvm_ffi.from_dlpack(a) for a in (x, winograd_filter(w), b, y)])
            results.append(y.copy())
        taps(tvm_ffi.Shape([pad, d]), *[tvm_ffi.from_dlpack(a) for a in (x, pack_taps(w), b, y)])
        results.append(y.copy())
    for x, w, b in addmms:
        y = np.empty((x.shape[0], w.shape[1]), np.float32)
        addmm(*[tvm_ffi.from_dlpack(a) for a in (b, x, w, y)])
        results.append(y)
    np.savez(out, *results)


if __name__ == "__main__":
    main(sys.argv[1])
