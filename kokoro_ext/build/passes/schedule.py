"""Our schedule rules for the fused PrimFuncs, applied in turn by ``schedule_in_turn``
(kokoro_ext.build.backend.cpu.pipeline runs them right after operator fusion).

TVM 0.27's CPU pipeline (relax.backend.cpu_generic) fuses operators (FuseOps/FuseTIR) but
applies no schedule to the fused functions: each op in a fused function stays its own
loop nest writing a full-size intermediate buffer, and every loop is serial and scalar.

``InlineElementwise`` inlines every block it can into its consumer (or its producer), so
a fused chain is one loop nest that LLVM vectorizes.  Kokoro's AdaIN + Snake chains are
~30 elementwise ops over [C, 120 T] tensors: the decoder's AdaIN + Snake time drops from
about 1 s to 0.1 s at 128 frames.

``VectorizeReduction`` then schedules what is left of the reductions over the innermost
axis (AdaIN's masked mean and variance over frames, softmax's max and sum): LLVM does not
vectorize a float sum by itself (that would reorder the adds), so each was a serial chain
of scalar adds.  The rule splits the axis into vector lanes of partial results (rfactor)
and runs the outer axes in parallel: masked sum + variance over [1, 128, 30721] drop from
14 ms to 1.8 ms (memory-bound now), the decoder's statistics from ~0.4 s to 0.07 s at 128
frames; the lane-wise partial sums are also closer to the exact sums.  A symbolic
length (torch.export Dim) is split the same way: the loop over whole vectors is marked
``pragma_loop_partition_hint`` so that the lowering's LoopPartition pass peels the last,
partial vector off it symbolically (the loop_partition primitive needs a static extent),
leaving an unpredicated vector loop and a guarded scalar tail.

``ParallelizeSpatial`` last: the elementwise loop nests (the inlined chains, and the
single ops FuseOps leaves alone: residual adds, mask products, gathers) ran on one core
while the native kernels around them used all.  Their outer loops (batch x channels) now
run in parallel: on 2 cores, a 100-word paragraph's decoder went from 3.2-3.4 s to
3.0-3.2 s, its source stage from 120 to 85 ms.
"""

from __future__ import annotations

import math

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis.common_analysis import get_sblockrealize as _get_sblock_realize
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target.codegen import target_has_features

from kokoro_ext.build.passes.winograd import length_bounds


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


def _root_blocks(sch: s_tir.Schedule) -> list[s_tir.schedule.SBlockRV]:
    """The blocks directly under the root block; none for a function without one."""
    try:
        return list(sch.get_child_blocks(sch.get_sblock("root")))
    except s_tir.schedule.ScheduleError:  # no root block: a hand-written opaque function
        return []


def _inline_one(sch: s_tir.Schedule) -> bool:
    # dlight's try_inline needs normalize_prim_func, which gives up on fused functions
    # that mix reductions with elementwise blocks (AdaIN's statistics and its affine).
    for block in _root_blocks(sch):
        for inline in (sch.compute_inline, sch.reverse_compute_inline):
            try:
                inline(block)
                return True
            except s_tir.schedule.ScheduleError:
                continue
    return False


class _BlockRule(CPUScheduleRule):
    """A rule that schedules each block under a function's root on its own: ``apply``
    returns the schedule if ``schedule_block`` scheduled any, None if none or if one
    raised a ScheduleError (the function is then left as it was)."""

    def schedule_block(
        self, sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, target: tvm.target.Target
    ) -> bool:
        raise NotImplementedError

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, _: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        scheduled = 0
        try:
            for block in _root_blocks(sch):
                scheduled += self.schedule_block(sch, block, target)
        except s_tir.schedule.ScheduleError:
            return None
        return sch if scheduled else None


class VectorizeReduction(_BlockRule):
    """Parallelize and vectorize the reductions over a function's innermost axis.

    Each such block ``y[s] = reduce(f(x[s, k]) for k)`` (sum, max, ...: what ``rfactor``
    accepts) becomes a parallel loop over ``s`` that accumulates ``lanes`` partial results
    with vector ops, then reduces them.  Other blocks are left as they are; a function
    without such a block is left unchanged.
    """

    def schedule_block(self, sch, block, target) -> bool:
        lanes = _innermost_reduction_lanes(sch, block, target)
        if lanes:
            _vectorize_reduction(sch, block, lanes)  # a ScheduleError: rfactor's reducers
        return bool(lanes)


class ParallelizeSpatial(_BlockRule):
    """Run the outer loops of a function's elementwise blocks on all the cores.

    Each root block whose iterators are all spatial gets its loops but the innermost (which
    LLVM vectorizes) fused into one parallel loop, where that loop can be long enough to
    share: at least ``min_outer`` outer iterations and ``min_elements`` in all, a symbolic
    extent counted at its upper bound.  Other blocks (reductions: VectorizeReduction's)
    are left as they are.
    """

    def __init__(self, min_outer: int = 4, min_elements: int = 1 << 14):
        self.min_outer = min_outer
        self.min_elements = min_elements

    def schedule_block(self, sch, block, target) -> bool:
        stmt, loops = sch.get(block), sch.get_loops(block)
        if len(loops) < 2 or any(v.iter_type != tirx.IterVar.DataPar for v in stmt.iter_vars):
            return False
        if any(sch.get(loop).kind != tirx.ForKind.SERIAL for loop in loops):
            return False
        if not self._worth_sharing(sch, [sch.get(loop).extent for loop in loops]):
            return False
        try:
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        except s_tir.schedule.ScheduleError:  # loops shared with another block
            return False
        return True

    def _worth_sharing(self, sch: s_tir.Schedule, extents: list[tirx.PrimExpr]) -> bool:
        # A symbolic extent counts at its upper bound (the Dim's max, or unbounded).
        bounds = [e.value if isinstance(e, tirx.IntImm) else _upper_bound(sch, e) for e in extents]
        outer = math.prod(bounds[:-1])
        return outer >= self.min_outer and outer * bounds[-1] >= self.min_elements


# Vector register widths by CPU feature: TVM 0.27's llvm_get_vector_width says 512 bits
# for any x86-64 CPU.  At least 256 bits of lanes, so that on 128-bit SIMD two registers
# accumulate independently instead of each add waiting on the previous one.
_VECTOR_BITS = (("avx512f", 512), ("avx", 256), ("sse2", 128), ("neon", 128))


def _vector_lanes(target: tvm.target.Target, dtype_bits: int) -> int:
    bits = next((b for f, b in _VECTOR_BITS if target_has_features(f, target)), 256)
    return max(bits, 256) // dtype_bits


def _innermost_reduction_lanes(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, target: tvm.target.Target
) -> int:
    """The vector lanes for ``block`` if it is ``y[s...] = reduce(f(x[..., k]) for k)`` in
    plain loops over ``s..., k`` with ``k`` contiguous in memory and long enough; else 0."""
    stmt, loops = sch.get(block), sch.get_loops(block)
    if len(stmt.writes) != 1 or len(loops) < 2 or len(loops) != len(stmt.iter_vars):
        return 0
    dtype = tvm.DataType(stmt.writes[0].source.dtype)
    if dtype.type_code != tvm.DataTypeCode.FLOAT:
        return 0
    bindings = _get_sblock_realize(sch, block).iter_values
    if any(not v.same_as(sch.get(loop).loop_var) for v, loop in zip(bindings, loops)):
        return 0
    *spatial, k = stmt.iter_vars
    if k.iter_type != tirx.IterVar.CommReduce:
        return 0
    if any(v.iter_type != tirx.IterVar.DataPar for v in spatial):
        return 0
    lanes = _vector_lanes(target, dtype.bits)
    extent = sch.get(loops[-1]).extent
    if isinstance(extent, tirx.IntImm) and extent.value < lanes:
        return 0  # too short for vectors to pay off
    if not isinstance(extent, tirx.IntImm) and _upper_bound(sch, extent) < lanes:
        return 0  # a symbolic length that is never long enough
    # k must be the last index, with stride 1, of whatever it indexes (no gathers)
    for read in stmt.reads:
        *outer, last = read.region
        if any(_uses(r.min, k.var) for r in outer):
            return 0
        if _uses(last.min, k.var) and not last.min.same_as(k.var):
            return 0
    return lanes


def _upper_bound(sch: s_tir.Schedule, expr: tirx.PrimExpr) -> float:
    """The largest value of ``expr`` given the function's ``tir_var_upper_bound`` attr
    (what torch.export's Dim max becomes); infinity where that does not bound it."""
    attrs = sch.mod["main"].attrs or {}
    _, longest = length_bounds(expr, None, attrs.get("tir_var_upper_bound"))
    return float("inf") if longest is None else longest


def _uses(expr: tirx.PrimExpr, var: tirx.Var) -> bool:
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def _vectorize_reduction(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, lanes: int) -> None:
    *spatial, k = sch.get_loops(block)
    extent = sch.get(k).extent
    if len(spatial) > 1:
        sch.fuse(*spatial)
    sch.split(k, factors=[None, lanes])
    ndim = len(sch.get(block).writes[0].region)
    rf = sch.rfactor(sch.get_loops(block)[-1], factor_axis=ndim)  # partials: [y.shape, lanes]
    outer, ko, ki = sch.get_loops(rf)
    sch.parallel(outer)
    # reverse_compute_at, not compute_at: TVM 0.27's compute_at drops rf's predicate
    sch.reverse_compute_at(block, outer)
    sch.vectorize(ki)
    sch.decompose_reduction(rf, ko)
    # The split's predicate (k < extent) would scalarize the vector loop: peel the last
    # iteration, so that the main loop has no predicate.
    if not isinstance(extent, tirx.IntImm):
        # A symbolic length: the loop_partition primitive needs a static extent, so ask
        # the lowering's LoopPartition pass to do it, which solves the predicate for ko
        # symbolically: a vector loop over extent // lanes, then a scalar guarded tail.
        sch.annotate(ko, "pragma_loop_partition_hint", 1)
    elif extent.value % lanes:
        sch.loop_partition(ko, factors=[extent.value // lanes, None])


def schedule_in_turn(*rules: CPUScheduleRule) -> tvm.transform.Pass:
    """Apply ``rules`` to each PrimFunc in turn, each to what the previous ones made of it.

    dlight.ApplyDefaultSchedule stops at the first rule that applies, and skips functions
    that an earlier ApplyDefaultSchedule marked scheduled.
    """

    @tvm.transform.module_pass(opt_level=0, name="ScheduleInTurn")
    def _pass(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        updated = {}
        for gvar, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or func.attrs.get("tirx.is_scheduled", 0):
                continue
            target = func.attrs.get("target") or tvm.target.Target.current(allow_none=False)
            new = func
            for rule in rules:
                sch = rule.apply(new, target, False)
                new = new if sch is None else sch.mod["main"]
            if not new.same_as(func):
                updated[gvar] = new.with_attr("tirx.is_scheduled", True)
        for gvar, func in updated.items():
            mod[gvar] = func
        return mod

    return _pass
