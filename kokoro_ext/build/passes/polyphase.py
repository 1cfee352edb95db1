"""Strided transposed convolutions as one stride-1 convolution of their phases: a Relax pass.

TVM legalizes ``conv1d_transpose`` with stride s as a convolution over the input dilated
by s (s - 1 zeros between samples): every output sums all K taps, of which only about
K / s meet a sample.  Kokoro's decoder upsamples with strides 10 and 6 (K = 20 and 12),
so nine tenths and five sixths of those products are of zeros, and the two layers were
two thirds of the GPU decoder's work.

Output t + p (p the left padding) is a sum over the taps k = r + s j, r = (t + p) mod s,
of x[q - j] w[:, :, k], q = (t + p - r) / s: for each phase r an ordinary convolution of
x with Kr = ceil(K / s) taps.  ``polyphase_conv_transpose`` rewrites

    y = conv1d_transpose(x, w, strides=s, padding=(p, p'))      w [C_in, C_out, K]

as the s phases stacked in the output channels of one stride-1 ``conv1d``, then
interleaved and cropped:

    W = reshape(flip(permute(reshape(pad(w, Kr s - K), [C_in, C_out, Kr, s]),
                             [1, 3, 0, 2]), 3), [C_out s, C_in, Kr])
    u = conv1d(x, W, padding=(Kr - 1, Kr - 1))              [B, C_out s, T + Kr - 1]
    y[b, o, t] = u[b, o s + (t + p) mod s, (t + p) / s]      t < T_out (one gather)

W depends on the weight alone, so ``LiftTransformParams`` moves it to the build's weight
transform.  Stride 1, dilation, groups, other layouts and output padding past what the
phases cover are left alone.
"""

from __future__ import annotations

import tvm
from tvm import relax, te, tirx

_CONV1D_TRANSPOSE = tvm.ir.Op.get("relax.nn.conv1d_transpose")


def _ints(values) -> list[int]:
    return [int(v) for v in values]


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if not (isinstance(call, relax.Call) and call.op.same_as(_CONV1D_TRANSPOSE)):
            return call
        rewritten = self._polyphase(call)
        return call if rewritten is None else rewritten

    def _polyphase(self, call: relax.Call) -> relax.Expr | None:
        attrs = call.attrs
        (stride,) = _ints(attrs.strides)
        left, right = _ints(attrs.padding)
        (output_padding,) = _ints(attrs.output_padding)
        if (
            stride < 2
            or _ints(attrs.dilation) != [1]
            or int(attrs.groups) != 1
            or str(attrs.data_layout) != "NCW"
            or str(attrs.kernel_layout) != "IOW"
            or str(attrs.out_layout) != "NCW"
        ):
            return None
        x, w = call.args
        w_shape = w.ty.shape
        if w_shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in w_shape):
            return None
        c_in, c_out, taps = _ints(w_shape)
        phase_taps = -(-taps // stride)
        # the phases' full output covers (T - 1) s + Kr s samples; the call's must fit
        if output_padding > right + phase_taps * stride - taps:
            return None
        emit = self.builder_.emit
        if phase_taps * stride > taps:
            w = emit(relax.op.nn.pad(w, [0, 0, 0, 0, 0, phase_taps * stride - taps]))
        w = emit(relax.op.reshape(w, [c_in, c_out, phase_taps, stride]))
        w = emit(relax.op.flip(relax.op.permute_dims(w, [1, 3, 0, 2]), axis=3))
        w = emit(relax.op.reshape(w, [c_out * stride, c_in, phase_taps]))
        u = emit(
            relax.op.nn.conv1d(x, w, padding=[phase_taps - 1, phase_taps - 1],
                               out_dtype=str(call.ty.dtype))  # fmt: skip
        )
        return self.builder_.call_te(
            _interleave, u, c_out, stride, left, call.ty.shape[2], primfunc_name_hint="interleave_phases"
        )


def _interleave(u: te.Tensor, c_out: int, stride: int, left: int, length: tirx.PrimExpr) -> te.Tensor:
    """y[b, o, t] = u[b, o s + (t + left) mod s, (t + left) / s]: the phases interleaved and
    cropped in one gather (reshapes of a symbolic length to [..., Q, s] and back trip TVM
    0.27's iter-map analysis: "padding factor ... is not divisible")."""
    batch = u.shape[0]

    def value(b, o, t):
        full = t + left
        return u[b, o * stride + tirx.floormod(full, stride), tirx.floordiv(full, stride)]

    return te.compute((batch, c_out, length), value, name="interleave_phases")


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.PolyphaseConvTranspose")
def polyphase_conv_transpose(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Every strided 1-D transposed convolution of ``mod`` as its phases' convolution."""
    rewriter = _Rewriter(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    return rewriter.builder_.get()
