"""Which weights a build stores as int8 (``--weight-dtype``), and in what precision its
convolutions multiply (``--precision``).

  float32  none: every weight in float32.
  int8     every convolution filter, linear weight and LSTM weight the native kernels
           take, quantized per output channel (per gate row of each LSTM layer and
           direction); lossless where the checkpoint's values lie on an int8 grid,
           symmetric max / 127 quantization elsewhere.
  auto     (the default) the weights whose values lie on an int8 grid: all of Kokoro-82M
           v1.0 int8's quantized weights, none of a float32 checkpoint's.  Lossless: the
           build computes with the float32 values the checkpoint holds.

The grid is found by the native quantizer the build will apply to the weight
(cpp/include/kokoro_ext/quantized.h), which reports the rows it could not put on one;
kokoro_ext.build.passes.quantize then sends the kernels that take the chosen weights to
their int8 forms.  Its rows depend on the kernel: a conv1d filter [C_out, C_in, K] has one
per output channel, an LSTM's [D, 4H, I] input weights one per direction and gate, so a
3-D weight is an LSTM's when its name says so (``LSTM_WEIGHTS``).

The products (``--precision``) of the layers on int8 weights, chosen per layer by
measured error and speed (bench/quality.py's word error rate on the real model):

  fp32     float32: the int8 weights dequantized where the kernels read them (Winograd on
           the generator's long convolutions); the float32 build's sums, in another order.
  int8     on the generator's long convolutions (those Winograd takes in float32), int8 x
           int8 with exact int32 sums (AVX512_VNNI), each convolution's input quantized per
           tile of 256 columns (kokoro_ext/low_precision.h): 1.4-2.2x float32 Winograd's
           speed; the linear layers over a sequence (ALBERT's, the predictor's) int8 x
           int8 with each input row quantized (as ONNX Runtime's dynamic quantization
           does, per row): 2-4x the float32 product's speed; the generator's upsampling
           (transposed) convolutions, whose weights the checkpoint holds in float32,
           quantized at build time per output channel and phase and run as two-tap
           int8 convolutions (kokoro_ext.build.passes.quantize): 3x float32's speed,
           about 40 dB from it, no recognition error more on either set of
           bench/quality.py; the decoder's other convolutions (1024 channels at the
           frame rate) int8 too, each input tile quantized as the long ones' are; the
           other stages' convolutions as bf16 does where the target has AVX512_BF16,
           else float32.  int8 on the text encoder's and the prosody predictor's
           convolutions as well cost 3 more recognition errors on the plain set; on the
           decoder's, none (10 errors against the float32 build's 13, 33 against 32 on
           the written set).
  bf16     the convolutions Winograd does not take, in bf16 x int8-as-bf16 with float32
           sums (AVX512_BF16); Winograd stays float32 (bf16 inputs through its transforms
           lose 10-30 dB).
  auto     (the default) int8 where the target has AVX512_VNNI, else bf16 where it has
           AVX512_BF16, else fp32; fp32 whenever no weight is int8.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import tvm_ffi

from kokoro_ext.run import kernels, native

WeightDtype = Literal["auto", "int8", "float32"]
WEIGHT_DTYPES: tuple[str, ...] = ("auto", "int8", "float32")
Precision = Literal["auto", "int8", "bf16", "fp32"]
PRECISIONS: tuple[str, ...] = ("auto", "int8", "bf16", "fp32")
#: The products a build computes with: a Precision other than auto.
Products = Literal["int8", "bf16", "fp32"]
#: What each low precision needs of the target (LLVM's names, as in the manifest).
PRECISION_FEATURES: dict[str, frozenset[str]] = {
    "int8": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512vnni"}),
    "bf16": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512bf16"}),
}

#: The weights of kokoro_ext.build.export.PackedLSTM (the last component of a parameter's
#: name) that the LSTM kernel takes as int8.
LSTM_WEIGHTS: frozenset[str] = frozenset({"w_ih_first", "w_ih_rest", "w_hh"})


def lossy_rows(weight: np.ndarray, lstm: bool = False) -> int | None:
    """Rows of ``weight`` that int8 would not hold exactly, a row being what the quantizer
    of the kernel taking it scales as one: with ``lstm``, an LSTM's weight [..., 4H, n], a
    row per all but the last axis (an empty one, a one-layer LSTM's w_ih_rest, has none);
    else an output channel of a conv1d filter [C_out, C_in, K] or a linear weight
    [out, in].  None for any other array."""
    native.load()
    w = np.asarray(weight)
    if lstm:
        if w.dtype != np.float32 or w.ndim not in (3, 4):
            return None
        w = np.ascontiguousarray(w)
        q, scale = np.empty(w.shape, np.int8), np.empty(w.shape[:-1], np.float32)
        arrays = [tvm_ffi.from_dlpack(a) for a in (w, q, scale)]
        return int(tvm_ffi.get_global_func(kernels.LSTM_WEIGHTS_Q8)(*arrays))
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
        lossy = lossy_rows(array, lstm=name.rpartition(".")[2] in LSTM_WEIGHTS)
        if lossy is not None and (dtype == "int8" or lossy == 0):
            chosen.add(name)
    return frozenset(chosen)


def products(precision: Precision, features: Iterable[str], int8: bool) -> Products:
    """The products a build computes with, for ``precision`` on a target with ``features``
    when some weights are ``int8`` (the low precisions multiply int8 weights only).
    ValueError for a precision the target or the weights cannot take."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    features = frozenset(features)
    if precision == "auto":
        if not int8:
            return "fp32"
        return next((p for p in ("int8", "bf16") if PRECISION_FEATURES[p] <= features), "fp32")
    if precision == "fp32":
        return "fp32"
    missing = sorted(PRECISION_FEATURES[precision] - features)
    if missing:
        raise ValueError(
            f"--precision {precision} needs {', '.join(missing)}, which the target lacks; "
            "use --precision auto (it picks what the target has) or fp32"
        )
    if not int8:
        raise ValueError(
            f"--precision {precision} multiplies int8 weights, and this build stores none "
            "(--weight-dtype float32, or a float32 checkpoint with --weight-dtype auto): use "
            "--weight-dtype int8, or --precision fp32"
        )
    return precision


@dataclass(frozen=True)
class LayerProducts:
    """What a build's layers on int8 weights multiply in: the long stride-1 convolutions
    (the generator's, which Winograd takes in float32), the other convolutions, and the
    linear layers over a sequence (ALBERT's, the predictor's: x [rows, in] with rows the
    input's length; a style vector's [1, in] stay float32)."""

    long: Literal["int8", "fp32"] = "fp32"
    direct: Literal["int8", "bf16", "fp32"] = "fp32"
    linear: Literal["int8", "fp32"] = "fp32"
    #: The generator's upsampling (transposed) convolutions, whose weights the checkpoint
    #: holds in float32: int8 quantizes them at build time, per output channel and phase.
    transposed: Literal["int8", "fp32"] = "fp32"


#: The stage whose other (direct) convolutions take int8 products where the build's do:
#: the decoder's, 1024 channels at the frame rate.  The text encoder's and the prosody
#: predictor's keep bf16 (int8 there cost 3 recognition errors on the plain set).
INT8_DIRECT_STAGE = "decoder"


def layer_products(precision: Products, features: Iterable[str], stage: str) -> LayerProducts:
    """The per-layer products of ``precision`` in ``stage`` (kokoro_ext.build.stages'
    name) on a target with ``features``."""
    bf16 = PRECISION_FEATURES["bf16"] <= frozenset(features)
    if precision == "int8":
        direct = "int8" if stage == INT8_DIRECT_STAGE else "bf16" if bf16 else "fp32"
        return LayerProducts(long="int8", direct=direct, linear="int8", transposed="int8")
    if precision == "bf16":
        return LayerProducts(direct="bf16")
    return LayerProducts()
