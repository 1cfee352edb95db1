"""The Relax pipeline our stages compile with, in the shape of TVM's CPU pipeline
(tvm.relax.backend.cpu_generic.pipeline): four named pass lists and the pipeline that
runs them in order.  This is the one place that decides which passes run and where.

  library_dispatch_passes  ``DispatchNativeKernels`` sends the GEMM-shaped ops to the
      native kernels (kokoro_ext.build.passes.dispatch), static or symbolic shapes alike,
      and ``winograd_conv1d`` turns the long stride-1 convolutions among them into
      Winograd (kokoro_ext.build.passes.winograd), and ``quantize_weights`` sends the
      kernels on the weights stored as int8 to their int8 forms
      (kokoro_ext.build.passes.quantize), whose convolutions multiply in the build's
      precision; then cpu_generic's.
  legalize_passes  ``LiftTransformParams`` first moves whatever depends on the weights
      alone (weight norm, transposes, Winograd filters) out of ``main`` into
      ``main_transform_params``, which the build runs once on the checkpoint
      (kokoro_ext.build.compiler.transform_weights): nothing recomputes them at run time.
      With ``transform_only`` only that function goes on (a cross build runs the weight
      transform compiled for the build machine: its stage libraries do not run there).
      Then cpu_generic's legalization and fusion (with ``fusion_reach``, ``near_fusion``
      right before FuseOps: kokoro_ext.build.passes.fusion), and our schedule rules on the fused
      functions (kokoro_ext.build.passes.schedule), where TVM's GPU pipelines put
      dlight's: cpu_generic schedules nothing.
  dataflow_lower_passes  cpu_generic's.
  finalize_passes  cpu_generic's, with ``exact_dynamic_sizes`` right before
      ``StaticPlanBlockMemory`` (storage the length sizes is planned for the call's batch,
      not the batch bound; ``call_sized_storage`` in a WebAssembly memory: every storage
      sized by the call) and ``pooled_storage`` right after ``LowerRuntimeBuiltin`` has
      made the planned storage allocations VM calls (kokoro_ext.build.passes.memory).

Without ``native_dense`` and ``native_storage`` (and with the "tir" LSTM), a stage calls
nothing of the native kernel library (cpp/): what a CPU without it takes, a browser's
(the ``wasm`` target, kokoro_ext.build.backend.browser).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from kokoro_ext.build.backend.base import PipelineOptions
from kokoro_ext.build.precision import LayerProducts
from kokoro_ext.build.passes import (
    DispatchNativeKernels,
    InlineElementwise,
    ParallelizeSpatial,
    VectorizeReduction,
    call_sized_storage,
    exact_dynamic_sizes,
    near_fusion,
    polyphase_conv_transpose,
    pooled_storage,
    quantize_weights,
    schedule_in_turn,
    winograd_conv1d,
)
from kokoro_ext.run.runner import TRANSFORM_PARAMS


def library_dispatch_passes(
    target: tvm.target.Target,
    native_dense: bool = True,
    int8_weights: frozenset[str] = frozenset(),
    products: LayerProducts = LayerProducts(),
    polyphase: bool = False,
) -> list[tvm.transform.Pass]:
    """Ours when ``native_dense``, then cpu_generic's: the native kernels first, then
    Winograd on the convolutions dispatch sent to them (its weights are the constants the
    importer bound, or the function's weight parameters), then the int8 forms of the
    kernels on the ``int8_weights``, multiplying in ``products``."""
    ours = [polyphase_conv_transpose] if polyphase else []
    if native_dense:
        ours += [DispatchNativeKernels(), winograd_conv1d, quantize_weights(int8_weights, products)]
    return ours + cpu_generic.library_dispatch_passes(target)


@tvm.transform.module_pass(opt_level=0, name="kokoro_ext.KeepTransformParams")
def keep_transform_params(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """``main_transform_params`` and what it calls, without ``main``."""
    mod = mod.clone()
    del mod["main"]
    return relax.transform.DeadCodeElimination([TRANSFORM_PARAMS])(mod)


def legalize_passes(
    target: tvm.target.Target, transform_only: bool = False, fusion_reach: int | None = None
) -> list[tvm.transform.Pass]:
    """Weight transforms lifted out of ``main`` (and ``main`` dropped with
    ``transform_only``), cpu_generic's legalization and fusion (with ``fusion_reach``,
    ``near_fusion`` right before FuseOps), then our schedule rules on each fused PrimFunc
    in turn."""
    # CSE first: ALBERT shares one layer's weights across its 12 layers, whose transposes
    # would otherwise be lifted (and stored) 12 times.
    lift = [relax.transform.EliminateCommonSubexpr(), relax.transform.LiftTransformParams()]
    if transform_only:
        lift.append(keep_transform_params)
    legalize = []
    for p in cpu_generic.legalize_passes(target):
        if fusion_reach is not None and p.info.name == "FuseOps":
            legalize.append(near_fusion(fusion_reach))
        legalize.append(p)
    if fusion_reach is not None and len(legalize) == len(cpu_generic.legalize_passes(target)):
        raise RuntimeError("cpu_generic.legalize_passes has no FuseOps: "
                           "kokoro_ext.build.passes.fusion.near_fusion has nowhere to run")
    schedule = schedule_in_turn(InlineElementwise(), VectorizeReduction(), ParallelizeSpatial())
    return lift + legalize + [schedule]


def dataflow_lower_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """cpu_generic's."""
    return cpu_generic.dataflow_lower_passes(target)


def finalize_passes(
    target: tvm.target.Target, native_storage: bool = True, bounded_storage: bool = True
) -> list[tvm.transform.Pass]:
    """cpu_generic's, with ``exact_dynamic_sizes`` (``call_sized_storage`` without
    ``bounded_storage``) before the memory planning, and the host storage allocations
    sent to the native pool once LowerRuntimeBuiltin has made them VM calls (with
    ``native_storage``)."""
    sizes = exact_dynamic_sizes if bounded_storage else call_sized_storage
    passes = []
    for p in cpu_generic.finalize_passes(target):
        if p.info.name == "StaticPlanBlockMemory":
            passes.append(sizes)
        passes.append(p)
        if native_storage and p.info.name == "LowerRuntimeBuiltin":
            passes.append(pooled_storage)
    if sizes not in passes:
        raise RuntimeError("cpu_generic.finalize_passes has no StaticPlanBlockMemory: "
                           f"kokoro_ext.build.passes.memory.{sizes.info.name} has nowhere "
                           "to run")
    if native_storage and pooled_storage not in passes:
        raise RuntimeError("cpu_generic.finalize_passes has no LowerRuntimeBuiltin: "
                           "kokoro_ext.build.passes.memory.pooled_storage has nowhere to run")
    return passes


def get_default_pipeline(
    target: tvm.target.Target, options: PipelineOptions | None = None
) -> tvm.transform.Pass:
    """The four lists in order, run under ``target``: what ``tvm.compile`` takes as its
    ``relax_pipeline`` (its "default" is the target-specific pipeline only for GPUs; for
    llvm it skips operator fusion)."""
    options = options or PipelineOptions()

    @tvm.transform.module_pass(opt_level=0, name="kokoro_ext.Pipeline")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        with target:
            seq = tvm.transform.Sequential(
                library_dispatch_passes(
                    target, options.native_dense, options.int8_weights, options.products,
                    options.polyphase,
                )
                + legalize_passes(target, options.transform_only, options.fusion_reach)
                + dataflow_lower_passes(target)
                + finalize_passes(target, options.native_storage, options.bounded_storage)
            )
            return seq(mod)

    return _pipeline
