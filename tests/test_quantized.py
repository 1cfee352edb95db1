"""Weight-only int8 (cpp/include/kokoro_ext/quantized.h): the quantizers find an int8 grid
exactly where there is one, the int8 kernels compute what the float32 kernels compute on
the dequantized weights, and the Winograd filters made from int8 taps are kept for the
filters a process uses again."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tvm_ffi

from kokoro_ext.build.precision import int8_weights, lossy_rows
from kokoro_ext.run import kernels, native


@pytest.fixture(scope="module", autouse=True)
def _native_loaded():
    native.load()


def _f(name):
    return tvm_ffi.get_global_func(name)


def _t(*arrays):
    return [tvm_ffi.from_dlpack(a) for a in arrays]


def _grid(rng, shape, step, axis_scales=None):
    """float32 values n * step, n int8 (step per leading row if ``axis_scales``)."""
    n = np.clip(np.round(rng.standard_normal(shape) * 30), -128, 127).astype(np.float32)
    steps = np.float32(step) if axis_scales is None else axis_scales.reshape((-1,) + (1,) * (len(shape) - 1))
    return (n * steps).astype(np.float32)


def _taps_q8(w):
    blocks = (w.shape[0] + 7) // 8
    q = np.empty((blocks, w.shape[2], w.shape[1], 8), np.int8)
    scale = np.empty(blocks * 8, np.float32)
    lossy = _f(kernels.TAPS_FILTER_Q8)(*_t(np.ascontiguousarray(w), q, scale))
    dequantized = (q.astype(np.float32) * scale.reshape(blocks, 1, 1, 8)).transpose(0, 3, 2, 1)
    return lossy, q, scale, dequantized.reshape(blocks * 8, w.shape[1], w.shape[2])[: w.shape[0]]


def test_a_per_tensor_grid_is_found_exactly():
    rng = np.random.default_rng(0)
    w = _grid(rng, (40, 24, 7), 0.0123)
    lossy, _, scale, dequantized = _taps_q8(w)
    assert lossy == 0
    np.testing.assert_array_equal(dequantized, w)
    assert np.all(scale[:40] == np.float32(0.0123))
    assert np.all(scale[40:] == 0)  # the zero rows past C_out


def test_a_grid_per_output_column_is_found_exactly_even_without_a_unit_value():
    rng = np.random.default_rng(1)
    steps = rng.uniform(0.001, 0.01, 50).astype(np.float32)
    w = _grid(rng, (50, 16), 1.0, steps)  # [out, in]: a step per output
    w[3] = np.float32(steps[3]) * np.array([3, -6, 9, 12] * 4, np.float32)  # no n = +-1: 3 steps
    assert lossy_rows(w) == 0
    wt = np.ascontiguousarray(w.T)
    q, scale = np.empty(wt.shape, np.int8), np.empty(wt.shape[1], np.float32)
    assert _f(kernels.COLUMNS_Q8)(*_t(wt, q, scale)) == 0
    np.testing.assert_array_equal(q.astype(np.float32) * scale, wt)


def test_values_off_a_grid_are_quantized_symmetrically_and_counted():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8, 3)).astype(np.float32)
    lossy, _, scale, dequantized = _taps_q8(w)
    assert lossy == 16
    largest = np.abs(w).reshape(16, -1).max(axis=1)
    np.testing.assert_allclose(scale[:16], largest / 127, rtol=1e-6)
    assert np.all(np.abs(dequantized - w) <= scale[:16, None, None] / 2 * (1 + 1e-6))


def test_the_build_chooses_the_weights_on_a_grid():
    rng = np.random.default_rng(3)
    on_grid = _grid(rng, (8, 4, 3), 0.5)
    off_grid = rng.standard_normal((8, 4, 3)).astype(np.float32)
    named = [("a.weight", on_grid), ("b.weight", off_grid), ("c.bias", np.ones(8, np.float32))]
    assert int8_weights(named, "auto") == {"a.weight"}
    assert int8_weights(named, "int8") == {"a.weight", "b.weight"}
    assert int8_weights(named, "float32") == frozenset()
    with pytest.raises(ValueError, match="weight dtype must be one of auto, int8, float32"):
        int8_weights(named, "bf16")


@pytest.mark.parametrize("c_out, c_in, taps, dilation, t", [
    (64, 48, 11, 5, 700),   # Winograd F(6, 6) in chunks
    (72, 64, 7, 1, 301),    # F(4, 7)
    (40, 22, 3, 3, 257),    # direct: Winograd does not pay at 3 taps and 40 channels
    (1024, 96, 3, 1, 20),   # direct, the filter larger than the input
])
def test_int8_convolutions_are_the_float32_convolutions_on_the_dequantized_filter(
    c_out, c_in, taps, dilation, t
):
    rng = np.random.default_rng(4)
    w = _grid(rng, (c_out, c_in, taps), 0.01)
    _, q, scale, _ = _taps_q8(w)
    x = rng.standard_normal((1, c_in, t)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    pad = dilation * (taps - 1) // 2
    packed = np.empty(q.shape, np.float32)
    _f(kernels.TAPS_FILTER)(*_t(w, packed))
    gw = np.empty(list(_f(kernels.WINOGRAD_FILTER_SHAPE)(c_out, c_in, taps)), np.float32)
    _f(kernels.WINOGRAD_FILTER)(*_t(w, gw))
    y_f, y_q, y_taps = (np.empty((1, c_out, t), np.float32) for _ in range(3))
    _f(kernels.CONV1D_WINOGRAD_IF_PAYS)(tvm_ffi.Shape([pad, dilation, taps]), *_t(x, packed, gw, bias, y_f))
    for _ in range(3):  # first use: transformed into scratch; second: kept; third: reused
        _f(kernels.CONV1D_WINOGRAD_Q8_IF_PAYS)(tvm_ffi.Shape([pad, dilation]), *_t(x, q, scale, bias, y_q))
        np.testing.assert_array_equal(y_q, y_f)
    _f(kernels.CONV1D_TAPS_Q8)(tvm_ffi.Shape([pad, dilation]), *_t(x, q, scale, bias, y_taps))
    _f(kernels.CONV1D_TAPS)(tvm_ffi.Shape([pad, dilation]), *_t(x, packed, bias, y_f))
    np.testing.assert_array_equal(y_taps, y_f)


@pytest.mark.parametrize("m, k, n", [(1, 128, 2048), (15, 96, 80), (100, 64, 300), (7, 40, 33)])
def test_int8_addmm_is_addmm_on_the_dequantized_weight(m, k, n):
    rng = np.random.default_rng(5)
    w = _grid(rng, (n, k), 1.0, rng.uniform(0.001, 0.01, n).astype(np.float32)).T.copy()
    q, scale = np.empty((k, n), np.int8), np.empty(n, np.float32)
    assert _f(kernels.COLUMNS_Q8)(*_t(w, q, scale)) == 0
    x = rng.standard_normal((m, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    y_q, y_f = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    _f(kernels.ADDMM_Q8)(*_t(bias, x, q, scale, y_q))
    _f(kernels.ADDMM)(*_t(bias, x, w, y_f))
    np.testing.assert_array_equal(y_q, y_f)


def test_a_winograd_filter_is_kept_from_its_second_use():
    _f(kernels.WINOGRAD_CACHE_CLEAR)()
    rng = np.random.default_rng(6)
    w = _grid(rng, (64, 64, 7), 0.02)
    _, q, scale, _ = _taps_q8(w)
    x = rng.standard_normal((1, 64, 200)).astype(np.float32)
    bias = np.zeros(64, np.float32)
    y = np.empty((1, 64, 200), np.float32)
    call = _f(kernels.CONV1D_WINOGRAD_Q8_IF_PAYS)
    kept = []
    for _ in range(3):
        call(tvm_ffi.Shape([3, 1]), *_t(x, q, scale, bias, y))
        kept.append(tuple(_f(kernels.WINOGRAD_CACHE_STATS)()))
    size = 10 * 8 * 64 * 8 * 4  # F(4, 7): 10 points x 8 blocks x 64 channels x 8 lanes, float32
    assert kept == [(0, 0), (size, 1), (size, 1)]
    scale2 = scale * 2  # other scales at the same address: another filter, not the kept one
    call(tvm_ffi.Shape([3, 1]), *_t(x, q, scale2, bias, y))
    assert tuple(_f(kernels.WINOGRAD_CACHE_STATS)()) == (0, 0)
    _f(kernels.WINOGRAD_CACHE_CLEAR)()


def test_no_winograd_filter_is_kept_with_a_zero_budget():
    code = """
import numpy as np, tvm_ffi
from kokoro_ext.run import kernels, native
native.load()
f = tvm_ffi.get_global_func
q = np.ones((8, 7, 64, 8), np.int8); s = np.full(64, 0.01, np.float32)
x = np.ones((1, 64, 200), np.float32); b = np.zeros(64, np.float32); y = np.empty((1, 64, 200), np.float32)
for _ in range(3):
    f(kernels.CONV1D_WINOGRAD_Q8_IF_PAYS)(tvm_ffi.Shape([3, 1]), *[tvm_ffi.from_dlpack(a) for a in (x, q, s, b, y)])
print(tuple(f(kernels.WINOGRAD_CACHE_STATS)()), f(kernels.WINOGRAD_CACHE_BUDGET)())
"""
    env = dict(os.environ, KOKORO_EXT_WINOGRAD_CACHE_MB="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(0, 0) 0"


def test_the_winograd_cache_keeps_192_mb_natively_by_default():
    """Natively the cache's default budget is 192 MB (a browser's build keeps none:
    tests/test_browser_wasm.py)."""
    code = """
import tvm_ffi
from kokoro_ext.run import kernels, native
native.load()
print(tvm_ffi.get_global_func(kernels.WINOGRAD_CACHE_BUDGET)())
"""
    env = {k: v for k, v in os.environ.items() if k != "KOKORO_EXT_WINOGRAD_CACHE_MB"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout) == 192 << 20


def test_wrong_dtypes_are_named():
    x = np.zeros((1, 8, 10), np.float32)
    q = np.zeros((1, 3, 8, 8), np.float32)  # float where int8 belongs
    scale, bias, y = np.ones(8, np.float32), np.zeros(8, np.float32), np.empty((1, 8, 10), np.float32)
    with pytest.raises(ValueError, match=r"kokoro_ext.conv1d_taps_q8: taps must be int8"):
        _f(kernels.CONV1D_TAPS_Q8)(tvm_ffi.Shape([1, 1]), *_t(x, q, scale, bias, y))
    with pytest.raises(ValueError, match=r"kokoro_ext.addmm_q8: scale must have shape \[8\]"):
        _f(kernels.ADDMM_Q8)(*_t(bias, np.zeros((2, 4), np.float32), np.zeros((4, 8), np.int8),
                                np.ones(3, np.float32), np.empty((2, 8), np.float32)))
