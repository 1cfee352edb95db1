"""Converters sending GEMM-shaped ops to the native BLAS kernels (cpp/src/dense.cc).

``aten.convolution`` (1-D, groups 1) -> ``kokoro_ext.conv1d`` (which
kokoro_ext.frontend.winograd may turn into Winograd once the weights are bound) or,
transposed, ``kokoro_ext.conv1d_transpose``; ``aten.addmm`` (2-D) ->
``kokoro_ext.addmm``; ``aten.bmm`` -> ``kokoro_ext.bmm``; all through ``call_dps_packed``,
the way TVM's BYOC hands a matched op to an external library.  Anything else (grouped or
dilated transposed convolutions, symbolic shapes, other dtypes) keeps the importer's own
lowering.
"""

from __future__ import annotations

import operator
from functools import partial

import numpy as np
from torch import fx
from tvm import relax

NATIVE_CONV1D = "kokoro_ext.conv1d"
NATIVE_CONV1D_TRANSPOSE = "kokoro_ext.conv1d_transpose"
NATIVE_ADDMM = "kokoro_ext.addmm"
NATIVE_BMM = "kokoro_ext.bmm"


def _static_shape(expr: relax.Expr) -> list[int] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != "float32" or ty.shape is None:
        return None
    values = getattr(ty.shape, "values", None)
    if values is None or not all(isinstance(v, int) or hasattr(v, "value") for v in values):
        return None
    return [int(v) for v in values]


def convert_convolution(node: fx.Node, importer) -> relax.Var:
    """``aten.convolution.default`` -> kokoro_ext.conv1d / conv1d_transpose where they apply."""
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = (
        importer.retrieve_args(node)
    )
    x_shape, w_shape = _static_shape(x), _static_shape(w)
    if (
        groups != 1
        or x_shape is None
        or w_shape is None
        or len(x_shape) != 3
        or len(stride) != 1
        or (transposed and dilation[0] != 1)
        or (bias is not None and _static_shape(bias) is None)
    ):
        return importer._convolution(node)
    batch, t_in, k = x_shape[0], x_shape[2], w_shape[2]
    (s,), (p,), (d,) = stride, padding, dilation
    if transposed:
        c_out = w_shape[1]
        t_out = (t_in - 1) * s - 2 * p + k + output_padding[0]
        kernel, options = NATIVE_CONV1D_TRANSPOSE, [s, p, output_padding[0]]
    else:
        c_out = w_shape[0]
        t_out = (t_in + 2 * p - d * (k - 1) - 1) // s + 1
        kernel, options = NATIVE_CONV1D, [s, p, d]
    if bias is None:
        bias = relax.const(np.zeros(c_out, dtype="float32"))
    out_ty = relax.TensorType((batch, c_out, t_out), "float32")
    call = relax.call_dps_packed(kernel, [relax.ShapeExpr(options), x, w, bias], out_ty)
    return importer.block_builder.emit(call)


def convert_addmm(node: fx.Node, importer) -> relax.Var:
    """``aten.addmm.default`` (beta = alpha = 1) -> kokoro_ext.addmm."""
    args = importer.retrieve_args(node)
    bias, x, w = args[:3]
    beta = node.kwargs.get("beta", 1)
    alpha = node.kwargs.get("alpha", 1)
    shapes = [_static_shape(t) for t in (bias, x, w)]
    if beta != 1 or alpha != 1 or None in shapes or len(shapes[1]) != 2 or len(shapes[0]) != 1:
        return importer._addmm(node)
    (m, _), (_, n) = shapes[1], shapes[2]
    if shapes[0] != [n]:
        return importer._addmm(node)
    out_ty = relax.TensorType((m, n), "float32")
    return importer.block_builder.emit(relax.call_dps_packed(NATIVE_ADDMM, [bias, x, w], out_ty))


def convert_bmm(node: fx.Node, importer) -> relax.Var:
    """``aten.bmm.default`` (float32, static shapes) -> kokoro_ext.bmm."""
    x, w = importer.retrieve_args(node)[:2]
    shapes = [_static_shape(t) for t in (x, w)]
    if None in shapes or len(shapes[0]) != 3 or len(shapes[1]) != 3:
        # the importer's own bmm converter
        matmul = partial(relax.op.linear_algebra.matmul, out_dtype="float32")
        return importer._binary_op(matmul, operator.matmul)(node)
    (batch, m, _), (_, _, n) = shapes
    out_ty = relax.TensorType((batch, m, n), "float32")
    return importer.block_builder.emit(relax.call_dps_packed(NATIVE_BMM, [x, w], out_ty))
