"""``near_fusion``: FuseOps kept from stretching the life of large tensors.

FuseOps fuses an elementwise producer into its consumer wherever the consumer is, and
the fused call runs where the consumer was: the producer's inputs stay alive until then.
kokoro's generator sums three residual blocks over the same input (``xs += block(x)``),
each ending in a residual add; fused into the sum (with its ``/ 3`` and the next leaky ReLU),
those adds leave both inputs of each block's last add alive until all three blocks have
run: seven 128-channel tensors at 120 steps a frame at once, where three blocks run in
turn need five.  Where the memory is a WebAssembly memory, which never shrinks, that is
the stage's high-water mark.

``near_fusion(reach)`` runs right before FuseOps, after AnnotateTIROpPattern: a
``call_tir`` to a PrimFunc FuseOps would fuse as a producer (elementwise, broadcast,
injective) whose every use lies more than ``reach`` bindings later in its dataflow block
calls a copy of that PrimFunc marked opaque, so it runs where it is written, and its
inputs can die there.  Producers used nearby fuse as before.
"""

from __future__ import annotations

import tvm
from tvm import relax

#: tvm/relax/analysis: OpPatternKind
_INJECTIVE, _OPAQUE = 2, 8
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _fusable_producer(mod: tvm.IRModule, call: relax.Call) -> tvm.ir.GlobalVar | None:
    """The PrimFunc ``call`` calls, where it is a call_tir FuseOps may fuse forward."""
    if not isinstance(call, relax.Call) or not call.op.same_as(_CALL_TIR):
        return None
    gv = call.args[0]
    func = mod[gv]
    if not isinstance(func, tvm.tirx.PrimFunc) or func.attrs is None:
        return None
    pattern = func.attrs.get("op_pattern")
    return gv if pattern is not None and int(pattern) <= _INJECTIVE else None


def _far_producers(block: relax.DataflowBlock, mod: tvm.IRModule, reach: int) -> set[int]:
    """Indices of the bindings of ``block`` that are fusable producers first used more
    than ``reach`` bindings later."""
    index = {binding.var: i for i, binding in enumerate(block.bindings)}
    first_use: dict[int, int] = {}
    for i, binding in enumerate(block.bindings):
        for var in relax.analysis.free_vars(binding.value):
            if var in index:
                first_use.setdefault(index[var], i)
    return {i for i, binding in enumerate(block.bindings)
            if first_use.get(i, i) - i > reach and _fusable_producer(mod, binding.value)}


def near_fusion(reach: int) -> tvm.transform.Pass:
    """The pass of the module doc, for producers first used more than ``reach`` bindings
    after them."""

    @tvm.transform.module_pass(opt_level=0, name="kokoro_ext.NearFusion")
    def _pass(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        builder = relax.BlockBuilder(mod)
        opaque: dict[str, tvm.ir.GlobalVar] = {}

        def unfused(call: relax.Call) -> relax.Call:
            gv = call.args[0]
            if gv.name_hint not in opaque:
                copy = mod[gv].with_attr("op_pattern", _OPAQUE)
                opaque[gv.name_hint] = builder.add_func(copy, f"{gv.name_hint}_unfused")
            return relax.Call(call.op, [opaque[gv.name_hint], *call.args[1:]], call.attrs,
                              call.ty_args, call.span)

        updated = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
                continue
            blocks, changed = [], False
            for block in func.body.blocks:
                far = (_far_producers(block, mod, reach)
                       if isinstance(block, relax.DataflowBlock) else set())  # fmt: skip
                if far:
                    changed = True
                    block = relax.DataflowBlock(
                        [relax.VarBinding(b.var, unfused(b.value)) if i in far else b
                         for i, b in enumerate(block.bindings)], block.span)  # fmt: skip
                blocks.append(block)
            if changed:
                body = relax.SeqExpr(blocks, func.body.body, func.body.span)
                updated[gv] = relax.Function(func.params, body, func.ret_ty, func.is_pure,
                                             func.attrs, func.span)
        out = builder.get()
        for gv, func in updated.items():
            out[gv] = func
        return relax.transform.Normalize()(out)  # the new functions' types

    return _pass
