"""A float64 running sum of float32 values, on devices without float64: a Relax pass.

The source stage accumulates its harmonics' phase as ``cumsum(rad.to(float64))`` and
rounds it back to float32 (kokoro_ext.build.export.harmonic_source: a float32 sum drifts
by float32 steps over thousands of radians).  WGSL has no float64, and TVM's GPU scan
fails on a symbolic length.  ``compensated_cumsum`` rewrites
``astype(cumsum(astype(x, "float64"), axis=1), "float32")`` on a float32 ``x`` of rank 3
into one kernel that carries the sum as two float32 numbers (Neumaier's compensated sum:
a high part and the rounding error each addition drops) and rounds ``high + low`` once:
the float64 sum's value to within float32 rounding of the result, as on the CPU.  Other
scans are left alone (the pipeline's scheduled check then names them).

``phase_scan``'s schedule: one thread per (row, channel), the time loop serial in it
(9 channels of a few hundred to a few thousand steps: the scan is not where a stage's
time goes).  Only additions and subtractions, so that neither fast math nor FMA
contraction can change what the compensation computes.
"""

from __future__ import annotations

import functools

import tvm
from tvm import relax, tirx
from tvm.script import tirx as T

_ASTYPE = tvm.ir.Op.get("relax.astype")
_CUMSUM = tvm.ir.Op.get("relax.cumsum")
#: Threads per work group of ``phase_scan``.
THREADS = 64


@functools.cache
def phase_scan() -> tirx.PrimFunc:
    """y[b, :, c] = float32(the float64 running sum of x[b, :, c]), x and y [B, L, C]."""

    @T.prim_func(private=True, s_tir=True)
    def scan(x_handle: T.handle, y_handle: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        B, L, C = T.int64(), T.int64(), T.int64()
        x = T.match_buffer(x_handle, (B, L, C), "float32")
        y = T.match_buffer(y_handle, (B, L, C), "float32")
        # a root block, as TVMScript's schedulable functions have: Relax's reshape
        # analysis (RewriteDataflowReshape) requires one of any call_tir's callee
        with T.sblock("root"):
            for block in T.thread_binding((B * C + THREADS - 1) // THREADS, thread="blockIdx.x"):
                for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                    high = T.alloc_buffer((1,), "float32", scope="local")
                    low = T.alloc_buffer((1,), "float32", scope="local")
                    total = T.alloc_buffer((1,), "float32", scope="local")
                    if block * THREADS + tx < B * C:
                        high[0] = T.float32(0)
                        low[0] = T.float32(0)
                        for t in range(L):
                            value = x[(block * THREADS + tx) // C, t, (block * THREADS + tx) % C]
                            total[0] = high[0] + value
                            # Neumaier: the error of the addition, whichever term is larger
                            if T.abs(high[0]) >= T.abs(value):
                                low[0] = low[0] + ((high[0] - total[0]) + value)
                            else:
                                low[0] = low[0] + ((value - total[0]) + high[0])
                            high[0] = total[0]
                            y[(block * THREADS + tx) // C, t, (block * THREADS + tx) % C] = (
                                high[0] + low[0]
                            )

    return scan


def _is_call(expr: relax.Expr | None, op: tvm.ir.Op) -> bool:
    return isinstance(expr, relax.Call) and expr.op.same_as(op)


def _dtype(expr: relax.Expr) -> str:
    return str(getattr(expr.ty, "dtype", ""))


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.bound: dict[relax.Var, relax.Expr] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.bound[binding.var] = binding.value
        super().visit_var_binding_(binding)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        source = self._float32_cumsum_source(call)
        if source is None:
            return call
        gvar = self.builder_.add_func(phase_scan(), "phase_scan")
        return relax.call_tir(gvar, [source], relax.TensorType(source.ty.shape, "float32"))

    def _float32_cumsum_source(self, call: relax.Call) -> relax.Expr | None:
        """x of ``astype(cumsum(astype(x, f64), axis=1), f32)``, x float32 of rank 3."""
        if not _is_call(call, _ASTYPE) or str(call.attrs.dtype) != "float32":
            return None
        scan = self.bound.get(call.args[0])
        if not _is_call(scan, _CUMSUM) or _dtype(scan) != "float64":
            return None
        if scan.attrs.exclusive or int(scan.attrs.axis) != 1:
            return None
        widen = self.bound.get(scan.args[0])
        if not _is_call(widen, _ASTYPE) or _dtype(widen.args[0]) != "float32":
            return None
        source = widen.args[0]
        return source if source.ty.ndim == 3 else None


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.CompensatedCumsum")
def compensated_cumsum(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Every float32 -> float64 -> float32 running sum of ``mod`` as ``phase_scan``."""
    rewriter = _Rewriter(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    mod = rewriter.builder_.get()
    return relax.transform.DeadCodeElimination()(mod)
