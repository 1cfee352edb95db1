"""The schedule rules and Winograd with a symbolic time axis (torch.export Dim): the
reductions over it are vectorized with a scalar tail, and the long stride-1 convolutions
take Winograd at the lengths where a static build would."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from torch.export import Dim
from tvm import tirx
from tvm.relax.frontend.torch import from_exported_program
from tvm.s_tir import transform as s_tir_transform
from tvm.script import tirx as T

from kokoro_ext.run import kernels, native
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.frontend import custom_convert_map
from kokoro_ext.build.passes.winograd import length_bounds
from kokoro_ext.build.passes.schedule import ParallelizeSpatial, VectorizeReduction
from kokoro_ext.build.backend.cpu.pipeline import get_default_pipeline, library_dispatch_passes

# avx: 256-bit vectors, 8 float32 lanes
HASWELL = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
LLVM = tvm.target.Target({"kind": "llvm"})


@T.prim_func(private=True, s_tir=True)
def row_sums(var_x: T.handle, var_y: T.handle):
    n = T.int64()
    x = T.match_buffer(var_x, (T.int64(2), T.int64(16), n))
    y = T.match_buffer(var_y, (T.int64(2), T.int64(16)))
    for b, c, k in T.grid(T.int64(2), T.int64(16), n):
        with T.sblock("x_red"):
            vb, vc, vk = T.axis.remap("SSR", [b, c, k])
            with T.init():
                y[vb, vc] = T.float32(0)
            y[vb, vc] = y[vb, vc] + x[vb, vc, vk]


def test_symbolic_extent_reduction_schedule():
    # The split's predicate stays in the block; the loop over whole vectors is marked for
    # the lowering's LoopPartition pass, which peels the tail off it symbolically.
    @T.prim_func(private=True, s_tir=True)
    def expected(var_x: T.handle, var_y: T.handle):
        n = T.int64()
        x = T.match_buffer(var_x, (T.int64(2), T.int64(16), n))
        y = T.match_buffer(var_y, (T.int64(2), T.int64(16)))
        y_rf = T.sblock_alloc_buffer((T.int64(2), T.int64(16), T.int64(8)))
        for b_c_fused in T.parallel(T.int64(32)):
            for k_1_init in T.vectorized(T.int64(8)):
                with T.sblock("x_red_rf_init"):
                    vk_1 = T.axis.spatial(T.int64(8), k_1_init)
                    vb = T.axis.spatial(T.int64(2), b_c_fused // T.int64(16))
                    vc = T.axis.spatial(T.int64(16), b_c_fused % T.int64(16))
                    T.reads()
                    T.writes(y_rf[vb, vc, vk_1])
                    y_rf[vb, vc, vk_1] = T.float32(0.0)
            for k_0 in T.serial(
                (n + T.int64(7)) // T.int64(8), annotations={"pragma_loop_partition_hint": 1}
            ):
                for k_1 in T.vectorized(T.int64(8)):
                    with T.sblock("x_red_rf_update"):
                        vk_1 = T.axis.spatial(T.int64(8), k_1)
                        vb = T.axis.spatial(T.int64(2), b_c_fused // T.int64(16))
                        vc = T.axis.spatial(T.int64(16), b_c_fused % T.int64(16))
                        vk_0 = T.axis.reduce((n + T.int64(7)) // T.int64(8), k_0)
                        T.where(k_0 * T.int64(8) + k_1 < n)
                        T.reads(y_rf[vb, vc, vk_1], x[vb, vc, vk_0 * T.int64(8) + vk_1])
                        T.writes(y_rf[vb, vc, vk_1])
                        y_rf[vb, vc, vk_1] = y_rf[vb, vc, vk_1] + x[vb, vc, vk_0 * T.int64(8) + vk_1]
            for ax0 in range(T.int64(8)):
                with T.sblock("x_red"):
                    vk_1 = T.axis.reduce(T.int64(8), ax0)
                    vb = T.axis.spatial(T.int64(2), b_c_fused // T.int64(16))
                    vc = T.axis.spatial(T.int64(16), b_c_fused % T.int64(16))
                    T.reads(y_rf[vb, vc, vk_1])
                    T.writes(y[vb, vc])
                    with T.init():
                        y[vb, vc] = T.float32(0.0)
                    y[vb, vc] = y[vb, vc] + y_rf[vb, vc, vk_1]

    sch = VectorizeReduction().apply(row_sums, HASWELL, False)
    assert sch is not None
    tvm.ir.assert_structural_equal(sch.mod["main"], expected)


def test_symbolic_extent_never_long_enough_is_left_alone():
    short = row_sums.with_attr("tir_var_upper_bound", {"n": 7})
    assert VectorizeReduction().apply(short, HASWELL, False) is None
    long_enough = row_sums.with_attr("tir_var_upper_bound", {"n": 8})
    assert VectorizeReduction().apply(long_enough, HASWELL, False) is not None


@T.prim_func(private=True, s_tir=True)
def masked_channels(var_x: T.handle, var_m: T.handle, var_y: T.handle):
    b, n = T.int64(), T.int64()
    x = T.match_buffer(var_x, (b, T.int64(128), n))
    m = T.match_buffer(var_m, (b, T.int64(1), n))
    y = T.match_buffer(var_y, (b, T.int64(128), n))
    for i, c, k in T.grid(b, T.int64(128), n):
        with T.sblock("y"):
            vi, vc, vk = T.axis.remap("SSS", [i, c, k])
            y[vi, vc, vk] = x[vi, vc, vk] * m[vi, T.int64(0), vk]


def test_elementwise_outer_loops_run_in_parallel():
    # batch x channels shared among the cores; the time axis stays LLVM's to vectorize
    @T.prim_func(private=True, s_tir=True)
    def expected(var_x: T.handle, var_m: T.handle, var_y: T.handle):
        b, n = T.int64(), T.int64()
        x = T.match_buffer(var_x, (b, T.int64(128), n))
        m = T.match_buffer(var_m, (b, T.int64(1), n))
        y = T.match_buffer(var_y, (b, T.int64(128), n))
        for i_c_fused in T.parallel(b * T.int64(128)):
            for k in range(n):
                with T.sblock("y"):
                    vi = T.axis.spatial(b, i_c_fused // T.int64(128))
                    vc = T.axis.spatial(T.int64(128), i_c_fused % T.int64(128))
                    vk = T.axis.spatial(n, k)
                    T.reads(x[vi, vc, vk], m[vi, T.int64(0), vk])
                    T.writes(y[vi, vc, vk])
                    y[vi, vc, vk] = x[vi, vc, vk] * m[vi, T.int64(0), vk]

    sch = ParallelizeSpatial().apply(masked_channels, LLVM, False)
    assert sch is not None
    tvm.ir.assert_structural_equal(sch.mod["main"], expected)


def test_small_elementwise_and_reductions_are_left_serial():
    @T.prim_func(private=True, s_tir=True)
    def small(x: T.Buffer((1, 4, 16)), y: T.Buffer((1, 4, 16))):
        for i, c, k in T.grid(1, 4, 16):
            with T.sblock("y"):
                vi, vc, vk = T.axis.remap("SSS", [i, c, k])
                y[vi, vc, vk] = x[vi, vc, vk] * T.float32(2)

    assert ParallelizeSpatial().apply(small, LLVM, False) is None  # 64 elements
    assert ParallelizeSpatial().apply(row_sums, LLVM, False) is None  # a reduction
    # a symbolic length counts at its bound: 128 x 16 elements are too few to share
    short = masked_channels.with_attr("tir_var_upper_bound", {"b": 1, "n": 16})
    assert ParallelizeSpatial().apply(short, LLVM, False) is None
    assert ParallelizeSpatial().apply(short.with_attr("tir_var_upper_bound", {"b": 1, "n": 128}), LLVM, False)


def _loop_bodies(script: str, header: str) -> list[str]:
    """The bodies (the lines indented under it) of each loop in ``script`` whose header
    line contains ``header``."""
    lines, bodies = script.splitlines(), []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("for ") and header in line:
            indent = len(line) - len(line.lstrip())
            body = []
            for inner in lines[i + 1 :]:
                if len(inner) - len(inner.lstrip()) <= indent:
                    break
                body.append(inner)
            bodies.append("\n".join(body))
    return bodies


def test_symbolic_reduction_lowers_to_an_unpredicated_vector_loop():
    sch = VectorizeReduction().apply(row_sums, HASWELL, False)
    lower = tvm.transform.Sequential(
        [
            s_tir_transform.LowerInitBlock(),
            s_tir_transform.PlanAndUpdateBufferAllocationLocation(),
            s_tir_transform.ConvertBlocksToOpaque(),
            s_tir_transform.CompactBufferAllocation(),
            s_tir_transform.LowerMatchBuffer(),
            tirx.transform.StmtSimplify(),
            s_tir_transform.LowerOpaqueBlock(),
            tirx.transform.FlattenBuffer(),
            s_tir_transform.LoopPartition(),
            tirx.transform.VectorizeLoop(True),
            tirx.transform.StmtSimplify(),
        ]
    )
    script = lower(tvm.IRModule({"main": sch.mod["main"]}))["main"].script()
    # the accumulation over the n // 8 whole vectors: vector loads, no condition
    (main,) = _loop_bodies(script, "in range(n // T.int64(8))")
    assert "T.Ramp" in main and "if " not in main, script
    # the tail: at most one more group of 8, each element guarded
    (tail,) = _loop_bodies(script, "(n % T.int64(8) + T.int64(7)) // T.int64(8)")
    assert "if " in tail and "T.Ramp" not in tail, script


@pytest.mark.parametrize("n", [1, 7, 8, 9, 37, 1001])
def test_symbolic_reduction_matches_numpy(n):
    sch = VectorizeReduction().apply(row_sums, HASWELL, False)
    func = sch.mod["main"].with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=LLVM)
    x = np.random.default_rng(n).standard_normal((2, 16, n)).astype("float32") * 3 + 1
    y = tvm.runtime.tensor(np.full((2, 16), np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(x), y)
    np.testing.assert_allclose(y.numpy(), x.astype("float64").sum(-1), rtol=1e-5, atol=1e-4)


class MaskedStatistics(nn.Module):
    """AdaIN's masked mean and variance over frames, then the normalized affine."""

    def forward(self, x, mask):
        count = mask.sum(-1, keepdim=True)
        mean = (x * mask).sum(-1, keepdim=True) / count
        var = (((x - mean) * mask) ** 2).sum(-1, keepdim=True) / count
        return (x - mean) * torch.rsqrt(var + 1e-5)


def test_symbolic_masked_statistics_are_vectorized_and_match_numpy():
    frames = Dim("frames", min=1, max=4096)
    x, mask = torch.randn(1, 24, 50), torch.ones(1, 1, 50)
    program = torch.export.export(
        MaskedStatistics(), (x, mask), dynamic_shapes=({2: frames}, {2: frames})
    )
    mod = from_exported_program(program)
    scheduled = get_default_pipeline(LLVM)(mod)
    sums = {
        gv.name_hint: f.script() for gv, f in scheduled.functions.items()
        if isinstance(f, tirx.PrimFunc) and "sum" in gv.name_hint
    }  # fmt: skip
    assert len(sums) >= 3, sorted(sums)  # the count, the mean's sum, the variance's
    for name, script in sums.items():
        assert "T.parallel" in script and "T.vectorized" in script, name
        assert "pragma_loop_partition_hint" in script, name

    runner = StageRunner(tvm.compile(mod, target=LLVM, relax_pipeline=get_default_pipeline(LLVM)))
    for n in (1, 9, 37, 1001):  # 1, and lengths that are no multiple of any lane count
        rng = np.random.default_rng(n)
        x = (rng.standard_normal((1, 24, n)) * 3 + 1).astype("float32")
        mask = np.ones((1, 1, n), "float32")
        mask[..., n - n // 5 :] = 0
        (got,) = runner(torch.from_numpy(x), torch.from_numpy(mask))
        xd, md = x.astype("float64"), mask.astype("float64")
        mean = (xd * md).sum(-1, keepdims=True) / md.sum(-1, keepdims=True)
        var = (((xd - mean) * md) ** 2).sum(-1, keepdims=True) / md.sum(-1, keepdims=True)
        want = (xd - mean) / np.sqrt(var + 1e-5)
        np.testing.assert_allclose(got, want, atol=2e-4, err_msg=f"n={n}")


def test_length_bounds():
    frames = tirx.Var("frames", "int64")
    assert length_bounds(120 * frames + 1, {"frames": 2}, {"frames": 2048}) == (241, 245761)
    assert length_bounds(120 * frames + 1, None, None) == (1, None)
    assert length_bounds((frames + 1) // 2 + 3, {"frames": 5}, {"frames": 9}) == (6, 8)


@pytest.fixture(scope="module")
def native_loaded():
    native.load()


def _export(conv: nn.Module, frames: Dim, length: int) -> tvm.IRModule:
    x = torch.randn(1, conv.in_channels, length)
    with torch.no_grad():
        program = torch.export.export(conv, (x,), dynamic_shapes=({2: frames},))
    return from_exported_program(program, custom_convert_map=custom_convert_map())


def _dispatched(mod: tvm.IRModule) -> str:
    with LLVM:
        return tvm.transform.Sequential(library_dispatch_passes(LLVM))(mod).script()


def _runner(mod: tvm.IRModule) -> StageRunner:
    return StageRunner(tvm.compile(mod, target=LLVM, relax_pipeline=get_default_pipeline(LLVM)))


@pytest.mark.usefixtures("native_loaded")
def test_symbolic_conv_takes_winograd_where_it_pays_at_every_length():
    torch.manual_seed(0)
    # 64 -> 64 channels, 3 taps: Winograd pays from 256 output samples (64 tiles of 4)
    conv = nn.Conv1d(64, 64, 3, padding=1).eval()
    mod = _export(conv, Dim("frames", min=300, max=4096), 300)
    ir = _dispatched(mod)
    assert f'"{kernels.CONV1D_WINOGRAD}"' in ir and "if_pays" not in ir, ir
    runner = _runner(mod)
    for length in (300, 517):
        x = torch.randn(1, 64, length)
        (got,) = runner(x)
        with torch.no_grad():
            want = conv(x).numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


@pytest.mark.usefixtures("native_loaded")
def test_long_filters_take_winograd_from_one_tile_on():
    # 11 taps, dilation 5: Winograd from one F(6, 6) tile per phase (30 outputs), so a
    # length that starts there needs no direct fallback and keeps one filter, not two
    conv = nn.Conv1d(64, 64, 11, padding=25, dilation=5).eval()
    ir = _dispatched(_export(conv, Dim("frames", min=30, max=4096), 100))
    assert f'"{kernels.CONV1D_WINOGRAD}"' in ir and "if_pays" not in ir, ir
    ir = _dispatched(_export(conv, Dim("frames", min=2, max=4096), 100))
    assert f'"{kernels.CONV1D_WINOGRAD_IF_PAYS}"' in ir, ir


@pytest.mark.usefixtures("native_loaded")
def test_symbolic_conv_never_long_enough_stays_direct():
    conv = nn.Conv1d(64, 64, 3, padding=1).eval()
    ir = _dispatched(_export(conv, Dim("frames", min=2, max=200), 100))
    assert f'"{kernels.CONV1D_TAPS}"' in ir and "winograd" not in ir, ir


@pytest.mark.usefixtures("native_loaded")
def test_symbolic_conv_chooses_per_call_as_a_static_build_would():
    torch.manual_seed(1)
    # dilation 3, 3 taps (F(4, 3)): Winograd pays from 3 * 4 * 64 = 768 outputs
    conv = nn.Conv1d(64, 72, 3, padding=3, dilation=3).eval()
    mod = _export(conv, Dim("frames", min=2, max=4096), 100)
    ir = _dispatched(mod)
    assert f'"{kernels.CONV1D_WINOGRAD_IF_PAYS}"' in ir, ir
    runner = _runner(mod)
    for length, kernel in ((100, f'"{kernels.CONV1D_TAPS}"'), (1500, f'"{kernels.CONV1D_WINOGRAD}"')):
        x = torch.randn(1, 64, length)
        static = from_exported_program(
            torch.export.export(conv, (x,)), custom_convert_map=custom_convert_map()
        )
        assert kernel in _dispatched(static)
        (got,) = runner(x)
        (want_static,) = _runner(static)(x)
        # bit for bit what the static build computes (Winograd and the direct convolution
        # round differently), and PyTorch's result within float error
        np.testing.assert_array_equal(got, want_static, err_msg=f"length {length}")
        with torch.no_grad():
            want = conv(x).numpy()
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_if_pays_kernel_names_a_wrong_filter(native_loaded):
    import tvm_ffi

    conv = tvm_ffi.get_global_func(kernels.CONV1D_WINOGRAD_IF_PAYS)
    x = np.zeros((1, 64, 300), np.float32)
    taps = np.zeros((8, 3, 32, 8), np.float32)  # [C_out / 8, K, C_in, 8]: C_in 32; x has 64
    gw = np.zeros((6, 8, 64, 8), np.float32)
    out = np.zeros((1, 64, 300), np.float32)
    with pytest.raises(ValueError, match=r"conv1d_winograd_if_pays: taps must have shape \[8, 3, 64, 8\]"):
        conv(tvm_ffi.Shape([1, 1, 3]), *[tvm_ffi.from_dlpack(a) for a in
                                         (x, taps, gw, np.zeros(64, np.float32), out)])
