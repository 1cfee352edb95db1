"""Low-precision products (cpp/include/kokoro_ext/low_precision.h) and the choice of them
(kokoro_ext.build.precision).

conv1d_taps_q8_int8 computes exactly its definition: each tile of 256 output columns
quantizes its input window with one scale, max|x| / 127, and sums the int8 products in
int32; conv1d_taps_q8_bf16 is the float64 convolution of the input rounded to bf16.  Both
take the float32 kernel where their channel grouping does not divide the input channels.
addmm_q8_int8 computes its definition: each row of x quantized to unsigned bytes with a
scale and zero point of its own, the int8 products summed in int32.  A host without the instruction set gets an error naming
it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi

from kokoro_ext.build.precision import PRECISION_FEATURES, LayerProducts, layer_products, products
from kokoro_ext.run import cpu, kernels, native

HOST = cpu.HostCPU.detect().enabled
HAS = {p: features <= HOST for p, features in PRECISION_FEATURES.items()}
TILE = 256  # output columns per quantized window (dense.cc's kColumnTile)


@pytest.fixture(scope="module", autouse=True)
def _native_loaded():
    native.load()


def _t(*arrays):
    return [tvm_ffi.from_dlpack(a) for a in arrays]


def _weight(rng, c_out, c_in, k):
    """A [C_out, C_in, K] filter on an int8 grid per output channel, as the checkpoint's are."""
    return (np.clip(np.round(rng.standard_normal((c_out, c_in, k)) * 30), -127, 127)
            * rng.uniform(0.001, 0.01, (c_out, 1, 1))).astype(np.float32)


def _filter(w):
    """(int8 taps packed as taps_filter_q8 packs them, scales, dequantized [C_out, C_in, K])."""
    c_out, c_in, k = w.shape
    blocks = (c_out + 7) // 8
    q = np.empty((blocks, k, c_in, 8), np.int8)
    scale = np.empty(blocks * 8, np.float32)
    tvm_ffi.get_global_func(kernels.TAPS_FILTER_Q8)(*_t(w, q, scale))
    dq = (q.astype(np.float64) * scale.reshape(blocks, 1, 1, 8)).transpose(0, 3, 2, 1)
    return q, scale, dq.reshape(blocks * 8, c_in, k)[:c_out]


def _quads(w):
    """(quads, sums, scales) as taps_filter_q8_quads packs w for the int8 products."""
    shape = tuple(tvm_ffi.get_global_func(kernels.TAPS_FILTER_Q8_QUADS_SHAPE)(*w.shape))
    quads = np.empty(shape, np.int8)
    sums, scale = np.empty(shape[0] * 8, np.int32), np.empty(shape[0] * 8, np.float32)
    assert tvm_ffi.get_global_func(kernels.TAPS_FILTER_Q8_QUADS)(*_t(w, quads, sums, scale)) == 0
    return quads, sums, scale


def _conv(x, w, b, pad, d):
    """float64 conv1d of one batch element x [C_in, T]."""
    k, t_out = w.shape[2], x.shape[1] + 2 * pad - d * (w.shape[2] - 1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad)))
    return b[:, None] + sum(w[:, :, j] @ xp[:, j * d : j * d + t_out] for j in range(k))


def _int8_definition(x, w, b, pad, d):
    """conv1d_taps_q8_int8 by its definition, in float64."""
    k, t_out = w.shape[2], x.shape[1] + 2 * pad - d * (w.shape[2] - 1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad + TILE + d * k)))
    y = np.empty((w.shape[0], t_out))
    for t0 in range(0, t_out, TILE):
        width = min(TILE, t_out - t0)
        window = xp[:, t0 : t0 + width + d * (k - 1)]
        peak = np.abs(window).max()
        step = np.float64(np.float32(peak) / np.float32(127)) if peak > 0 else 1.0
        q = np.rint(window.astype(np.float32) * np.float32(1 / np.float32(step)))
        y[:, t0 : t0 + width] = step * sum(w[:, :, j] @ q[:, j * d : j * d + width] for j in range(k))
    return y + b[:, None]


def _bf16(a):
    """a rounded to bf16, to nearest even, as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


SHAPES = [  # C_out, C_in, K, dilation, T
    (128, 128, 3, 1, 600),   # a generator resblock's, three tiles
    (64, 64, 11, 5, 301),    # long taps, dilated: windows reach past their tile
    (1024, 96, 3, 1, 20),    # the filter larger than the input
    (40, 24, 7, 3, 257),     # output channels not a multiple of the packing
    (32, 32, 3, 1, 4100),    # many tiles: each work item quantizes its own window
    (48, 38, 3, 1, 300),     # input channels not in whole quads (the decoder's 514, 1090)
    (16, 22, 5, 1, 4100),    # the same where each work item quantizes its own window
]


def _run(name, rng, c_out, c_in, k, d, t, batch=2):
    w = _weight(rng, c_out, c_in, k)
    q, scale, dq = _filter(w)
    filter_ = _quads(w) if name == kernels.CONV1D_TAPS_Q8_INT8 else (q, scale)
    x = rng.standard_normal((batch, c_in, t)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    pad = d * (k - 1) // 2
    y = np.empty((batch, c_out, t), np.float32)
    tvm_ffi.get_global_func(name)(tvm_ffi.Shape([pad, d]), *_t(x, *filter_, b, y))
    return x, dq, b, pad, y, (q, scale)


@pytest.mark.parametrize("c_out, c_in, k", [shape[:3] for shape in SHAPES])
def test_quads_hold_the_int8_taps(c_out, c_in, k):
    """taps_filter_q8_quads: taps_filter_q8's int8 taps [blocks, K, C_in, 8] in quads of input
    channels [blocks, K, ceil(C_in / 4), 8, 4], zero taps past C_in, each channel's sum."""
    w = _weight(np.random.default_rng(c_out + k), c_out, c_in, k)
    (q, scale, _), (quads, sums, scale4) = _filter(w), _quads(w)
    assert quads.shape == ((c_out + 7) // 8, k, (c_in + 3) // 4, 8, 4)
    padded = np.zeros(q.shape[:2] + (quads.shape[2] * 4, 8), np.int8)
    padded[:, :, :c_in] = q
    # quads[b, k, p, r, j] = q[b, k, 4 p + j, r]
    expected = padded.reshape(q.shape[0], k, quads.shape[2], 4, 8).transpose(0, 1, 2, 4, 3)
    np.testing.assert_array_equal(quads, expected)
    np.testing.assert_array_equal(sums, q.astype(np.int64).sum((1, 2)).reshape(-1))
    np.testing.assert_array_equal(scale4, scale)


@pytest.mark.skipif(not HAS["int8"], reason="this CPU lacks AVX512_VNNI")
@pytest.mark.parametrize("c_out, c_in, k, d, t", SHAPES)
def test_int8_products_compute_their_definition(c_out, c_in, k, d, t):
    rng = np.random.default_rng(c_out + k)
    x, w, b, pad, y, _ = _run(kernels.CONV1D_TAPS_Q8_INT8, rng, c_out, c_in, k, d, t)
    for i in range(x.shape[0]):
        expected = _int8_definition(x[i], w, b, pad, d)
        exact = _conv(x[i], w, b, pad, d)
        rms = np.sqrt(np.mean((exact - b[:, None]) ** 2))
        assert np.abs(y[i] - expected).max() <= 1e-5 * rms
        snr = 10 * np.log10(np.mean((exact - b[:, None]) ** 2) / np.mean((y[i] - exact) ** 2))
        assert snr > 35, snr  # 8 bits of a Gaussian's range: about 40 dB


@pytest.mark.skipif(not HAS["bf16"], reason="this CPU lacks AVX512_BF16")
@pytest.mark.parametrize("c_out, c_in, k, d, t", SHAPES)
def test_bf16_products_are_the_convolution_of_the_rounded_input(c_out, c_in, k, d, t):
    rng = np.random.default_rng(c_out + k)
    x, w, b, pad, y, _ = _run(kernels.CONV1D_TAPS_Q8_BF16, rng, c_out, c_in, k, d, t)
    for i in range(x.shape[0]):
        expected = _conv(_bf16(x[i]), w, b, pad, d)
        scale = np.abs(expected).max()
        assert np.abs(y[i] - expected).max() <= 2e-6 * scale


@pytest.mark.parametrize("name, c_in", [(kernels.CONV1D_TAPS_Q8_BF16, 21)])
def test_channels_the_grouping_does_not_divide_take_the_float32_products(name, c_in):
    rng = np.random.default_rng(7)
    x, _, b, pad, y, (q, scale) = _run(name, rng, 40, c_in, 3, 3, 100)
    y_f = np.empty_like(y)
    tvm_ffi.get_global_func(kernels.CONV1D_TAPS_Q8)(tvm_ffi.Shape([pad, 3]), *_t(x, q, scale, b, y_f))
    np.testing.assert_array_equal(y, y_f)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_host_without_the_instructions_gets_an_error_naming_them(precision):
    if HAS[precision]:
        pytest.skip(f"this CPU has what {precision} products need")
    name = kernels.CONV1D_TAPS_Q8_INT8 if precision == "int8" else kernels.CONV1D_TAPS_Q8_BF16
    feature = "avx512vnni" if precision == "int8" else "avx512bf16"
    with pytest.raises(RuntimeError, match=f"lacks \\({feature}\\).*--precision fp32"):
        _run(name, np.random.default_rng(0), 16, 16, 3, 1, 50)
    if precision == "int8":
        _, _, quads, sums, scale = _columns(np.random.default_rng(0), 16, 8)
        x, b, y = np.ones((3, 16), np.float32), np.zeros(8, np.float32), np.empty((3, 8), np.float32)
        with pytest.raises(RuntimeError, match="lacks \\(avx512vnni\\).*--precision fp32"):
            tvm_ffi.get_global_func(kernels.ADDMM_Q8_INT8)(*_t(b, x, quads, sums, scale, y))


def _columns(rng, k, n):
    """(columns_q8's q [K, N] and scales, columns_q8_quads' quads, sums and scales) of a
    weight [K, N] on a grid per column, as the int8 checkpoint's are."""
    w = (np.clip(np.round(rng.standard_normal((k, n)) * 30), -127, 127)
         * rng.uniform(0.001, 0.01, n)).astype(np.float32)
    q, scale = np.empty((k, n), np.int8), np.empty(n, np.float32)
    tvm_ffi.get_global_func(kernels.COLUMNS_Q8)(*_t(w, q, scale))
    quads = np.empty(((n + 7) // 8, (k + 3) // 4, 8, 4), np.int8)
    assert tuple(tvm_ffi.get_global_func(kernels.COLUMNS_Q8_QUADS_SHAPE)(k, n)) == quads.shape
    sums, scale4 = np.empty(n, np.int32), np.empty(n, np.float32)
    lossy = tvm_ffi.get_global_func(kernels.COLUMNS_Q8_QUADS)(*_t(w, quads, sums, scale4))
    assert lossy == 0
    return q, scale, quads, sums, scale4


ADDMM_SHAPES = [  # M, K, N
    (101, 768, 768),  # ALBERT's, one tile of rows
    (300, 96, 40),    # two tiles of rows; N not a multiple of the packing
    (2, 30, 13),      # two rows; K not a multiple of a quad
    (17, 64, 2048),
]


@pytest.mark.parametrize("m, k, n", ADDMM_SHAPES)
def test_quads_hold_the_int8_columns(m, k, n):
    q, scale, quads, sums, scale4 = _columns(np.random.default_rng(k), k, n)
    padded = np.zeros((quads.shape[1] * 4, quads.shape[0] * 8), np.int8)
    padded[:k, :n] = q
    # quads[b, p, r, j] = q[4 p + j, 8 b + r]
    expected = padded.reshape(quads.shape[1], 4, quads.shape[0], 8).transpose(2, 0, 3, 1)
    np.testing.assert_array_equal(quads, expected)
    np.testing.assert_array_equal(sums, q.astype(np.int64).sum(0))
    np.testing.assert_array_equal(scale4, scale)


@pytest.mark.skipif(not HAS["int8"], reason="this CPU lacks AVX512_VNNI")
@pytest.mark.parametrize("m, k, n", ADDMM_SHAPES)
def test_int8_addmm_computes_its_definition(m, k, n):
    rng = np.random.default_rng(m + k)
    q, scale, quads, sums, scale4 = _columns(rng, k, n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, :] = 0  # a row of zeros has scale 1 and gives the bias
    x[-1, :] = np.abs(x[-1, :])  # a row of one sign: zero point 0, all 255 steps its own
    b = rng.standard_normal(n).astype(np.float32)
    y = np.empty((m, n), np.float32)
    tvm_ffi.get_global_func(kernels.ADDMM_Q8_INT8)(*_t(b, x, quads, sums, scale4, y))
    # each row over 255 steps of its range with 0 in it, a zero point of its own
    lo = np.minimum(x.min(1, keepdims=True), 0)
    hi = np.maximum(x.max(1, keepdims=True), 0)
    step = np.where(hi > lo, (hi - lo) / np.float32(255), np.float32(1)).astype(np.float32)
    zero = np.clip(np.rint(-lo / step), 0, 255)
    xq = np.clip(np.rint(x * (np.float32(1) / step)) + zero, 0, 255) - zero
    w = q.astype(np.float64) * scale
    expected = b + (xq @ q.astype(np.float64)) * step.astype(np.float64) * scale
    exact = b + x.astype(np.float64) @ w
    rms = np.sqrt(np.mean((exact - b) ** 2))
    assert np.abs(y - expected).max() <= 1e-5 * rms
    np.testing.assert_array_equal(y[0], b)
    snr = 10 * np.log10(np.mean((exact - b) ** 2) / np.mean((y - exact) ** 2))
    assert snr > 35, snr


ZEN4 = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16"})
ROCKET_LAKE = ZEN4 - {"avx512bf16"}
COOPER_LAKE_LIKE = ZEN4 - {"avx512vnni"}
ZEN3 = frozenset({"avx2", "fma"})


@pytest.mark.parametrize("features, expected", [
    (ZEN4, "int8"), (ROCKET_LAKE, "int8"), (COOPER_LAKE_LIKE, "bf16"), (ZEN3, "fp32"),
])
def test_auto_picks_what_the_target_has(features, expected):
    assert products("auto", features, int8=True) == expected
    assert products("auto", features, int8=False) == "fp32"  # nothing to multiply in int8
    assert products("fp32", features, int8=True) == "fp32"


def test_a_precision_the_target_or_the_weights_cannot_take_is_refused():
    with pytest.raises(ValueError, match="--precision int8 needs avx512vnni"):
        products("int8", COOPER_LAKE_LIKE, int8=True)
    with pytest.raises(ValueError, match="needs avx512bf16, avx512bw, avx512f, avx512vl"):
        products("bf16", ZEN3, int8=True)
    with pytest.raises(ValueError, match="stores none"):
        products("bf16", ZEN4, int8=False)
    with pytest.raises(ValueError, match="precision must be one of auto, int8, bf16, fp32"):
        products("fp16", ZEN4, int8=True)


def test_int8_products_take_the_long_convolutions_and_the_linear_layers_over_sequences():
    assert layer_products("int8", ZEN4, "text") == LayerProducts(
        long="int8", direct="bf16", linear="int8", transposed="int8"
    )
    assert layer_products("int8", ZEN4, "decoder") == LayerProducts(
        long="int8", direct="int8", linear="int8", transposed="int8"
    )
    assert layer_products("int8", ROCKET_LAKE, "prosody") == LayerProducts(
        long="int8", linear="int8", transposed="int8"
    )
    assert layer_products("bf16", COOPER_LAKE_LIKE, "decoder") == LayerProducts(direct="bf16")
    assert layer_products("fp32", ZEN4, "decoder") == LayerProducts()
