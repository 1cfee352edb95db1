"""Run the products.h kernels (conv1d_winograd, conv1d_taps, addmm) on fixed inputs and
save their outputs: ``python tests/products_probe.py OUT.npz``, with $KOKORO_EXT_LIBRARY
naming the kernel library to load (tests/test_products_isa.py).

After those (``FLOAT_OUTPUTS`` of them), pairs: each int8-weight kernel's output and the
float32 kernel's on the same weights dequantized, which must be equal bit for bit
(``PAIR_OUTPUTS``: the convolutions, the addmms and an LSTM, whose W_hh panels of 160
gates are a whole and a partial panel, one and two spans of registers on AVX-512, two and
three on AVX2).  Last, where this CPU has the instructions, the low-precision kernels'
outputs (low_precision.h, compiled for them whatever the library's -march):
conv1d_taps_q8_int8's on the convolutions and addmm_q8_int8's on the addmms, then
conv1d_taps_q8_bf16's on the convolutions; none of either without."""

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


LSTM = (2, 9, 20, 40)  # D, T, I, H

FLOAT_OUTPUTS = 8
PAIR_OUTPUTS = 2 * (len(CONVS) + len(ADDMMS) + 1)
LOW_PRECISION_KERNELS = ("kokoro_ext.conv1d_taps_q8_int8", "kokoro_ext.conv1d_taps_q8_bf16")


def _low_precision(convs, addmms, features) -> list[np.ndarray]:
    """Each low-precision kernel the host can run, on every convolution of ``convs`` (and
    the int8 addmm on every one of ``addmms``)."""
    f = tvm_ffi.get_global_func
    T = tvm_ffi.from_dlpack
    outputs = []
    for kernel, needs in zip(LOW_PRECISION_KERNELS, ("avx512vnni", "avx512bf16")):
        if needs not in features:
            continue
        for x, w, b, k, d in convs:
            w = np.ascontiguousarray(w, np.float32)
            blocks = (w.shape[0] + 7) // 8
            if kernel == "kokoro_ext.conv1d_taps_q8_int8":  # the taps in quads, with their sums
                filter_ = (np.empty((blocks, k, (w.shape[1] + 3) // 4, 8, 4), np.int8),
                           np.empty(blocks * 8, np.int32), np.empty(blocks * 8, np.float32))
                f("kokoro_ext.taps_filter_q8_quads")(T(w), *map(T, filter_))
            else:
                filter_ = (np.empty((blocks, k, w.shape[1], 8), np.int8),
                           np.empty(blocks * 8, np.float32))
                f("kokoro_ext.taps_filter_q8")(T(w), *map(T, filter_))
            y = np.empty((1, w.shape[0], x.shape[2]), np.float32)
            f(kernel)(tvm_ffi.Shape([d * (k - 1) // 2, d]), T(x), *map(T, filter_), T(b), T(y))
            outputs.append(y)
        if needs != "avx512vnni":
            continue
        for x, w, b in addmms:
            k, n = w.shape
            quads = np.empty(((n + 7) // 8, (k + 3) // 4, 8, 4), np.int8)
            sums, scale = np.empty(n, np.int32), np.empty(n, np.float32)
            f("kokoro_ext.columns_q8_quads")(T(w), T(quads), T(sums), T(scale))
            y = np.empty((x.shape[0], n), np.float32)
            f("kokoro_ext.addmm_q8_int8")(T(b), T(x), T(quads), T(sums), T(scale), T(y))
            outputs.append(y)
    return outputs


def _q8_pairs(convs, addmms) -> list[np.ndarray]:
    """(int8 kernel, float32 kernel on the dequantized weights) outputs, pair by pair."""
    f = tvm_ffi.get_global_func
    T = tvm_ffi.from_dlpack
    pairs = []
    for x, w, b, k, d in convs:
        pad = d * (k - 1) // 2
        w = np.ascontiguousarray(w, np.float32)
        blocks = (w.shape[0] + 7) // 8
        q = np.empty((blocks, k, w.shape[1], 8), np.int8)
        scale = np.empty(blocks * 8, np.float32)
        f("kokoro_ext.taps_filter_q8")(T(w), T(q), T(scale))
        w_dq = np.ascontiguousarray(
            (q.astype(np.float32) * scale.reshape(blocks, 1, 1, 8)).transpose(0, 3, 2, 1)
            .reshape(blocks * 8, w.shape[1], k)[: w.shape[0]])
        y_q = np.empty((1, w.shape[0], x.shape[2]), np.float32)
        y_f = np.empty_like(y_q)
        f("kokoro_ext.conv1d_winograd_q8_if_pays")(tvm_ffi.Shape([pad, d]), T(x), T(q), T(scale), T(b), T(y_q))
        f("kokoro_ext.conv1d_winograd_if_pays")(
            tvm_ffi.Shape([pad, d, k]), T(x), T(pack_taps(w_dq)), T(winograd_filter(w_dq)), T(b), T(y_f))
        pairs += [y_q, y_f]
    for x, w, b in addmms:
        w = np.ascontiguousarray(w, np.float32)
        q = np.empty(w.shape, np.int8)
        scale = np.empty(w.shape[1], np.float32)
        f("kokoro_ext.columns_q8")(T(w), T(q), T(scale))
        w_dq = q.astype(np.float32) * scale
        y_q = np.empty((x.shape[0], w.shape[1]), np.float32)
        y_f = np.empty_like(y_q)
        f("kokoro_ext.addmm_q8")(T(b), T(x), T(q), T(scale), T(y_q))
        f("kokoro_ext.addmm")(T(b), T(x), T(w_dq), T(y_f))
        pairs += [y_q, y_f]
    return pairs + _lstm_pair()


def _lstm_pair() -> list[np.ndarray]:
    """lstm_q8's y (its W_hh in int8 panels) and lstm's on the dequantized weights."""
    f = tvm_ffi.get_global_func
    T = tvm_ffi.from_dlpack
    D, steps, I, H = LSTM
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, steps, I), dtype=np.float32)
    lengths = np.array([steps], np.int64)
    h0 = rng.standard_normal((D, 1, H), dtype=np.float32) * np.float32(0.5)
    bias = rng.standard_normal((1, D, 4 * H), dtype=np.float32) * np.float32(0.1)
    w_ih = rng.standard_normal((D, 4 * H, I), dtype=np.float32) / np.float32(np.sqrt(I))
    w_rest = np.zeros((0, D, 4 * H, D * H), np.float32)
    w_hh = rng.standard_normal((1, D, 4 * H, H), dtype=np.float32) / np.float32(np.sqrt(H))
    q_ih, s_ih = np.empty(w_ih.shape, np.int8), np.empty(w_ih.shape[:-1], np.float32)
    q_rest, s_rest = np.empty(w_rest.shape, np.int8), np.empty(w_rest.shape[:-1], np.float32)
    panels = np.empty((1, D, -(-4 * H // 128), H, 128), np.int8)
    s_hh = np.empty(w_hh.shape[:-1], np.float32)
    f("kokoro_ext.lstm_weights_q8")(T(w_ih), T(q_ih), T(s_ih))
    f("kokoro_ext.lstm_weights_q8")(T(w_rest), T(q_rest), T(s_rest))
    q_hh = np.empty(w_hh.shape, np.int8)
    f("kokoro_ext.lstm_weights_q8")(T(w_hh), T(q_hh), T(np.empty_like(s_hh)))
    f("kokoro_ext.lstm_recurrent_q8")(T(w_hh), T(panels), T(s_hh))
    outs = {}
    for name, weights in (
        ("kokoro_ext.lstm_q8", (q_ih, s_ih, q_rest, s_rest, panels, s_hh)),
        ("kokoro_ext.lstm", (q_ih * s_ih[..., None], w_rest, q_hh * s_hh[..., None])),
    ):
        y = np.empty((1, steps, D * H), np.float32)
        h_n, c_n = np.empty_like(h0), np.empty_like(h0)
        arrays = (x, lengths, h0, h0, *weights, bias, y, h_n, c_n)
        f(name)(tvm_ffi.Shape([0]), *(T(np.ascontiguousarray(a)) for a in arrays))
        outs[name] = y
    return [outs["kokoro_ext.lstm_q8"], outs["kokoro_ext.lstm"]]


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
    assert len(results) == FLOAT_OUTPUTS
    from kokoro_ext.run.cpu import HostCPU

    low = _low_precision(convs, addmms, HostCPU.detect().enabled)
    np.savez(out, *results, *_q8_pairs(convs, addmms), *low)


if __name__ == "__main__":
    main(sys.argv[1])
