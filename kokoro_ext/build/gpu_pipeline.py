"""The Relax pipeline our stages compile with for GPUs (WebGPU, and CUDA on the same
lists), in the shape of TVM's CUDA pipeline (tvm.relax.backend.cuda.pipeline): four named
pass lists and the pipeline that runs them in order.  The CPU one is
kokoro_ext.build.pipeline; kokoro_ext.build.compiler picks by the target's kind.

  library_dispatch_passes  ``polyphase_conv_transpose``: the decoder's strided transposed
      convolutions as one stride-1 convolution of their phases, not over zeros
      (kokoro_ext.build.passes.polyphase); ``DispatchSampling``; no ``DispatchSortScan``: the one scan of
      the stages, the source stage's phase, is the project's own kernel
      (kokoro_ext.build.kernels.phase_scan), and TVM's GPU scan fails on a symbolic
      length.  No native kernels: they are CPU code.
  legalize_passes  ``LiftTransformParams`` as on the CPU, and the weight transform out of
      the module (``drop_transform_params``: it runs once, at build time, compiled for the
      build machine); for WGSL, which has no 64- or 8-bit integers, cannot store bools
      and TVM cannot print its infinities, ``WGSL_PASSES`` (kokoro_ext.build.passes.narrow);
      ``compensated_cumsum``: the source stage's float64 phase sum in
      float32 pairs (kokoro_ext.build.passes.scan); TVM's legalization and fusion; then dlight's GPU rules, ours
      first where dlight is weak (kokoro_ext.build.passes.gpu_schedule); and the check
      that every PrimFunc is scheduled (``check_scheduled``): a function left without
      thread bindings would be compiled as host code, silently, or fail in codegen.
  dataflow_lower_passes  TVM's.
  finalize_passes  TVM's generic GPU finalization, with the CPU pipeline's
      ``exact_dynamic_sizes`` before the planner (kokoro_ext.build.passes.memory): no CPU
      storage pool (its buffers are host memory), and no CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.s_tir import dlight as dl

from kokoro_ext.build.cudnn import LIB as CUDNN_LIB
from kokoro_ext.build.passes.dispatch import DispatchNativeKernels, cudnn_kernels
from kokoro_ext.build.passes.gpu_schedule import GPU_RULES, check_scheduled
from kokoro_ext.build.passes.memory import exact_dynamic_sizes
from kokoro_ext.build.passes.narrow import WGSL_PASSES
from kokoro_ext.build.passes.polyphase import polyphase_conv_transpose
from kokoro_ext.build.passes.scan import compensated_cumsum
from kokoro_ext.run.kernels import CUDNN_MATH
from kokoro_ext.run.runner import TRANSFORM_PARAMS


@dataclass(frozen=True)
class GpuPipelineOptions:
    """What a GPU build may choose about the pipeline."""

    #: The kernels are WGSL: int64 and int8 tensors as int32, bool tensors between
    #: kernels as int32, no infinite constants (kokoro_ext.build.passes.narrow).
    wgsl: bool = False
    #: Most operators fused into one kernel (TVM's default 256): a WGSL kernel must stay
    #: within the device's storage buffers, and the decoder's AdaIN and Snake chains fused
    #: whole need 11 and make megabytes of WGSL that Chromium's SwiftShader crashes on.
    fuse_depth: int = 256
    #: The math type of the cuDNN convolutions of a target with "cudnn" in its libs
    #: (kokoro_ext.run.kernels.CUDNN_MATH): exact float32 by default.
    cudnn_math: int = CUDNN_MATH["fp32"]


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.DropTransformParams")
def drop_transform_params(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """``mod`` without ``main_transform_params``: a GPU build compiles the weight transform
    apart, for the build machine (kokoro_ext.build.compiler), and ships none."""
    if TRANSFORM_PARAMS not in [g.name_hint for g in mod.get_global_vars()]:
        return mod
    mod = mod.clone()
    del mod[TRANSFORM_PARAMS]
    return relax.transform.DeadCodeElimination(["main"])(mod)


def library_dispatch_passes(
    target: tvm.target.Target, options: GpuPipelineOptions = GpuPipelineOptions()
) -> list[tvm.transform.Pass]:
    """The transposed convolutions by phases (the weight transform, compiled by the CPU
    pipeline for the build machine, rewrites them too: ``PipelineOptions.polyphase``);
    where the target's ``libs`` name cuDNN, the 1-D convolutions (the phases' too) to
    its library (kokoro_ext.build.cudnn); and TVM's sampling dispatch (nothing of
    Kokoro's uses it; kept as TVM's list has it)."""
    passes = [polyphase_conv_transpose]
    if CUDNN_LIB in target.attrs.get("libs", ()):
        passes.append(DispatchNativeKernels(cudnn_kernels(options.cudnn_math)))
    return passes + [relax.backend.DispatchSampling()]


def legalize_passes(
    target: tvm.target.Target, options: GpuPipelineOptions = GpuPipelineOptions()
) -> list[tvm.transform.Pass]:
    """Weight transforms lifted out of ``main``, int64 narrowed where asked, TVM's
    legalization and fusion, our GPU rules then dlight's, and the scheduled check."""
    lift = [
        relax.transform.EliminateCommonSubexpr(),
        relax.transform.LiftTransformParams(),
        drop_transform_params,
    ]
    narrow = list(WGSL_PASSES) if options.wgsl else []
    return (
        lift
        + narrow
        + [
            compensated_cumsum,
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
        ]
        # no FoldConstant after bool_as_int32: it would fold its read-backs of constants
        # into bool constants, which WGSL cannot store (the stages' weights are
        # parameters, so there is little else to fold)
        + ([] if options.wgsl else [relax.transform.FoldConstant()])
        + [
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            dl.ApplyDefaultSchedule(*GPU_RULES),
            check_scheduled,
        ]
    )


def dataflow_lower_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """TVM's."""
    return [
        relax.transform.RewriteDataflowReshape(),
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
    ]


def finalize_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """TVM's generic GPU finalization, with ``exact_dynamic_sizes`` before the planner."""
    return [
        exact_dynamic_sizes,
        relax.transform.StaticPlanBlockMemory(),
        relax.transform.LowerAllocTensor(),
        relax.transform.KillAfterLastUse(),
        relax.transform.LowerRuntimeBuiltin(),
        relax.transform.ComputePrimValue(),
        relax.transform.VMShapeLower(),
        relax.transform.AttachGlobalSymbol(),
    ]


def get_gpu_pipeline(
    target: tvm.target.Target, options: GpuPipelineOptions = GpuPipelineOptions()
) -> tvm.transform.Pass:
    """The four lists in order, run under ``target``: ``tvm.compile``'s ``relax_pipeline``."""

    @tvm.transform.module_pass(opt_level=0, name="kokoro_ext.GpuPipeline")
    def _pipeline(mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        config = {**ctx.config, "relax.FuseOps.max_depth": options.fuse_depth}
        with tvm.transform.PassContext(opt_level=ctx.opt_level, config=config), target:
            seq = tvm.transform.Sequential(
                library_dispatch_passes(target, options)
                + legalize_passes(target, options)
                + dataflow_lower_passes(target)
                + finalize_passes(target)
            )
            return seq(mod)

    return _pipeline


__all__ = [
    "GpuPipelineOptions",
    "drop_transform_params",
    "dataflow_lower_passes",
    "finalize_passes",
    "get_gpu_pipeline",
    "legalize_passes",
    "library_dispatch_passes",
]
