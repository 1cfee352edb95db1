"""Winograd for the long stride-1 convolutions: a Relax pass over the imported module.

It runs in the pipeline right after kokoro_ext.dispatch.DispatchNativeKernels, on the
imported module (the importer binds the weights as constants when it finishes): a
``kokoro_ext.conv1d`` call with stride 1, a constant filter and a static output length,
for a shape where the native library says Winograd pays, becomes
``kokoro_ext.conv1d_winograd`` (cpp/src/winograd.cc) on the filter transformed here,
once, the way TVM's conv2d_winograd_without_weight_transform takes a pre-transformed
weight.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from kokoro_ext import native
from kokoro_ext.dispatch import NATIVE_CONV1D

NATIVE_CONV1D_WINOGRAD = "kokoro_ext.conv1d_winograd"
_CALL_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")


def winograd_filter(w: np.ndarray) -> np.ndarray:
    """A [C_out, C_in, K] conv1d filter transformed for ``kokoro_ext.conv1d_winograd``."""
    native.load()
    shape = tvm_ffi.get_global_func("kokoro_ext.winograd_filter_shape")(*w.shape)
    gw = np.empty(tuple(shape), dtype="float32")
    w = np.ascontiguousarray(w, dtype="float32")
    tvm_ffi.get_global_func("kokoro_ext.winograd_filter")(
        tvm_ffi.from_dlpack(w), tvm_ffi.from_dlpack(gw)
    )
    return gw


def _winograd_call(call: relax.Call) -> relax.Call | None:
    """The conv1d_winograd call replacing ``call``, or None where it does not apply."""
    if not (call.op.same_as(_CALL_DPS_PACKED) and isinstance(call.args[0], relax.ExternFunc)):
        return None
    if call.args[0].global_symbol != NATIVE_CONV1D:
        return None
    options, x, w, bias = call.args[1].fields
    (stride, padding, dilation) = (int(v) for v in options.values)
    if stride != 1 or not isinstance(w, tvm.ir.expr.Constant):
        return None
    # Shapes from the types: the weights are copied out only for a filter that is transformed.
    c_out, c_in, taps = (int(v) for v in w.ty.shape.values)
    t_out = call.ty_args[0].shape.values[2]
    if not isinstance(t_out, tvm.tirx.IntImm):
        return None  # a symbolic length: whether Winograd pays is not known here
    t_out = int(t_out)
    if not tvm_ffi.get_global_func("kokoro_ext.winograd_pays")(c_in, c_out, taps, dilation, t_out):
        return None
    options = relax.ShapeExpr([padding, dilation, taps])
    args = [options, x, relax.const(winograd_filter(w.value.numpy())), bias]
    return relax.call_dps_packed(NATIVE_CONV1D_WINOGRAD, args, call.ty_args[0])


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        winograd = _winograd_call(call)
        return call if winograd is None else winograd


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.WinogradConv1d")
def winograd_conv1d(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Send the native stride-1 conv1d calls with constant filters to Winograd where it pays."""
    native.load()
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()
