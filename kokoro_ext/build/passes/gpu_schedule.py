"""GPU schedules: the rules kokoro_ext.build.backend.gpu.pipeline applies, in order, and
the check that none of the stage's PrimFuncs was left without one.

``GPU_RULES``: ours first where dlight's rules do not serve Kokoro's functions
(``Convolution``), then dlight's GPU rules in the order of TVM's CUDA pipeline.
``check_scheduled`` refuses a module with a PrimFunc that has no thread binding: TVM
would compile it as host code (silently, a serial loop nest on the CPU side of a GPU
build) or fail deep in codegen.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.gpu.matmul import auto_inline_consumer_chain
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target


#: The start of the warning a convolution function left at a thread per output gives.
CONVOLUTION_FALLBACK = "convolution not register-tiled, a thread per output:"


def _block_names(func: tirx.PrimFunc) -> list[str]:
    names: list[str] = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, lambda b: names.append(str(b.name_hint)))])
    return names


@dataclass(frozen=True)
class ConvolutionTiles:
    """How ``Convolution`` tiles a convolution's outputs [batch, channels, positions].

    A work group computes ``channel_threads * channels_per_thread`` channels by
    ``position_threads * positions_per_thread`` positions; each thread keeps its
    ``channels_per_thread x positions_per_thread`` sums in registers and, per input channel
    and tap, loads that many weights and (padded) inputs once: ``channels_per_thread *
    positions_per_thread`` multiply-adds for ``channels_per_thread + positions_per_thread``
    loads, where a thread per output makes two loads and a read-modify-write of its sum in
    memory per multiply-add.
    """

    channels_per_thread: int = 4
    positions_per_thread: int = 4
    #: threads of a work group (channel_threads x position_threads)
    threads: int = 128
    channel_threads: int = 8

    def for_channels(self, channels: int) -> tuple[int, int, int, int]:
        """(channel threads, channels per thread, position threads, positions per thread)
        for a convolution of ``channels`` output channels: fewer channel threads for
        narrow ones (the F0 and STFT convolutions have 1 and 22), the work group's other
        threads along positions."""
        wide = channels >= self.channel_threads * self.channels_per_thread
        per_thread = self.channels_per_thread if wide else 1
        threads = 1
        while threads < self.channel_threads and threads * per_thread < channels:
            threads *= 2
        return threads, per_thread, self.threads // threads, self.positions_per_thread


class Convolution(dl.ScheduleRule):
    """A 1-D convolution (TOPI's ``conv1d_ncw`` block: spatial batch, channel, position;
    reduction input channel, tap), with its padded input and what was fused after it,
    register-tiled (``ConvolutionTiles``): outputs bound to work groups and threads, the
    sums in registers, the weights and padded inputs of one input channel and tap loaded
    into registers, the epilogue applied to the sums as they are stored.

    ``None`` for a function without such a block.  One whose structure the tiling does
    not take (a consumer that is not elementwise on the convolution's output, a producer
    of the weights), or whose registers the target's codegen cannot size
    (``_registers_fit``), gets dlight's ``Fallback``: a thread per output.

    dlight's Matmul rule would take these as products and tile them in workgroup memory;
    for the source stage's strided STFT convolution, the WGSL it makes crashes Chromium's
    SwiftShader when the pipeline is created ("A valid external Instance reference no
    longer exists").
    """

    def __init__(self, tiles: ConvolutionTiles = ConvolutionTiles()):
        self.tiles = tiles

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc):
            return None
        if not any(name.startswith("conv1d") for name in _block_names(func)):
            return None
        why = None
        try:
            sch = self._tiled(func)
        except (ScheduleError, AssertionError, _NotTileable) as err:
            sch, why = None, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        if sch is not None and not _registers_fit(sch.mod, target):
            sch = s_tir.Schedule(_compact_to_tiles(sch.mod))
            if not _registers_fit(sch.mod, target):
                sch, why = None, "register arrays of a size the codegen does not take"
        if sch is None:
            # in the build's log (build.log): a convolution at a thread per output is slow
            warnings.warn(f"{CONVOLUTION_FALLBACK} {func.attrs.get('global_symbol', '')} "
                          f"({why})", stacklevel=2)  # fmt: skip
            return dl.gpu.Fallback().apply(func, target, tunable)
        return sch

    def _tiled(self, func: tirx.PrimFunc) -> s_tir.Schedule:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        convs = [b for b in blocks if sch.get(b).name_hint.startswith("conv1d")]
        if len(convs) != 1:
            raise _NotTileable("not one convolution")
        conv = convs[0]
        kinds = "".join(
            "S" if iv.iter_type == tirx.IterVar.DataPar else "R" for iv in sch.get(conv).iter_vars
        )
        if kinds != "SSSRR":
            raise _NotTileable(f"iterators {kinds}")
        channels = sch.get(conv).iter_vars[1].dom.extent
        if not isinstance(channels, tirx.IntImm):
            raise _NotTileable("symbolic channels")
        weight = sch.get(conv).reads[-1].source
        producers = sch.get_producers(conv)
        if len(producers) > 1 or any(sch.get(p).writes[0].source.same_as(weight) for p in producers):
            raise _NotTileable("computed weights")
        # the padding (or a fused prologue) is computed per tap into registers; what feeds
        # it is inlined into it
        data_producer = producers[0] if producers else None
        if data_producer is not None:
            for feeding in sch.get_producers(data_producer):
                sch.compute_inline(feeding)

        channel_threads, per_channel, position_threads, per_position = self.tiles.for_channels(
            int(channels)
        )
        batch, channel, position, reduce_channel, tap = sch.get_loops(conv)
        c_block, c_thread, c_inner = sch.split(channel, [None, channel_threads, per_channel])
        p_block, p_thread, p_inner = sch.split(position, [None, position_threads, per_position])
        sch.reorder(batch, c_block, p_block, c_thread, p_thread, reduce_channel, tap, c_inner, p_inner)
        # the batch with the channels' blocks, whose number is static: fused with the
        # positions' blocks, a symbolic division would bound the padded input's registers,
        # and WGSL needs them of static size (and has no blockIdx.z)
        sch.bind(sch.fuse(batch, c_block), "blockIdx.y")
        sch.bind(p_block, "blockIdx.x")
        sch.bind(c_thread, "threadIdx.y")
        sch.bind(p_thread, "threadIdx.x")
        sums = sch.cache_write(conv, 0, "local")
        sch.reverse_compute_at(sums, p_thread, preserve_unit_loops=True)
        auto_inline_consumer_chain(sch, sums)
        if data_producer is not None:
            sch.set_scope(data_producer, 0, "local")
            sch.compute_at(data_producer, tap, preserve_unit_loops=True)
        else:
            sch.compute_at(sch.cache_read(conv, 0, "local"), tap, preserve_unit_loops=True)
        sch.compute_at(sch.cache_read(conv, 1, "local"), tap, preserve_unit_loops=True)
        sch.decompose_reduction(conv, reduce_channel)
        sch.unroll(c_inner)
        sch.unroll(p_inner)
        return sch


def _compaction(strict: bool) -> tvm.transform.Pass:
    """TVM's lowering up to and including CompactBufferAllocation, as its TIR pipeline
    (s_tir.pipeline) runs it."""
    return tvm.transform.Sequential(
        [
            s_tir.transform.LowerCrossThreadReduction(),
            s_tir.transform.LowerInitBlock(),
            s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
            s_tir.transform.ConvertBlocksToOpaque(),
            s_tir.transform.CompactBufferAllocation(strict),
        ]
    )


def _compact_to_tiles(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each allocation compacted to the region its accesses cover (a tile's
    registers: 16 inputs, 4 x 4 sums), not clipped to the whole tensor's symbolic
    length.  The strict compaction TVM's pipeline runs clips each tile by the tensor's
    extent (``min(n * 120 + 7, 16)``) where it cannot prove the length covers a tile;
    CUDA's codegen refuses such a stack allocation.  The tile's accesses are guarded
    by the outputs' bounds, so the tile-sized array is never read or written past
    what the clipped one would be.  TVM's pipeline runs the same passes again on the
    result, which leave it as it is (a constant tile clips to itself)."""
    return _compaction(strict=False)(mod)


def _registers_fit(mod: tvm.IRModule, target: Target) -> bool:
    """Whether the register arrays of ``mod``'s schedule have the sizes ``target``'s
    codegen needs, once TVM's lowering has compacted them to the regions a thread uses.

    Where a convolution's length is symbolic, compaction bounds a tile's registers by the
    whole tensor's length as well (``min(n * 120 + 7, 16)``: the tensor could be shorter
    than the tile).  WebGPU's codegen allocates such an array at its constant upper
    bound; CUDA's takes only constant sizes, so there the function gets a thread per
    output instead.
    """
    lowered = _compaction(strict=True)(mod)
    extents: list[tirx.PrimExpr] = []
    tvm_ffi.structural_walk(
        lowered["main"].body,
        [(s_tir.SBlock, lambda b: extents.extend(
            e for buf in b.alloc_buffers if buf.scope() == "local" for e in buf.shape))],
    )  # fmt: skip
    if target.kind.name == "webgpu":
        analyzer = sym.Analyzer()
        return all(analyzer.const_int_bound(e).max_value < 2**16 for e in extents)
    return all(isinstance(e, tirx.IntImm) for e in extents)


class _NotTileable(Exception):
    """A convolution function whose structure ``Convolution`` does not tile."""


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
