"""GPU schedules: the rules kokoro_ext.build.gpu_pipeline applies, in order, and the check
that none of the stage's PrimFuncs was left without one.

``GPU_RULES``: ours first where dlight's rules do not serve Kokoro's functions
(``Convolution``), then dlight's GPU rules in the order of TVM's CUDA pipeline.  ``check_scheduled`` refuses a
module with a PrimFunc that has no thread binding: TVM would compile it as host code
(silently, a serial loop nest on the CPU side of a GPU build) or fail deep in codegen.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target


def _block_names(func: tirx.PrimFunc) -> list[str]:
    names: list[str] = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, lambda b: names.append(str(b.name_hint)))])
    return names


class Convolution(dl.ScheduleRule):
    """A 1-D convolution or transposed convolution (TOPI's ``conv1d_ncw`` and
    ``conv1d_transpose_ncw`` blocks), with what was fused around it: a thread per output
    element, its sum over input channels and taps serial in that thread, producers and
    epilogue inlined (dlight's Fallback schedule).

    dlight's Matmul rule takes these as products and tiles them in workgroup memory; for
    the source stage's strided STFT convolution, the WGSL it makes crashes Chromium's
    SwiftShader when the pipeline is created ("A valid external Instance reference no
    longer exists"), and the decoder's are as large.  This is the simple, correct
    schedule; a tiled one is where the decoder's speed on a real GPU would come from.
    """

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc):
            return None
        if not any(name.startswith("conv1d") for name in _block_names(func)):
            return None
        return dl.gpu.Fallback().apply(func, target, tunable)


#: The schedule rules of a GPU build, first applicable wins (dlight.ApplyDefaultSchedule).
GPU_RULES: tuple[dl.ScheduleRule, ...] = (
    Convolution(),
    dl.gpu.Matmul(),
    dl.gpu.GEMV(),
    dl.gpu.Reduction(),
    dl.gpu.GeneralReduction(),
    dl.gpu.Fallback(),
)


class UnscheduledFunctionError(ValueError):
    """A GPU build has PrimFuncs without thread bindings."""


def has_thread_binding(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` binds a GPU thread or block index anywhere: a loop bound to a
    thread, or a launched thread (``thread_extent``)."""
    found = []
    tvm_ffi.structural_walk(
        func.body,
        [(tirx.For, lambda f: found.append(f.kind == tirx.ForKind.THREAD_BINDING)),
         (tirx.AttrStmt, lambda a: found.append(a.attr_key == "thread_extent"))],
    )  # fmt: skip
    return any(found)


def unscheduled_functions(mod: tvm.IRModule) -> list[str]:
    """The names of ``mod``'s PrimFuncs without a thread binding, sorted."""
    return sorted(
        gvar.name_hint
        for gvar, func in mod.functions.items()
        if isinstance(func, tirx.PrimFunc) and not has_thread_binding(func)
    )


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.CheckScheduled")
def check_scheduled(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """``mod`` unchanged; UnscheduledFunctionError naming every PrimFunc without a thread
    binding."""
    names = unscheduled_functions(mod)
    if names:
        raise UnscheduledFunctionError(
            f"{len(names)} function(s) of this GPU build have no GPU schedule (no thread "
            f"binding), so they would run as host code: {', '.join(names)}; give them a "
            "schedule rule (kokoro_ext.build.passes.gpu_schedule.GPU_RULES) or a kernel"
        )
    return mod
