"""Dispatch of GEMM-shaped Relax ops to the native kernels (cpp/src/dense.cc), as a pass.

Like TVM's library dispatch passes (relax.backend.DispatchSortScan), ``DispatchNativeKernels``
runs first in the pipeline (kokoro_ext.build.pipeline.library_dispatch_passes), on the
module as imported, and reads each op's shapes from its Relax type: a symbolic length (a ``T.int64`` size var
from torch.export.Dim) is as good as a static one, since the kernels read their shapes
from the tensors at run time.  For float32:

  ``R.nn.conv1d`` (groups 1, NCW / OIW, symmetric padding), with the bias add the importer
  emits after it when that add is its only use
      -> ``kokoro_ext.conv1d(R.shape([stride, padding, dilation]), x, w, bias)``
  ``R.nn.conv1d_transpose`` (groups 1, dilation 1, NCW / IOW), bias as above
      -> ``kokoro_ext.conv1d_transpose(R.shape([stride, padding, output_padding]), x, w, bias)``
  ``R.matmul`` of [B, M, K] and [B, K, N] (no batch broadcast)
      -> ``kokoro_ext.bmm(x, w)``
  ``R.add`` of ``R.matmul`` of [M, K] and [K, N] and a bias [N] (aten.addmm, linear)
      -> ``kokoro_ext.addmm(bias, x, w)``

A convolution without a bias gets a zero one.  The result has the op's own type, so a
symbolic output length is the PrimExpr Relax inferred for it.  Where a rule does not apply
the op is left as it is, for LegalizeOps.  kokoro_ext.build.passes.winograd then turns the
long stride-1 ``kokoro_ext.conv1d`` calls into Winograd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, sym
from tvm.ir import Op
from tvm.ir.module import IRModule
from tvm.ir.transform import PassContext, module_pass
from tvm.relax import expr_functor

from kokoro_ext.run import kernels

_CONV1D = Op.get("relax.nn.conv1d")
_CONV1D_TRANSPOSE = Op.get("relax.nn.conv1d_transpose")
_MATMUL = Op.get("relax.matmul")
_ADD = Op.get("relax.add")
_RESHAPE = Op.get("relax.reshape")


def _shape(expr: relax.Expr, ndim: int) -> list[tvm.tirx.PrimExpr] | None:
    """The shape of ``expr`` if it is a float32 tensor of rank ``ndim`` with a known shape."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != "float32" or ty.ndim != ndim:
        return None
    if not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return list(ty.shape.values)


def _static(value: tvm.tirx.PrimExpr) -> int | None:
    return int(value.value) if isinstance(value, tvm.tirx.IntImm) else None


def _equal(a: tvm.tirx.PrimExpr, b: tvm.tirx.PrimExpr) -> bool:
    return sym.Analyzer().can_prove_equal(a, b)


def _is_op(expr: relax.Expr, op: Op) -> bool:
    return isinstance(expr, relax.Call) and expr.op.same_as(op)


@dataclass(frozen=True)
class KernelSet:
    """The packed functions the ops go to (None: the op stays for LegalizeOps), and the
    values appended to each convolution's options."""

    conv1d: str | None = kernels.CONV1D
    conv1d_transpose: str | None = kernels.CONV1D_TRANSPOSE
    bmm: str | None = kernels.BMM
    addmm: str | None = kernels.ADDMM
    conv_options: tuple[int, ...] = ()


#: The CPU's native kernels (cpp/src/dense.cc).
NATIVE = KernelSet()


def cudnn_kernels(math: int) -> KernelSet:
    """A CUDA build's convolutions through cuDNN (cpp/cuda/cudnn_conv.cc), with its math
    type (``kernels.CUDNN_MATH``); the rest for TVM's GPU schedules."""
    return KernelSet(kernels.CUDNN_CONV1D, None, None, None, (math,))


@dataclass(frozen=True)
class _Conv:
    """A 1-D convolution the native kernels take."""

    kernel: str
    options: tuple[int, ...]
    channels: int  # C_out
    ty: relax.TensorType  # the output's

    def call(self, x: relax.Expr, w: relax.Expr, bias: relax.Expr | None) -> relax.Call:
        if bias is None:
            bias = relax.const(np.zeros(self.channels, dtype="float32"))
        args = [relax.ShapeExpr(list(self.options)), x, w, bias]
        return relax.call_dps_packed(self.kernel, args, self.ty)


def _match_conv(call: relax.Expr, names: KernelSet) -> _Conv | None:
    """``call`` as a convolution of ``names``, or None where no kernel takes it."""
    if _is_op(call, _CONV1D) and names.conv1d is not None:
        kernel, kernel_layout, channel_axis = names.conv1d, "OIW", 0
    elif _is_op(call, _CONV1D_TRANSPOSE) and names.conv1d_transpose is not None:
        kernel, kernel_layout, channel_axis = names.conv1d_transpose, "IOW", 1
    else:
        return None
    x, w = call.args
    attrs = call.attrs
    w_shape = _shape(w, 3)
    if _shape(x, 3) is None or w_shape is None or _shape(call, 3) is None:
        return None
    layouts = (attrs.data_layout, attrs.kernel_layout, attrs.out_layout)
    if attrs.groups != 1 or layouts != ("NCW", kernel_layout, "NCW"):
        return None
    (stride,), (dilation,) = attrs.strides, attrs.dilation
    pad_left, pad_right = attrs.padding
    channels = _static(w_shape[channel_axis])
    if pad_left != pad_right or channels is None:
        return None
    if kernel_layout == "OIW":
        options = (int(stride), int(pad_left), int(dilation))
    else:
        if dilation != 1:
            return None
        (output_padding,) = attrs.output_padding
        options = (int(stride), int(pad_left), int(output_padding))
    return _Conv(kernel, options + names.conv_options, channels, call.ty)


def _is_bmm(call: relax.Expr) -> bool:
    """Whether ``call`` is a float32 [B, M, K] x [B, K, N] matmul (no batch broadcast)."""
    if not _is_op(call, _MATMUL):
        return False
    x_shape, w_shape = _shape(call.args[0], 3), _shape(call.args[1], 3)
    if x_shape is None or w_shape is None or _shape(call, 3) is None:
        return False
    return _equal(x_shape[0], w_shape[0]) and _equal(x_shape[2], w_shape[1])


def _match_mm(call: relax.Expr) -> relax.Expr | None:
    """The N of ``call`` if it is a float32 [M, K] x [K, N] matmul, else None."""
    if not _is_op(call, _MATMUL):
        return None
    x_shape, w_shape = _shape(call.args[0], 2), _shape(call.args[1], 2)
    if x_shape is None or w_shape is None or _shape(call, 2) is None:
        return None
    return w_shape[1]


@expr_functor.visitor
class _UseCounter(relax.PyExprVisitor):
    """How many times each variable is used."""

    def __init__(self):
        super().__init__()
        self.uses: dict[relax.Var, int] = {}

    def visit_var_(self, var: relax.Var) -> None:
        self.uses[var] = self.uses.get(var, 0) + 1

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> None:
        self.uses[var] = self.uses.get(var, 0) + 1


@expr_functor.mutator
class NativeKernelDispatcher(relax.PyExprMutator):
    """Rewrites the ops of one function at a time (see the module's docstring)."""

    def __init__(self, mod: IRModule | None = None, names: KernelSet = NATIVE):
        super().__init__(mod)
        self.names = names
        self._biased: dict[relax.Call, tuple[relax.Call, relax.Expr]] = {}
        self._dropped: set[relax.Var] = set()

    def rewrite(self, func: relax.Function) -> relax.Function:
        self._plan_bias_adds(func)
        try:
            return self.visit_expr(func)
        finally:
            self._biased, self._dropped = {}, set()

    def _plan_bias_adds(self, func: relax.Function) -> None:
        """Find the bias adds to fold into the kernel before them.

        An add of a convolution and its bias reshaped to [1, C_out, 1], or of a 2-D matmul
        and a [N] bias, becomes the kernel call with that bias when the add is the only use
        of the product, in the same block; the product's binding (and the reshape's, if the
        add was its only use) is then dropped.
        """
        counter = _UseCounter()
        counter.visit_expr(func)
        uses = counter.uses
        blocks = func.body.blocks if isinstance(func.body, relax.SeqExpr) else []
        for block in blocks:
            bound = {b.var: b.value for b in block.bindings if isinstance(b, relax.VarBinding)}
            for value in bound.values():
                if _is_op(value, _ADD):
                    self._plan_bias_add(value, bound, uses)

    def _plan_bias_add(self, add: relax.Call, bound: dict, uses: dict) -> None:
        for product, bias in (add.args, add.args[::-1]):
            producer = bound.get(product)
            if producer is None or uses.get(product) != 1:
                continue
            if not tvm_ffi.structural_equal(producer.ty, add.ty):
                continue  # the add broadcasts the product
            conv = _match_conv(producer, self.names)
            if conv is not None:
                bias_1d = self._conv_bias(bias, conv.channels, bound)
                if bias_1d is None:
                    continue
                self._biased[add] = (producer, bias_1d)
                if bias in bound and uses.get(bias) == 1:
                    self._dropped.add(bias)
                self._dropped.add(product)
                return
            n = _match_mm(producer) if self.names.addmm is not None else None
            if n is not None:
                bias_shape = _shape(bias, 1)
                if bias_shape is None or not _equal(bias_shape[0], n):
                    continue
                self._biased[add] = (producer, bias)
                self._dropped.add(product)
                return

    @staticmethod
    def _conv_bias(bias: relax.Expr, channels: int, bound: dict) -> relax.Expr | None:
        """The [C_out] tensor behind a bias broadcast as [1, C_out, 1], or None."""
        shape = _shape(bias, 3)
        if shape is None or [_static(v) for v in shape] != [1, channels, 1]:
            return None
        if isinstance(bias, tvm.ir.expr.Constant):
            return relax.const(bias.data.numpy().reshape(channels))
        reshape = bound.get(bias)
        if not _is_op(reshape, _RESHAPE):
            return None
        source = reshape.args[0]
        shape = _shape(source, 1)
        if shape is None or _static(shape[0]) != channels:
            return None
        return source

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self._dropped:
            return None  # folded into the kernel call that used it
        return super().visit_var_binding_(binding)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        native = self._native(call)
        if native is None:
            return super().visit_call_(call)
        return self.builder_.normalize(native)

    def _native(self, call: relax.Call) -> relax.Call | None:
        """The kernel call replacing ``call``, its arguments rewritten; None to keep it."""
        if call in self._biased:
            producer, bias = self._biased[call]
            x, w = (self.visit_expr(a) for a in producer.args)
            bias = self.visit_expr(bias)
            conv = _match_conv(producer, self.names)
            if conv is not None:
                return conv.call(x, w, bias)
            return relax.call_dps_packed(self.names.addmm, [bias, x, w], call.ty)
        conv = _match_conv(call, self.names)
        if conv is not None:
            x, w = (self.visit_expr(a) for a in call.args)
            return conv.call(x, w, None)
        if self.names.bmm is not None and _is_bmm(call):
            x, w = (self.visit_expr(a) for a in call.args)
            return relax.call_dps_packed(self.names.bmm, [x, w], call.ty)
        return None


@module_pass(opt_level=0, name="kokoro_ext.DispatchNativeKernels")
class DispatchNativeKernels:
    """Send the float32 1-D convolutions, batched matmuls and matmul + bias adds that the
    native kernels take to them, static or symbolic shapes alike (``names``: the CPU's
    kernels, or another set such as ``cudnn_kernels``)."""

    def __init__(self, names: KernelSet = NATIVE):
        self.names = names

    def transform_module(self, mod: IRModule, _ctx: PassContext) -> IRModule:
        dispatcher = NativeKernelDispatcher(mod, self.names)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                dispatcher.builder_.update_func(gv, dispatcher.rewrite(func))
        return dispatcher.builder_.finalize()
