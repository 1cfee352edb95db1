"""The Relax pipeline our stages compile with: TVM's CPU pipeline plus one schedule rule.

TVM 0.27's CPU pipeline (relax.backend.cpu_generic) fuses operators (FuseOps/FuseTIR) but
applies no schedule to the fused functions: each op in a fused function stays its own
loop nest writing a full-size intermediate buffer.  Kokoro's AdaIN + Snake chains are ~30
elementwise ops over [C, 120 T] tensors, so the fused function made ~30 passes over
memory.  ``InlineElementwise`` inlines every block it can into its consumer (or its
producer), so a fused chain is one loop nest that LLVM vectorizes: the decoder's
AdaIN + Snake time drops from about 1 s to 0.1 s at 128 frames.
"""

from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.s_tir import dlight
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule

from kokoro_ext.frontend.winograd import winograd_conv1d


class InlineElementwise(CPUScheduleRule):
    """Inline the injective blocks of a fused function into their consumers."""

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, _: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        inlined = 0
        while _inline_one(sch):
            inlined += 1
        return sch if inlined else None


def _inline_one(sch: s_tir.Schedule) -> bool:
    # dlight's try_inline needs normalize_prim_func, which gives up on fused functions
    # that mix reductions with elementwise blocks (AdaIN's statistics and its affine).
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except s_tir.schedule.ScheduleError:  # no root block: a hand-written opaque function
        return False
    for block in blocks:
        for inline in (sch.compute_inline, sch.reverse_compute_inline):
            try:
                inline(block)
                return True
            except s_tir.schedule.ScheduleError:
                continue
    return False


def relax_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """cpu_generic's passes with ``InlineElementwise`` applied after operator fusion.

    Before them, ``winograd_conv1d`` picks the Winograd kernel for the native
    convolutions it pays for (kokoro_ext.frontend.winograd).
    """

    @tvm.transform.module_pass(opt_level=0)
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        with target:
            passes = (
                [winograd_conv1d]
                + cpu_generic.library_dispatch_passes(target)
                + cpu_generic.legalize_passes(target)
                + [dlight.ApplyDefaultSchedule(InlineElementwise())]
                + cpu_generic.dataflow_lower_passes(target)
                + cpu_generic.finalize_passes(target)
            )
            return tvm.transform.Sequential(passes)(mod)

    return _pipeline
