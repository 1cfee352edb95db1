"""Storage from the native pool: a Relax pass over the lowered module.

After memory planning, every buffer a stage function uses comes from an
``R.vm.alloc_storage`` call, which the VM serves from the allocator it was initialized
with.  The runtime gives it the naive one (kokoro_ext.run.runner: the pooled one keeps
freed buffers for requests of exactly their size, and the sizes follow the input's
length), and the naive one returns every buffer to the system after its last use: the
next call's buffers are fresh mmaps, page-faulted in again (about 10,000 page faults per
synthesis of one word, 5-8% of its time).

``pooled_storage`` runs right after ``LowerRuntimeBuiltin`` (the pipeline's
kokoro_ext.build.pipeline.finalize_passes) and sends each host ``R.vm.alloc_storage`` to
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
