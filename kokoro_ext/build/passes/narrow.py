"""Tensors of the types a device lacks as types it has: Relax passes for WebGPU.

``narrow_integers``: tensors of 64-bit (and 8-bit) integers as 32-bit ones.

WGSL has no 64-bit integers (TVM's WebGPU codegen refuses ``i64``), and TVM's
``ForceNarrowIndexToInt32`` narrows indices but refuses int64 *buffers*.  Kokoro's stages
carry int64 tensors where torch.export writes them: token ids, ``lengths``, the
``arange`` of the masks, the indices of ``index_select``.  Every one of them is a count
or an index far below 2**31 (at most 512 tokens, 8192 frames, 600 samples a frame), so
``narrow_integers`` rewrites them as int32 before legalization: ``main``'s int64 parameters
and every call whose attributes or constant ask for int64.  Shapes (``R.shape``, symbolic
sizes) stay int64: they live on the host.

``bool_as_int32``: bool tensors between operators as int32 (WGSL cannot store bools).

``finite_constants``: infinite float constants as the largest finite ones (TVM's WGSL
cannot print an infinity).

``WGSL_PASSES`` lists the three in the order a WebGPU build runs them.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

_WIDE, _NARROW = "int64", "int32"
#: Integer tensors narrow_integers makes int32: 64-bit ones, and 8-bit ones (WGSL has no
#: 8-bit type at all, not even for values; Kokoro's are torch's ``any`` on 0s and 1s).
_TO_INT32 = frozenset({_WIDE, "int8", "uint8"})
#: Calls whose output types are given, not inferred.
_CALLS_WITH_OUTPUT_TYPES = ("relax.call_tir", "relax.call_dps_packed")


def _narrow_type(ty: relax.Type) -> relax.Type:
    if isinstance(ty, relax.TensorType) and str(ty.dtype) in _TO_INT32:
        if ty.shape is not None:
            return relax.TensorType(ty.shape, _NARROW, ty.vdevice)
        return relax.TensorType(ndim=ty.ndim, dtype=_NARROW)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_narrow_type(t) for t in ty.fields])
    return ty


def _narrow_attrs(attrs: tvm.ir.Attrs | None) -> tvm.ir.Attrs | None:
    """``attrs`` with an int64 or 8-bit ``dtype`` field made int32 (None if there is none)."""
    if attrs is None:
        return None
    info = type(attrs).__tvm_ffi_type_info__
    fields = {f.name: getattr(attrs, f.name) for f in info.fields}
    if str(fields.get("dtype", "")) not in _TO_INT32:
        return None
    fields["dtype"] = _NARROW
    return tvm.ir.make_node(info.type_key, **fields)


def _narrow_constant(const: tvm.ir.expr.Constant) -> tvm.ir.expr.Constant:
    if not isinstance(const.ty, relax.TensorType) or str(const.ty.dtype) not in _TO_INT32:
        return const
    value = const.value.numpy()
    info = np.iinfo(np.int32)
    if value.size and (value.min() < info.min or value.max() > info.max):
        raise ValueError(f"an int64 constant of shape {value.shape} does not fit in int32")
    return relax.const(value.astype(np.int32))


@relax.expr_functor.mutator
class _Narrower(relax.PyExprMutator):
    def visit_generic_const_(self, const: tvm.ir.expr.Constant) -> relax.Expr:
        return _narrow_constant(const)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        # Keep the importer's shapes (narrowed): inferring them again from a rebuilt call
        # loses what torch.export proved (a strided_slice of s6 * 600 would become a
        # min/max expression, and the shapes downstream would no longer match).
        value = self.visit_expr(binding.value)
        old = binding.var
        kind = relax.DataflowVar if isinstance(old, relax.DataflowVar) else relax.Var
        var = kind(old.name, _narrow_type(old.ty))
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        self.set_var_remap(old, var)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        # The arguments first, then the call rebuilt and normalized: normalizing the call
        # with narrowed arguments but its int64 attributes would fail type inference.
        args = [self.visit_expr(arg) for arg in call.args]
        if any(_is_narrow_tensor(arg) for arg in args):
            # A symbolic size in arithmetic with a narrowed tensor: 2 * frames - lengths
            args = [_narrow_prim_value(arg) for arg in args]
        attrs = _narrow_attrs(call.attrs) or call.attrs
        ty_args = call.ty_args
        if isinstance(call.op, tvm.ir.Op) and call.op.name in _CALLS_WITH_OUTPUT_TYPES:
            ty_args = [_narrow_type(t) for t in call.ty_args]
        call = self.builder_.normalize(relax.Call(call.op, args, attrs, ty_args))
        extremum = _float_extremum(call)
        return call if extremum is None else extremum


_EXTREMA = ("relax.max", "relax.min")


def _float_extremum(call: relax.Call) -> relax.Expr | None:
    """An int32 max or min computed in float32 (exact below 2**24, as Kokoro's counts and
    flags are): TVM's WGSL starts an int32 max from INT32_MIN, which it prints as the
    literal ``-2147483648i``, and WGSL cannot represent that literal."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name in _EXTREMA):
        return None
    if str(getattr(call.args[0].ty, "dtype", "")) != _NARROW:
        return None
    widened = relax.op.astype(call.args[0], "float32")
    return relax.op.astype(relax.Call(call.op, [widened, *call.args[1:]], call.attrs), _NARROW)


def _is_narrow_tensor(expr: relax.Expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == _NARROW


def _narrow_prim_value(expr: relax.Expr) -> relax.Expr:
    # a symbolic size is a PrimExpr argument of the call itself
    if tvm.ir.expr.is_prim_expr(expr) and str(expr.ty) == _WIDE:
        return tvm.tirx.Cast(_NARROW, expr)
    return expr


def _narrow_function(func: relax.Function) -> relax.Function:
    params = [relax.Var(p.name, _narrow_type(p.ty)) for p in func.params]
    mutator = _Narrower()
    for old, new in zip(func.params, params):
        mutator.set_var_remap(old, new)
    body = mutator.visit_expr(func.body)
    return relax.Function(params, body, None, func.is_pure, func.attrs, func.span)


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.NarrowIntegers")
def narrow_integers(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Every int64 and 8-bit integer tensor of the module's Relax functions as int32 (see
    the module's docstring); shapes stay int64."""
    updates = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updates[gvar] = _narrow_function(func)
    mod = mod.clone()
    for gvar, func in updates.items():
        mod[gvar] = func
    return relax.transform.Normalize()(mod)


# -- bool tensors between kernels as int32 ---------------------------------------------

#: Element types WGSL cannot store, which bool_as_int32 keeps as int32 copies (8-bit
#: integers are int32 throughout: narrow_integers).
_SHORT = frozenset({"bool"})


def _short_dtype(expr: relax.Expr) -> str | None:
    ty = expr.ty
    if isinstance(ty, relax.TensorType) and str(ty.dtype) in _SHORT:
        return str(ty.dtype)
    return None


#: Operators that, on the int32 copy of a bool tensor, give the int32 copy of their
#: result: those that only move elements, and max and min (torch's any and all).
_MOVES = frozenset(
    f"relax.{name}"
    for name in ("index_tensor", "take", "broadcast_to", "expand_dims", "reshape", "squeeze",
                 "permute_dims", "strided_slice", "flip", "concat", "repeat", "tile", "max",
                 "min")
)  # fmt: skip


@relax.expr_functor.mutator
class _ShortStorage(relax.PyExprMutator):
    """A bool-valued binding is followed by its int32 copy, which the operators
    using it read back as their type (so each computes with its own types); an operator
    of ``_MOVES`` runs on the copy itself.  Such constants become int32 ones read back."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.as_int: dict[relax.Var, relax.Expr] = {}  # a short var -> its int32 copy

    def _copy(self, arg: relax.Expr) -> relax.Expr | None:
        if isinstance(arg, relax.Var):
            return self.as_int.get(arg)
        if isinstance(arg, tvm.ir.expr.Constant) and _short_dtype(arg):
            return relax.const(arg.value.numpy().astype(np.int32))
        return None

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not isinstance(value, relax.Call):
            self.builder_.emit_normalized(relax.VarBinding(binding.var, self.visit_expr(value)))
            return
        copies = [self._copy(arg) for arg in value.args]
        op = value.op.name if isinstance(value.op, tvm.ir.Op) else ""
        dtype = _short_dtype(binding.var)
        moved = None
        if dtype and op in _MOVES and copies[0] is not None and all(c is None for c in copies[1:]):
            moved = relax.Call(value.op, [copies[0], *value.args[1:]], value.attrs, value.ty_args)
            extremum = _float_extremum(self.builder_.normalize(moved))
            moved = moved if extremum is None else extremum
        elif dtype and op == "relax.full" and copies[1] is not None:
            # a fill read back from int32 would be folded into a short constant again
            moved = relax.op.full(value.args[0], copies[1], "int32")
        if moved is not None:
            copy = self.builder_.emit(moved)
            back = self.builder_.normalize(relax.op.astype(copy, dtype))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, back))
            self.as_int[binding.var] = copy
            return
        args = [
            arg if copy is None else self.builder_.emit(relax.op.astype(copy, _short_dtype(arg)))
            for arg, copy in zip(value.args, copies)
        ]
        call = self.builder_.normalize(relax.Call(value.op, args, value.attrs, value.ty_args))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, call))
        if dtype:
            self.as_int[binding.var] = self.builder_.emit(relax.op.astype(binding.var, "int32"))


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.BoolAsInt32")
def bool_as_int32(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Bool tensors passed between operators as int32 copies (TVM's WebGPU codegen declares
    a bool buffer ``array<i8>``, and WGSL has no 8-bit type).  Once fused, each copy is computed in its producer's kernel and read
    back in its consumer's; no such buffer is left between kernels, provided no pass
    folds the read-backs of constants into constants again (the GPU pipeline has no
    FoldConstant after this pass)."""
    rewriter = _ShortStorage(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get())


# -- infinite constants as the largest finite ones --------------------------------------


@relax.expr_functor.mutator
class _Finite(relax.PyExprMutator):
    def visit_generic_const_(self, const: tvm.ir.expr.Constant) -> relax.Expr:
        if not isinstance(const.ty, relax.TensorType) or str(const.ty.dtype) != "float32":
            return const
        value = const.value.numpy()
        if not np.isinf(value).any():
            return const
        largest = np.finfo(np.float32).max
        return relax.const(np.where(np.isinf(value), np.sign(value) * largest, value).astype(np.float32))


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.FiniteConstants")
def finite_constants(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Float32 constants of +-inf as +-FLT_MAX: TVM's WGSL prints an infinite literal as
    ``inff``, which WGSL cannot parse.  Kokoro's infinities are attention masks, filled
    with -inf and compared with -inf: the same finite value in both places gives the same
    softmax (exp underflows to 0 either way) and the same comparisons."""
    rewriter = _Finite(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    return rewriter.builder_.get()


#: What a WebGPU build runs before legalization, in this order.
WGSL_PASSES = (narrow_integers, bool_as_int32, finite_constants)
