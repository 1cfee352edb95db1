"""Converter for ``kokoro_ext::packed_lstm`` (see kokoro_ext.build.export.packed_lstm).

Both backends take the op's tensors unchanged and produce (y, h_n, c_n):
  "native"  R.call_dps_packed("kokoro_ext.lstm", ...): the C++ kernel (cpp/src/lstm.cc),
            which needs the library loaded (kokoro_ext.run.native.load()) where it runs;
  "tir"     R.call_tir to the TIR loop (kokoro_ext.build.kernels.lstm_tir), pure TVM.
  "gpu"     products and a hand-scheduled recurrence kernel per layer
            (kokoro_ext.build.kernels.lstm_gpu): what GPU builds take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from torch import fx
from tvm import relax

from kokoro_ext.build.kernels.lstm_gpu import relax_packed_lstm
from kokoro_ext.build.kernels.lstm_tir import packed_lstm_prim_func
from kokoro_ext.run import kernels

LstmBackend = Literal["native", "tir", "gpu"]
#: What ``build --lstm-backend`` offers a CPU build; a GPU build takes "gpu".
LSTM_BACKENDS: tuple[str, ...] = ("native", "tir")


def _output_types(x: relax.Expr, w_hh: relax.Expr) -> list[relax.TensorType]:
    B, T, _ = x.ty.shape.values
    L, D, _, H = w_hh.ty.shape.values
    return [
        relax.TensorType((B, T, D * H), "float32"),
        relax.TensorType((L * D, B, H), "float32"),
        relax.TensorType((L * D, B, H), "float32"),
    ]


def convert_packed_lstm(backend: LstmBackend) -> Callable[[fx.Node, object], relax.Var]:
    """A custom_convert_map entry lowering packed_lstm to ``backend``."""
    if backend not in get_args(LstmBackend):
        raise ValueError(f"unknown LSTM backend {backend!r}; choose one of {get_args(LstmBackend)}")

    def convert(node: fx.Node, importer) -> relax.Var:
        args = importer.retrieve_args(node)
        tensors, enforce_sorted = list(args[:8]), bool(args[8])
        out_ty = _output_types(tensors[0], tensors[6])
        bb = importer.block_builder
        if backend == "gpu":
            return relax_packed_lstm(bb, tensors)
        if backend == "native":
            options = relax.ShapeExpr([int(enforce_sorted)])
            call = relax.call_dps_packed(kernels.LSTM, [options, *tensors], out_ty)
        else:
            gvar = bb.add_func(packed_lstm_prim_func(enforce_sorted), "packed_lstm")
            call = relax.call_tir(gvar, tensors, out_ty)
        return bb.emit(call)

    return convert
