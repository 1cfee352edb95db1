"""Converters giving elementwise math a lowering that LLVM can vectorize.

TVM 0.27 lowers ``tanh`` and ``pow`` on llvm to a scalar libm call per element, which
keeps the loop they sit in from vectorizing: ALBERT's GELU (tanh form, with ``x ** 3``)
ran 6.6x slower than PyTorch's.  Here ``tanh`` becomes the rational approximation Eigen
(and so PyTorch's CPU kernels) uses, and a small integer power repeated multiplication,
so the fused GELU is one vector loop.
"""

from __future__ import annotations

from torch import fx
from tvm import relax

# Eigen's generic_fast_tanh_float: odd numerator / even denominator in x^2, inputs
# clamped where tanh(x) rounds to +-1 in float32; max abs error 3.7e-7 (tested).
_TANH_CLAMP = 7.90531110763549805
_TANH_NUMERATOR = (  # x^1, x^3, ..., x^13
    4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
    -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16,
)
_TANH_DENOMINATOR = (  # x^0, x^2, x^4, x^6
    4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06,
)


def _horner(bb: relax.BlockBuilder, x2: relax.Expr, coefficients: tuple[float, ...]) -> relax.Expr:
    """sum_k c_k x2^k by Horner's rule."""
    acc = relax.const(coefficients[-1], "float32")
    for c in coefficients[-2::-1]:
        acc = bb.emit(relax.op.add(relax.op.multiply(acc, x2), relax.const(c, "float32")))
    return acc


def _is_float32_tensor(x: object) -> bool:
    return (
        isinstance(x, relax.Expr)
        and isinstance(x.ty, relax.TensorType)
        and x.ty.dtype == "float32"
    )


def convert_tanh(node: fx.Node, importer) -> relax.Var:
    """``aten.tanh.default`` on float32 -> Eigen's rational tanh; other dtypes unchanged."""
    x = importer.retrieve_args(node)[0]
    if not _is_float32_tensor(x):
        return importer._unary_op(relax.op.tanh)(node)
    bb = importer.block_builder
    # Clamped by comparisons, which are false for NaN: clip's min/max would turn a NaN
    # into a bound, and the pipeline's finiteness check relies on NaN reaching the output.
    lo, hi = relax.const(-_TANH_CLAMP, "float32"), relax.const(_TANH_CLAMP, "float32")
    x = bb.emit(relax.op.where(relax.op.less(x, lo), lo, x))
    x = bb.emit(relax.op.where(relax.op.greater(x, hi), hi, x))
    x2 = bb.emit(relax.op.multiply(x, x))
    numerator = bb.emit(relax.op.multiply(x, _horner(bb, x2, _TANH_NUMERATOR)))
    return bb.emit(relax.op.divide(numerator, _horner(bb, x2, _TANH_DENOMINATOR)))


def convert_pow(node: fx.Node, importer) -> relax.Var:
    """``aten.pow.Tensor_Scalar`` with exponent 2, 3 or 4 on float32 -> multiplies.

    Exact up to rounding (LLVM itself only rewrites pow(x, 2)); anything else keeps the
    importer's converter.
    """
    x, exponent = importer.retrieve_args(node)[:2]
    if (
        not _is_float32_tensor(x)
        or isinstance(exponent, bool)
        or not isinstance(exponent, (int, float))
        or exponent not in (2, 3, 4)
    ):
        return importer._pow(node)
    bb = importer.block_builder
    square = bb.emit(relax.op.multiply(x, x))
    if exponent == 2:
        return square
    if exponent == 3:
        return bb.emit(relax.op.multiply(square, x))
    return bb.emit(relax.op.multiply(square, square))
