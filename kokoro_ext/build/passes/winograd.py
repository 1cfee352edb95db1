"""Winograd for the long stride-1 convolutions: a Relax pass over the imported module.

It runs in the pipeline right after kokoro_ext.build.passes.dispatch.DispatchNativeKernels: a
``kokoro_ext.conv1d`` call with stride 1, for a shape where the native library says
Winograd pays, becomes ``kokoro_ext.conv1d_winograd`` (cpp/src/winograd.cc) on a
transformed filter, the way TVM's conv2d_winograd_without_weight_transform takes a
pre-transformed weight.  A constant filter is transformed here, once.  A filter that is a
weight parameter of the function (the build keeps weights as parameters, see
kokoro_ext.build.compiler) gets a ``kokoro_ext.winograd_filter`` call on it, which
LiftTransformParams then moves into the weight transform the build runs once (its
outputs are what the build stores: kokoro_ext.build.compiler.transform_weights).

Whether Winograd pays depends on the output length.  A symbolic length (torch.export's
Dim) has the bounds the importer records in the function's ``tir_var_lower_bound`` and
``tir_var_upper_bound`` attrs: where Winograd pays at the length's lower bound it is
used for every length; where it does not pay at the upper bound the call stays direct;
in between, the call becomes ``kokoro_ext.conv1d_winograd_if_pays`` with both filters,
which decides per call from the actual length with the same ``winograd_pays``, so that a
symbolic build takes at each length the kernel a static build for that length would.
That keeps both filters for those layers (the transformed one is about twice the plain
one): the memory a one-library-per-stage build pays for never being slower than the
static build at short lengths.

A stride-1 call that stays direct becomes ``kokoro_ext.conv1d_taps`` on the filter
packed as [ceil(C_out / 8), K, C_in, 8] by ``kokoro_ext.taps_filter`` (``_taps``), once,
like the Winograd filter transform.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, sym

from kokoro_ext.run import kernels, native

# Each native filter transform and the function giving the shape it writes.
_SHAPE_OF = {
    kernels.WINOGRAD_FILTER: kernels.WINOGRAD_FILTER_SHAPE,
    kernels.TAPS_FILTER: kernels.TAPS_FILTER_SHAPE,
}
_CALL_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")


def _filter_shape(transform: str, w_shape) -> list[int]:
    """The shape the native ``transform`` (a filter transform) writes for a filter of
    ``w_shape`` [C_out, C_in, K]."""
    native.load()
    shape = tvm_ffi.get_global_func(_SHAPE_OF[transform])(*(int(d) for d in w_shape))
    return [int(d) for d in shape]


def _transform_filter(transform: str, w: np.ndarray) -> np.ndarray:
    """``w`` [C_out, C_in, K] through the native filter transform ``transform``."""
    out = np.empty(_filter_shape(transform, w.shape), dtype="float32")
    w = np.ascontiguousarray(w, dtype="float32")
    tvm_ffi.get_global_func(transform)(tvm_ffi.from_dlpack(w), tvm_ffi.from_dlpack(out))
    return out


def _transform_filter_expr(transform: str, w: relax.Expr) -> relax.Expr:
    """``w`` through the native filter transform ``transform``: now for a constant, by a
    call that LiftTransformParams moves into the weight transform for a weight parameter."""
    if isinstance(w, tvm.ir.expr.Constant):
        return relax.const(_transform_filter(transform, w.value.numpy()))
    shape = _filter_shape(transform, w.ty.shape.values)
    return relax.call_dps_packed(transform, [w], relax.TensorType(shape, "float32"))


def winograd_filter(w: np.ndarray) -> np.ndarray:
    """A [C_out, C_in, K] conv1d filter transformed for ``kokoro_ext.conv1d_winograd``."""
    return _transform_filter(kernels.WINOGRAD_FILTER, w)


def pack_taps(w: np.ndarray) -> np.ndarray:
    """A [C_out, C_in, K] conv1d filter packed for ``kokoro_ext.conv1d_taps`` by the
    native library's own packing: [ceil(C_out / 8), K, C_in, 8], zero rows past C_out."""
    return _transform_filter(kernels.TAPS_FILTER, w)


def length_bounds(
    length: tvm.tirx.PrimExpr, lower: dict | None, upper: dict | None
) -> tuple[int, int | None]:
    """The least and greatest values of ``length`` when each variable in it lies within
    ``lower`` and ``upper`` (by name; a function's tir_var_lower_bound and
    tir_var_upper_bound attrs): a variable without a lower bound is taken as >= 0, and
    None is the greatest value where one is unbounded."""
    analyzer = sym.Analyzer()
    unbounded = False
    for var in tvm.tirx.analysis.undefined_vars(length):
        lo = int(lower[var.name]) if lower and var.name in lower else 0
        if upper and var.name in upper:
            analyzer.bind(var, tvm.ir.Range(lo, int(upper[var.name]) + 1))
        else:
            analyzer.update(var, sym.ConstIntBound(lo, sym.ConstIntBound.POS_INF), True)
            unbounded = True
    bound = analyzer.const_int_bound(length)
    hi = None if unbounded or bound.max_value >= bound.POS_INF else int(bound.max_value)
    return int(bound.min_value), hi


def _winograd_call(
    call: relax.Call, lower: dict | None = None, upper: dict | None = None
) -> relax.Call | None:
    """The conv1d_winograd (or, where Winograd never pays, conv1d_taps) call replacing
    ``call``, or None where it does not apply; ``lower`` and ``upper`` bound the symbolic
    lengths (see the module's docstring)."""
    if not (call.op.same_as(_CALL_DPS_PACKED) and isinstance(call.args[0], relax.ExternFunc)):
        return None
    if call.args[0].global_symbol != kernels.CONV1D:
        return None
    options, x, w, bias = call.args[1].fields
    (stride, padding, dilation) = (int(v) for v in options.values)
    if stride != 1 or not isinstance(w, (tvm.ir.expr.Constant, relax.Var)):
        return None
    # Shapes from the types: the weights are copied out only for a filter that is transformed.
    c_out, c_in, taps = (int(v) for v in w.ty.shape.values)
    pays = tvm_ffi.get_global_func(kernels.WINOGRAD_PAYS)
    t_out = call.ty_args[0].shape.values[2]
    if isinstance(t_out, tvm.tirx.IntImm):
        shortest = longest = int(t_out)
    else:
        shortest, longest = length_bounds(t_out, lower, upper)
    if longest is not None and not pays(c_in, c_out, taps, dilation, longest):
        return _taps_call(call, w, padding, dilation)
    if longest is None and not pays(c_in, c_out, taps, dilation, 1 << 40):
        return _taps_call(call, w, padding, dilation)  # the channels or taps rule it out
    options = relax.ShapeExpr([padding, dilation, taps])
    gw = _transform_filter_expr(kernels.WINOGRAD_FILTER, w)
    if pays(c_in, c_out, taps, dilation, shortest):
        return relax.call_dps_packed(kernels.CONV1D_WINOGRAD, [options, x, gw, bias], call.ty_args[0])
    args = [options, x, _taps(w), gw, bias]
    return relax.call_dps_packed(kernels.CONV1D_WINOGRAD_IF_PAYS, args, call.ty_args[0])


def _taps(w: relax.Expr) -> relax.Expr:
    """The filter packed for ``kokoro_ext.conv1d_taps``, once (kokoro_ext.conv1d packs at
    every call: for a 1024 x 1090 x 3 filter that was most of the call at short lengths)."""
    return _transform_filter_expr(kernels.TAPS_FILTER, w)


def _taps_call(call: relax.Call, w: relax.Expr, padding: int, dilation: int) -> relax.Call:
    """``kokoro_ext.conv1d_taps`` for the direct stride-1 convolution ``call``."""
    _, x, _, bias = call.args[1].fields
    options = relax.ShapeExpr([padding, dilation])
    args = [options, x, _taps(w), bias]
    return relax.call_dps_packed(kernels.CONV1D_TAPS, args, call.ty_args[0])


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.lower: dict | None = None
        self.upper: dict | None = None

    def rewrite(self, func: relax.Function) -> relax.Function:
        attrs = func.attrs or {}
        self.lower = attrs.get("tir_var_lower_bound")
        self.upper = attrs.get("tir_var_upper_bound")
        return self.visit_expr(func)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        winograd = _winograd_call(call, self.lower, self.upper)
        return call if winograd is None else winograd


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.WinogradConv1d")
def winograd_conv1d(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Send the native stride-1 conv1d calls with weight filters to Winograd where it pays,
    to conv1d_taps on the packed filter elsewhere."""
    native.load()
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.rewrite(func))
    return rewriter.builder_.get()
