"""Storage sized for the call, from the native pool: two Relax passes of the finalization.

``exact_dynamic_sizes`` runs right before ``StaticPlanBlockMemory`` (both pipelines'
``finalize_passes``): where a planned tensor's shape has a bounded variable (the batch)
beside an unbounded one (the length), it drops that variable's ``tir_var_upper_bound``, so
that the planner sizes the storage for the call's batch, not for the bound (below).

After memory planning, every buffer a stage function uses comes from an
``R.vm.alloc_storage`` call, which the VM serves from the allocator it was initialized
with.  The runtime gives it the naive one (kokoro_ext.run.runner: the pooled one keeps
freed buffers for requests of exactly their size, and the sizes follow the input's
length), and the naive one returns every buffer to the system after its last use: the
next call's buffers are fresh mmaps, page-faulted in again (about 10,000 page faults per
synthesis of one word, 5-8% of its time).

``call_sized_storage`` takes its place where the memory is a WebAssembly memory: every
storage sized by the call, none planned at the bounds.

``pooled_storage`` runs right after ``LowerRuntimeBuiltin`` (the pipeline's
kokoro_ext.build.backend.cpu.pipeline.finalize_passes) and sends each host ``R.vm.alloc_storage`` to
``kokoro_ext.alloc_storage`` (cpp/src/storage.cc): a pool that serves a request from the
smallest freed buffer it fits in, and keeps a bounded amount of freed memory.  The
storage it returns is the VM's own ``vm.Storage``, so ``R.vm.alloc_tensor`` and the kills
``KillAfterLastUse`` placed work on it unchanged.
"""

from __future__ import annotations

import tvm
from tvm import relax

from kokoro_ext.run import kernels

_VM_ALLOC_STORAGE = tvm.ir.Op.get("relax.vm.alloc_storage")


def _pooled_call(call: relax.Call) -> relax.Call | None:
    """``kokoro_ext.alloc_storage`` for a host ``R.vm.alloc_storage`` in global scope, or None."""
    if not call.op.same_as(_VM_ALLOC_STORAGE):
        return None
    size, device, dtype, scope = call.args
    # The runtime's VM has one device, the CPU: index 0, and -1 for the host.
    on_host = isinstance(device, tvm.tirx.IntImm) and int(device.value) in (0, -1)
    if not on_host or str(scope.value) != "global":
        return None
    return relax.Call(relax.ExternFunc(kernels.ALLOC_STORAGE), [size, dtype],
                      ty_args=[relax.ObjectType()])


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        pooled = _pooled_call(call)
        return call if pooled is None else pooled


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.PooledStorage")
def pooled_storage(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Send the host storage allocations of every Relax function to the native pool."""
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


# --- the planner's sizes -------------------------------------------------------------

_BUILTIN_ALLOC_TENSOR = tvm.ir.Op.get("relax.builtin.alloc_tensor")
_UPPER_BOUND = "tir_var_upper_bound"


def _dim_vars(dim: tvm.tirx.PrimExpr) -> set[str]:
    return {v.name for v in tvm.tirx.analysis.undefined_vars(dim)}


def _mixed_bounds(func: relax.Function, bounded: set[str]) -> set[str]:
    """The bounded variables of ``func``'s planned tensors (``R.builtin.alloc_tensor``)
    whose shapes also have a dimension of no upper bound."""
    mixed: set[str] = set()

    def visit(expr: relax.Expr) -> None:
        if not (isinstance(expr, relax.Call) and expr.op.same_as(_BUILTIN_ALLOC_TENSOR)):
            return
        shape = expr.args[0]
        if not isinstance(shape, relax.ShapeExpr):
            return
        dims = [_dim_vars(d) for d in shape.values]
        if any(d - bounded for d in dims):  # a dimension the planner cannot bound
            mixed.update(*(d for d in dims if d and d <= bounded))

    relax.analysis.post_order_visit(func.body, visit)
    return mixed


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.ExactDynamicSizes")
def exact_dynamic_sizes(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Drop a variable's ``tir_var_upper_bound`` where a planned tensor's shape has it
    beside a dimension of no bound; runs right before ``StaticPlanBlockMemory``.

    The planner sizes each storage with every dimension at its upper bound, one by one.
    A tensor of shape (batch, C, samples) with batch <= 16 (the stages' batch bound, from
    the export) and samples unbounded thus gets a storage of 16 * C * samples elements:
    still sized at run time (by the length), but 16 times a batch-1 call's tensor.  The
    decoder's storage in use at once grew by 7.6 MB a frame that way (1477 MiB at 200
    frames; a wasm32 instance, 2 GB, could not run a sentence of 285), 0.48 MB a frame
    without (92 MiB).  The bound buys no static storage there; without it the size is the
    tensor's own.  A variable no such shape has keeps its bound: the tensors of bounded
    dimensions alone keep their static storage.
    """
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or func.attrs is None:
            continue
        bounds = func.attrs.get(_UPPER_BOUND)
        if not bounds:
            continue
        mixed = _mixed_bounds(func, {str(k) for k in bounds})
        if not mixed:
            continue
        kept = {str(k): v for k, v in bounds.items() if str(k) not in mixed}
        updates[gv] = (func.with_attr(_UPPER_BOUND, kept) if kept
                       else func.without_attr(_UPPER_BOUND))
    return _replaced(mod, updates)


def _replaced(mod: tvm.IRModule, updates: dict) -> tvm.IRModule:
    """``mod`` with the functions ``updates`` gives (itself where there are none)."""
    if not updates:
        return mod
    mod = mod.clone()
    for gv, func in updates.items():
        mod[gv] = func
    return mod


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.CallSizedStorage")
def call_sized_storage(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Drop every ``tir_var_upper_bound``; runs right before ``StaticPlanBlockMemory`` in
    place of ``exact_dynamic_sizes``, so that every storage is sized by the call.

    Where a tensor's dimensions are all bounded, the planner gives it one static storage
    at the bounds.  Natively that costs the pages a call touches; in a WebAssembly memory,
    2 GB at most, the address space is the memory itself, and dlmalloc places the call's
    other buffers around such a block, touching new pages from one call to the next: the
    text stage's attention, planned for 16 chunks of 512 tokens, was five 192 MB storages.
    """
    updates = {
        gv: func.without_attr(_UPPER_BOUND)
        for gv, func in mod.functions_items()
        if isinstance(func, relax.Function) and func.attrs is not None
        and func.attrs.get(_UPPER_BOUND)
    }
    return _replaced(mod, updates)
