"""Weight-only int8: native kernel calls on weights the build stores as int8.

It runs right after kokoro_ext.build.passes.winograd.  For a weight parameter the build
chose (``names``, the parameters' Relax names; kokoro_ext.build.precision chooses them),
a call on its float32 layout becomes the call on its int8 one:

  conv1d_taps(o, x, taps_filter(w), b)                 -> conv1d_taps_q8(o, x, q, s, b)
                                 or conv1d_taps_q8_int8(o, x, quads, sums, s, b)
  conv1d_winograd(o, x, winograd_filter(w), b)         -> conv1d_winograd_q8_if_pays(..)
  conv1d_winograd_if_pays(o, x, taps_filter(w), winograd_filter(w), b)
                                                       -> conv1d_winograd_q8_if_pays(..)
  addmm(b, x, w or permute_dims(w))                    -> addmm_q8(b, x, q, s)
                                     or addmm_q8_int8(b, x, quads, sums, s)
  lstm(o, x, n, h0, c0, w_ih_first, w_ih_rest, w_hh, b)
                            -> lstm_q8(o, x, n, h0, c0, q1, s1, q2, s2, q3, s3, b)

and, in a function whose convolutions compute on int8 weights, where the build's products
make the transposed convolutions int8 (the checkpoint holds their weights in float32; this
one rule quantizes a float32 weight, at build time),

  conv1d_transpose(o, x, w, b)  (kernel 2 stride, padding stride / 2)
      -> interleave(conv1d_taps_q8_int8([1, 1], x, taps_filter_q8_quads(phases(w)), repeat(b)))

with (q, s) = taps_filter_q8(w), columns_q8(w) or lstm_weights_q8(w): the int8 values and
a float32 scale per output channel (per layer, direction and gate row for the LSTM; its
w_hh as lstm_recurrent_q8(w) packs it, in panels of 128 gates), and
(quads, sums, s) = taps_filter_q8_quads(w) or columns_q8_quads(w): the int8 values packed
in quads of input channels for the int8 products, with each output channel's sum.
LiftTransformParams moves them into the weight transform the build runs once, so they are
what the build stores.  An LSTM is rewritten only when all three of its weights are
chosen: the kernel takes them all in one dtype.  The Winograd filter is then computed
from the int8 taps at each call (cpp/src/winograd.cc), not stored: it is about twice the
float32 filter and eight times the int8 one.  The float32 layouts the rewritten calls
took are dropped, so nothing stores them.

The build's precision (``products``, kokoro_ext.build.precision.LayerProducts) picks the
convolution kernel: a long convolution (one the Winograd pass took) with int8 products is
conv1d_taps_q8_int8 (direct: on VNNI it outruns float32 Winograd), a direct one
conv1d_taps_q8_int8 or conv1d_taps_q8_bf16 as its stage's direct products say, and a
linear layer over a sequence (x's rows batch x length) with int8 products addmm_q8_int8.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from kokoro_ext.build.precision import LayerProducts
from kokoro_ext.run import kernels, native

_CALL_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")
_PERMUTE_DIMS = tvm.ir.Op.get("relax.permute_dims")
_KPACK = 8  # output channels per packed block (cpp/include/kokoro_ext/products.h)
_GATE_PANEL = 128  # gates per panel of an LSTM's int8 w_hh (cpp/src/lstm.cc, kGateBlock)


def _extern(expr: relax.Expr, name: str | None = None) -> str | None:
    """The native function ``expr`` calls (``name`` only), or None."""
    if not (isinstance(expr, relax.Call) and expr.op.same_as(_CALL_DPS_PACKED)):
        return None
    callee = expr.args[0]
    if not isinstance(callee, relax.ExternFunc):
        return None
    if name is not None and callee.global_symbol != name:
        return None
    return callee.global_symbol


def _over_sequence(x: relax.Expr) -> bool:
    """Whether the rows of ``x`` [rows, in] are a batch's sequences, batch x length (a
    style vector's linear layer has one row per batch entry)."""
    shape = getattr(x.ty, "shape", None)
    return isinstance(shape, relax.ShapeExpr) and isinstance(shape.values[0], tvm.tirx.Mul)


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, names: Collection[str], products: LayerProducts):
        super().__init__(mod)
        self.names = frozenset(names)
        self.products = products
        self.bound: dict[relax.Var, relax.Expr] = {}
        self.weights: frozenset[relax.Var] = frozenset()
        self.transposed = False

    def _weight(self, expr: relax.Expr, through: tvm.ir.Op | str | None) -> relax.Var | None:
        """The chosen weight parameter behind ``expr``: ``expr`` is bound to ``through``
        (a native filter transform or an op) applied to it, or (``through`` None) is it."""
        if through is not None:
            value = self.bound.get(expr)
            if value is None:
                return None
            if isinstance(through, str):
                if _extern(value, through) is None:
                    return None
                expr = value.args[1].fields[0]
            elif isinstance(value, relax.Call) and value.op.same_as(through):
                expr = value.args[0]
            else:
                return None
        if isinstance(expr, relax.Var) and expr.name in self.names:
            return expr
        return None

    def _quantized(self, transform: str, w: relax.Expr, *outputs: tuple[list[int], str]) -> tuple:
        """The outputs of the native quantizer ``transform`` on ``w``, each (shape, dtype):
        (q, scale) or (quads, sums, scale)."""
        types = [relax.TensorType(shape, dtype) for shape, dtype in outputs]
        result = self.builder_.emit(relax.call_dps_packed(transform, [w], types))
        return tuple(relax.TupleGetItem(result, i) for i in range(len(types)))

    def _conv(self, call: relax.Call, w: relax.Var, pad: int, dilation: int) -> relax.Expr:
        fields = call.args[1].fields
        x, bias = fields[1], fields[-1]
        if _extern(call, kernels.CONV1D_TAPS) is None:  # a long one, for Winograd
            long = self.products.long == "int8"
            kernel = kernels.CONV1D_TAPS_Q8_INT8 if long else kernels.CONV1D_WINOGRAD_Q8_IF_PAYS
        elif self.products.direct == "int8":
            kernel = kernels.CONV1D_TAPS_Q8_INT8
        elif self.products.direct == "bf16":
            kernel = kernels.CONV1D_TAPS_Q8_BF16
        else:
            kernel = kernels.CONV1D_TAPS_Q8
        options = relax.ShapeExpr([pad, dilation])
        filter_ = self._taps(w, kernel)
        return relax.call_dps_packed(kernel, [options, x, *filter_, bias], call.ty_args[0])

    def _taps(self, w: relax.Expr, kernel: str) -> tuple:
        """The filter ``w`` [C_out, C_in, K] as ``kernel`` takes it: (quads, sums, scale) for
        the int8 products, else (q, scale)."""
        c_out, c_in, taps = (int(v) for v in w.ty.shape.values)
        padded = -(-c_out // _KPACK) * _KPACK  # output channels in whole packed blocks
        if kernel == kernels.CONV1D_TAPS_Q8_INT8:
            layout = tvm_ffi.get_global_func(kernels.TAPS_FILTER_Q8_QUADS_SHAPE)
            quads = [int(d) for d in layout(c_out, c_in, taps)]
            return self._quantized(
                kernels.TAPS_FILTER_Q8_QUADS, w,
                (quads, "int8"), ([padded], "int32"), ([padded], "float32"),
            )
        layout = tvm_ffi.get_global_func(kernels.TAPS_FILTER_SHAPE)
        shape = [int(d) for d in layout(c_out, c_in, taps)]
        return self._quantized(kernels.TAPS_FILTER_Q8, w, (shape, "int8"), ([padded], "float32"))

    def _from_weights(self, expr: relax.Expr) -> bool:
        """Whether ``expr`` is computed from constants and weight parameters alone, so that
        LiftTransformParams moves what is computed from it into the weight transform."""
        leaves, seen = list(relax.analysis.free_vars(expr)), set()
        while leaves:
            var = leaves.pop()
            if var in self.weights or var in seen:
                continue
            seen.add(var)
            value = self.bound.get(var)
            if value is None:
                return False
            leaves.extend(relax.analysis.free_vars(value))
        return True

    def _transposed(self, call: relax.Call) -> relax.Expr | None:
        """A transposed convolution whose output is ``stride`` times its input's length
        (kernel 2 stride, padding stride / 2: the generator's upsampling) as a stride-1
        convolution with int8 products, by phases: output t = n stride + r is the sum of
        two taps of the filter (m = r + pad and m + stride, or m - stride and m where
        m >= stride) over x[n - 1], x[n] (or x[n], x[n + 1]).  So every phase is a row of
        one two-tap convolution of padding 1, its output of length + 1 read from column 0
        for the phases r < stride - pad, from column 1 for the others; the rows are then
        interleaved."""
        options, x, w, bias = call.args[1].fields
        stride, pad, output_pad = (int(v) for v in options.values)
        w_shape = [v.value if isinstance(v, tvm.tirx.IntImm) else None for v in w.ty.shape.values]
        c_in, c_out, taps = w_shape
        if None in w_shape or output_pad or taps != 2 * stride or 2 * pad != taps - stride:
            return None
        if not (self._from_weights(w) and self._from_weights(bias)):
            return None
        # filter [C_in, C_out, K] -> [C_out * stride, C_in, 2]
        index = []
        for r in range(stride):
            m = r + pad
            index += [m + stride, m] if m < stride else [m, m - stride]
        w2 = relax.op.take(w, relax.const(np.array(index)), axis=2)
        w2 = relax.op.reshape(w2, [c_in, c_out, stride, 2])
        w2 = relax.op.reshape(relax.op.permute_dims(w2, [1, 2, 0, 3]), [c_out * stride, c_in, 2])
        w2 = self.builder_.emit(w2)
        filter_ = self._taps(w2, kernels.CONV1D_TAPS_Q8_INT8)
        bias2 = self.builder_.emit(relax.op.repeat(bias, stride, axis=0))
        batch, _, length = x.ty.shape.values
        phases = relax.TensorType([batch, c_out * stride, length + 1], "float32")
        z = self.builder_.emit(relax.call_dps_packed(
            kernels.CONV1D_TAPS_Q8_INT8, [relax.ShapeExpr([1, 1]), x, *filter_, bias2], phases
        ))
        z = relax.op.reshape(z, [batch, c_out, stride, length + 1])
        split = stride - pad
        y = relax.op.concat([
            relax.op.strided_slice(z, [2, 3], [0, 0], [split, length], assume_inbound=True),
            relax.op.strided_slice(
                z, [2, 3], [split, 1], [stride, length + 1], assume_inbound=True
            ),
        ], axis=2)
        y = relax.op.permute_dims(y, [0, 1, 3, 2])
        return relax.op.reshape(y, [batch, c_out, length * stride])

    def _lstm(self, call: relax.Call) -> relax.Expr | None:
        options, x, lengths, h0, c0, *weights, bias = call.args[1].fields
        if any(self._weight(w, None) is None for w in weights):
            return None
        args = [options, x, lengths, h0, c0]
        *inputs, w_hh = weights  # w_ih_first, w_ih_rest (empty for one layer); w_hh
        for w in inputs:
            shape = [int(v) for v in w.ty.shape.values]
            args += self._quantized(
                kernels.LSTM_WEIGHTS_Q8, w, (shape, "int8"), (shape[:-1], "float32")
            )
        *matrices, gates, hidden = [int(v) for v in w_hh.ty.shape.values]
        panels = [*matrices, -(-gates // _GATE_PANEL), hidden, _GATE_PANEL]
        args += self._quantized(
            kernels.LSTM_RECURRENT_Q8, w_hh, (panels, "int8"), ([*matrices, gates], "float32")
        )
        out_ty = list(call.ty_args[0].fields)  # (y, h_n, c_n)
        return relax.call_dps_packed(kernels.LSTM_Q8, [*args, bias], out_ty)

    def _conv_weight(self, call: relax.Expr) -> relax.Var | None:
        """The chosen weight of a native convolution ``call``, or None."""
        name = _extern(call)
        if name == kernels.CONV1D_TAPS:
            return self._weight(call.args[1].fields[2], kernels.TAPS_FILTER)
        if name in (kernels.CONV1D_WINOGRAD, kernels.CONV1D_WINOGRAD_IF_PAYS):
            return self._weight(call.args[1].fields[-2], kernels.WINOGRAD_FILTER)
        return None

    def _rewrite(self, call: relax.Call) -> relax.Expr | None:
        name = _extern(call)
        if name is None:
            return None
        fields = call.args[1].fields
        w = self._conv_weight(call)
        if w is not None:  # options [pad, dilation] (Winograd's: and its tile)
            pad, dilation = (int(v) for v in fields[0].values[:2])
            return self._conv(call, w, pad, dilation)
        if name == kernels.ADDMM:
            bias, x, w = fields
            weight = self._weight(w, None)
            if weight is None:
                weight = self._weight(w, _PERMUTE_DIMS)
            if weight is None:
                return None
            k, n = (int(v) for v in w.ty.shape.values)
            if self.products.linear == "int8" and _over_sequence(x):
                layout = tvm_ffi.get_global_func(kernels.COLUMNS_Q8_QUADS_SHAPE)
                quads = [int(d) for d in layout(k, n)]
                packed = self._quantized(
                    kernels.COLUMNS_Q8_QUADS, w, (quads, "int8"), ([n], "int32"), ([n], "float32")
                )
                return relax.call_dps_packed(
                    kernels.ADDMM_Q8_INT8, [bias, x, *packed], call.ty_args[0]
                )
            q, scale = self._quantized(
                kernels.COLUMNS_Q8, w, ([k, n], "int8"), ([n], "float32")
            )
            return relax.call_dps_packed(kernels.ADDMM_Q8, [bias, x, q, scale], call.ty_args[0])
        if name == kernels.LSTM:
            return self._lstm(call)
        if name == kernels.CONV1D_TRANSPOSE and self.transposed:
            return self._transposed(call)
        return None

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        rewritten = self._rewrite(call)
        return call if rewritten is None else rewritten

    def rewrite(self, func: relax.Function) -> relax.Function:
        self.bound = dict(relax.analysis.get_var2val(func))
        # the parameters past num_input are weights (LiftTransformParams' convention)
        inputs = func.attrs.get("num_input") if func.attrs else None
        self.weights = frozenset() if inputs is None else frozenset(func.params[int(inputs):])
        # The transposed rule quantizes float32 weights: only in a function whose
        # convolutions compute on int8 ones (a float32 checkpoint's build stays float32).
        self.transposed = self.products.transposed == "int8" and any(
            self._conv_weight(value) is not None for value in self.bound.values()
        )
        return relax.analysis.remove_all_unused(self.visit_expr(func))


def quantize_weights(
    names: Collection[str], products: LayerProducts = LayerProducts()
) -> tvm.transform.Pass:
    """The pass storing the weight parameters ``names`` (Relax names) as int8 where native
    kernels take them (see the module's docstring), their convolutions multiplying in
    ``products`` (kokoro_ext.build.precision)."""

    @tvm.transform.module_pass(opt_level=0, name="kokoro_ext.QuantizeWeights")
    def _quantize(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if not names:
            return mod
        native.load()
        rewriter = _Rewriter(mod, names, products)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.rewrite(func))
        return rewriter.builder_.get()

    return _quantize
