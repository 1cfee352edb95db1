"""kokoro_ext.build.passes.gpu_schedule's Convolution rule, before and expected, in the
shape of dlight's rule tests, and what its kernels compute (run on the CPU: cpu_tir)."""

import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

import cpu_tir
from kokoro_ext.build import cuda as cuda_build
from kokoro_ext.build.backend import CUDA, WEBGPU
from kokoro_ext.build.passes.gpu_schedule import (
    CONVOLUTION_FALLBACK,
    Convolution,
    ConvolutionTiles,
    _registers_fit,
    has_thread_binding,
)

# fmt: off
# A 3-tap convolution of dilation 2 with its padding and bias, as LegalizeOps and FuseTIR
# make the decoder's.
@T.prim_func(private=True, s_tir=True)
def before(x: T.Buffer((T.int64(1), T.int64(16), T.int64(64)), "float32"), w: T.Buffer((T.int64(32), T.int64(16), T.int64(3)), "float32"), b: T.Buffer((T.int64(1), T.int64(32), T.int64(1)), "float32"), y: T.Buffer((T.int64(1), T.int64(32), T.int64(64)), "float32")):
    T.func_attr({"tirx.noalias": True})
    pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(16), T.int64(68)))
    conv = T.sblock_alloc_buffer((T.int64(1), T.int64(32), T.int64(64)))
    for i0, i1, i2 in T.grid(T.int64(1), T.int64(16), T.int64(68)):
        with T.sblock("pad_temp"):
            v_i0, v_i1, v_i2 = T.axis.remap("SSS", [i0, i1, i2])
            pad_temp[v_i0, v_i1, v_i2] = T.if_then_else(T.int64(2) <= v_i2 and v_i2 < T.int64(66), x[v_i0, v_i1, v_i2 - T.int64(2)], T.float32(0.0))
    for nn, ff, yy, rc, ry in T.grid(T.int64(1), T.int64(32), T.int64(64), T.int64(16), T.int64(3)):
        with T.sblock("conv1d_ncw"):
            v_nn, v_ff, v_yy, v_rc, v_ry = T.axis.remap("SSSRR", [nn, ff, yy, rc, ry])
            with T.init():
                conv[v_nn, v_ff, v_yy] = T.float32(0.0)
            conv[v_nn, v_ff, v_yy] = conv[v_nn, v_ff, v_yy] + pad_temp[v_nn, v_rc, v_ry * T.int64(2) + v_yy] * w[v_ff, v_rc, v_ry]
    for a0, a1, a2 in T.grid(T.int64(1), T.int64(32), T.int64(64)):
        with T.sblock("T_add"):
            v0, v1, v2 = T.axis.remap("SSS", [a0, a1, a2])
            y[v0, v1, v2] = conv[v0, v1, v2] + b[v0, v1, T.int64(0)]


@T.prim_func(private=True, s_tir=True)
def expected(x: T.Buffer((T.int64(1), T.int64(16), T.int64(64)), "float32"), w: T.Buffer((T.int64(32), T.int64(16), T.int64(3)), "float32"), b: T.Buffer((T.int64(1), T.int64(32), T.int64(1)), "float32"), y: T.Buffer((T.int64(1), T.int64(32), T.int64(64)), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
    # with T.sblock("root"):
    pad_temp_local = T.sblock_alloc_buffer((T.int64(1), T.int64(16), T.int64(68)), scope="local")
    conv_local = T.sblock_alloc_buffer((T.int64(1), T.int64(32), T.int64(64)), scope="local")
    w_local = T.sblock_alloc_buffer((T.int64(32), T.int64(16), T.int64(3)), scope="local")
    for nn_ff_0_fused in T.thread_binding(T.int64(1), thread="blockIdx.y"):
        for yy_0 in T.thread_binding(T.int64(1), thread="blockIdx.x"):
            for ff_1 in T.thread_binding(T.int64(8), thread="threadIdx.y"):
                for yy_1 in T.thread_binding(T.int64(16), thread="threadIdx.x"):
                    for ff_2_init, yy_2_init in T.grid(T.int64(4), T.int64(4)):
                        with T.sblock("conv1d_ncw_init"):
                            v_nn = T.axis.spatial(T.int64(1), T.int64(0))
                            v_ff = T.axis.spatial(T.int64(32), ff_1 * T.int64(4) + ff_2_init)
                            v_yy = T.axis.spatial(T.int64(64), yy_0 * T.int64(64) + yy_1 * T.int64(4) + yy_2_init)
                            T.reads()
                            T.writes(conv_local[v_nn, v_ff, v_yy])
                            conv_local[v_nn, v_ff, v_yy] = T.float32(0.0)
                    for rc, ry in T.grid(T.int64(16), T.int64(3)):
                        for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(1), T.int64(4)):
                            with T.sblock("pad_temp"):
                                v_i0 = T.axis.spatial(T.int64(1), ax0)
                                v_i1 = T.axis.spatial(T.int64(16), rc + ax1)
                                v_i2 = T.axis.spatial(T.int64(68), yy_1 * T.int64(4) + ry * T.int64(2) + ax2)
                                T.reads(x[v_i0, v_i1, v_i2 - T.int64(2)])
                                T.writes(pad_temp_local[v_i0, v_i1, v_i2])
                                pad_temp_local[v_i0, v_i1, v_i2] = T.if_then_else(T.int64(2) <= v_i2 and v_i2 < T.int64(66), x[v_i0, v_i1, v_i2 - T.int64(2)], T.float32(0.0))
                        for ax0, ax1, ax2 in T.grid(T.int64(4), T.int64(1), T.int64(1)):
                            with T.sblock("w_local"):
                                v0 = T.axis.spatial(T.int64(32), ff_1 * T.int64(4) + ax0)
                                v1 = T.axis.spatial(T.int64(16), rc + ax1)
                                v2 = T.axis.spatial(T.int64(3), ry + ax2)
                                T.reads(w[v0, v1, v2])
                                T.writes(w_local[v0, v1, v2])
                                w_local[v0, v1, v2] = w[v0, v1, v2]
                        for ff_2 in T.unroll(T.int64(4)):
                            for yy_2 in T.unroll(T.int64(4)):
                                with T.sblock("conv1d_ncw_update"):
                                    v_nn = T.axis.spatial(T.int64(1), T.int64(0))
                                    v_ff = T.axis.spatial(T.int64(32), ff_1 * T.int64(4) + ff_2)
                                    v_yy = T.axis.spatial(T.int64(64), yy_0 * T.int64(64) + yy_1 * T.int64(4) + yy_2)
                                    v_rc, v_ry = T.axis.remap("RR", [rc, ry])
                                    T.reads(conv_local[v_nn, v_ff, v_yy], pad_temp_local[v_nn, v_rc, v_ry * T.int64(2) + v_yy], w_local[v_ff, v_rc, v_ry])
                                    T.writes(conv_local[v_nn, v_ff, v_yy])
                                    conv_local[v_nn, v_ff, v_yy] = conv_local[v_nn, v_ff, v_yy] + pad_temp_local[v_nn, v_rc, v_ry * T.int64(2) + v_yy] * w_local[v_ff, v_rc, v_ry]
                    for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(4), T.int64(4)):
                        with T.sblock("conv_local"):
                            v0 = T.axis.spatial(T.int64(1), ax0)
                            v1 = T.axis.spatial(T.int64(32), ff_1 * T.int64(4) + ax1)
                            v2 = T.axis.spatial(T.int64(64), yy_1 * T.int64(4) + ax2)
                            T.reads(conv_local[v0, v1, v2], b[v0, v1, T.int64(0)])
                            T.writes(y[v0, v1, v2])
                            y[v0, v1, v2] = conv_local[v0, v1, v2] + b[v0, v1, T.int64(0)]


@T.prim_func(private=True, s_tir=True)
def computed_weights(x: T.Buffer((T.int64(1), T.int64(16), T.int64(64)), "float32"), w: T.Buffer((T.int64(32), T.int64(16), T.int64(1)), "float32"), y: T.Buffer((T.int64(1), T.int64(32), T.int64(64)), "float32")):
    T.func_attr({"tirx.noalias": True})
    scaled = T.sblock_alloc_buffer((T.int64(32), T.int64(16), T.int64(1)))
    for i0, i1, i2 in T.grid(T.int64(32), T.int64(16), T.int64(1)):
        with T.sblock("scaled"):
            v0, v1, v2 = T.axis.remap("SSS", [i0, i1, i2])
            scaled[v0, v1, v2] = w[v0, v1, v2] * T.float32(2.0)
    for nn, ff, yy, rc, ry in T.grid(T.int64(1), T.int64(32), T.int64(64), T.int64(16), T.int64(1)):
        with T.sblock("conv1d_ncw"):
            v_nn, v_ff, v_yy, v_rc, v_ry = T.axis.remap("SSSRR", [nn, ff, yy, rc, ry])
            with T.init():
                y[v_nn, v_ff, v_yy] = T.float32(0.0)
            y[v_nn, v_ff, v_yy] = y[v_nn, v_ff, v_yy] + x[v_nn, v_rc, v_yy + v_ry] * scaled[v_ff, v_rc, v_ry]


@T.prim_func(private=True, s_tir=True)
def add_one(a: T.Buffer((T.int64(16),), "float32"), b: T.Buffer((T.int64(16),), "float32")):
    for i in range(T.int64(16)):
        with T.sblock("add"):
            vi = T.axis.spatial(T.int64(16), i)
            b[vi] = a[vi] + T.float32(1.0)


@T.prim_func(private=True, s_tir=True)
def symbolic_length_n(var_x: T.handle, w: T.Buffer((T.int64(11), T.int64(1), T.int64(20)), "float32"), var_y: T.handle, n: T.int64):
    # the source stage's STFT: 11 filters of 20 taps, stride 5; its length passed as Relax
    # passes a shape variable that no buffer carries alone
    T.func_attr({"tirx.noalias": True})
    x = T.match_buffer(var_x, (T.int64(1), T.int64(1), n * T.int64(600) + T.int64(20)))
    y = T.match_buffer(var_y, (T.int64(1), T.int64(11), n * T.int64(120) + T.int64(1)))
    pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(1), n * T.int64(600) + T.int64(20)))
    for i0, i1, i2 in T.grid(T.int64(1), T.int64(1), n * T.int64(600) + T.int64(20)):
        with T.sblock("pad_temp"):
            v_i0, v_i1, v_i2 = T.axis.remap("SSS", [i0, i1, i2])
            pad_temp[v_i0, v_i1, v_i2] = x[v_i0, v_i1, v_i2]
    for nn, ff, yy, rc, ry in T.grid(T.int64(1), T.int64(11), n * T.int64(120) + T.int64(1), T.int64(1), T.int64(20)):
        with T.sblock("conv1d_ncw"):
            v_nn, v_ff, v_yy, v_rc, v_ry = T.axis.remap("SSSRR", [nn, ff, yy, rc, ry])
            with T.init():
                y[v_nn, v_ff, v_yy] = T.float32(0.0)
            y[v_nn, v_ff, v_yy] = y[v_nn, v_ff, v_yy] + pad_temp[v_nn, v_rc, v_yy * T.int64(5) + v_ry] * w[v_ff, v_rc, v_ry]
# fmt: on


def _schedule(func, *rules, gpu=WEBGPU):
    with tvm.target.Target(dict(gpu.target)) as target:
        mod = dl.ApplyDefaultSchedule(*rules)(tvm.IRModule({"main": func}))
    return mod["main"], target


def test_convolution_is_register_tiled_with_its_padding_and_epilogue():
    after, _ = _schedule(before, Convolution())
    tvm.ir.assert_structural_equal(after, expected.with_attr("tirx.is_scheduled", True))


def test_convolution_of_computed_weights_gets_a_thread_per_output():
    with pytest.warns(UserWarning, match=CONVOLUTION_FALLBACK + ".*computed weights"):
        after, target = _schedule(computed_weights, Convolution())
    fallback, _ = _schedule(computed_weights, dl.gpu.Fallback())
    tvm.ir.assert_structural_equal(after, fallback)
    assert has_thread_binding(after)
    assert 'scope="local"' not in after.script()


def _local_shapes(func) -> list[str]:
    return [line.split("(", 1)[1].rsplit(", scope", 1)[0] for line in func.script().splitlines()
            if "alloc_buffer" in line and 'scope="local"' in line]  # fmt: skip


def test_symbolic_register_sizes_are_tiled_for_webgpu_and_cuda():
    # TVM's strict compaction clips the input's registers to min(600 n + 20, 16): WebGPU's
    # codegen allocates the bound; for CUDA, whose codegen takes only constant sizes, the
    # rule compacts its tiles itself, to the 16 inputs a thread reads
    webgpu, _ = _schedule(symbolic_length_n, Convolution())
    assert 'scope="local"' in webgpu.script()
    cuda, target = _schedule(symbolic_length_n, Convolution(), gpu=CUDA)
    fallback, _ = _schedule(symbolic_length_n, dl.gpu.Fallback(), gpu=CUDA)
    assert not tvm_ffi.structural_equal(cuda, fallback)
    assert _local_shapes(cuda) == [
        "(T.int64(1), T.int64(1), T.int64(4))",  # a thread's 4 sums (one channel: 11 filters)
        "(T.int64(1), T.int64(1), T.int64(16))",  # 4 positions of stride 5, per tap
        "(T.int64(1), T.int64(1), T.int64(1))",  # the tap's weight
    ]
    assert _registers_fit(tvm.IRModule({"main": cuda}), target)


def test_cuda_codegen_takes_the_compacted_tiles():
    """TVM's CUDA codegen (source only: no GPU or nvcc needed) compiles the tiled
    symbolic-length convolution, its registers as constant-size arrays."""
    cuda, target = _schedule(symbolic_length_n, Convolution(), gpu=CUDA)
    assert 'scope="local"' in cuda.script()
    library = tvm.tirx.build(tvm.IRModule({"main": cuda.with_attr("global_symbol", "main")}), target)
    (device,) = cuda_build._cuda_imports(library)
    source = device.inspect_source(cuda_build.SOURCE_FORMAT)
    assert "float pad_temp_local_ptr[16];" in source and "float y_local_ptr[4];" in source
    if shutil.which("nvcc"):  # and nvcc makes sm_90 machine code of it
        fatbin = cuda_build.compile(source, ["sm_90"], None)
        assert cuda_build.architectures_of(fatbin) == (["sm_90"], [])


def _conv1d(x, w, b, padding, dilation=1, stride=1):
    """PyTorch's conv1d in float64: x [1, C, L], w [F, C, K], b [1, F, 1] or None."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding)))
    taps = w.shape[2]
    length = (x.shape[2] - dilation * (taps - 1) - 1) // stride + 1
    y = sum(
        np.einsum("fc,ncl->nfl", w[:, :, k],
                  x[:, :, k * dilation : k * dilation + stride * (length - 1) + 1 : stride])
        for k in range(taps)
    )  # fmt: skip
    return y if b is None else y + b


def test_the_register_tiled_convolution_computes_the_convolution():
    # the scheduled kernel (4 thread-bound loops), its arithmetic run on the CPU
    after, _ = _schedule(before, Convolution())
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32)
               for s in ((1, 16, 64), (32, 16, 3), (1, 32, 1)))  # fmt: skip
    got = cpu_tir.run(cpu_tir.cpu_function(after, loops=4), x, w, b, out_shape=(1, 32, 64))
    np.testing.assert_allclose(got, _conv1d(x, w, b, padding=2, dilation=2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gpu", [WEBGPU, CUDA], ids=lambda g: g.name)
def test_the_symbolic_length_convolution_computes_the_stft_at_every_length(gpu):
    # tiles over a length known only at run time (CUDA's compacted by the rule itself):
    # the last tile's registers past the end must not reach the output
    scheduled, _ = _schedule(symbolic_length_n, Convolution(), gpu=gpu)
    kernel = cpu_tir.cpu_function(scheduled, loops=4)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((11, 1, 20)).astype(np.float32)
    for n in (1, 3):
        x = rng.standard_normal((1, 1, 600 * n + 20)).astype(np.float32)
        got = cpu_tir.run(kernel, x, w, out_shape=(1, 11, 120 * n + 1), scalars=(n,))
        want = _conv1d(x, w, None, padding=0, stride=5)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_convolution_leaves_other_functions():
    with tvm.target.Target(dict(WEBGPU.target)) as target:
        assert Convolution().apply(add_one, target, False) is None


@pytest.mark.parametrize(
    "channels, tiles",
    [
        (1024, (8, 4, 16, 4)),  # the decoder's
        (32, (8, 4, 16, 4)),
        (22, (8, 1, 16, 4)),  # the STFT's: a channel per thread
        (2, (2, 1, 64, 4)),
        (1, (1, 1, 128, 4)),  # F0's: the whole work group along positions
    ],
)
def test_tiles_follow_the_output_channels(channels, tiles):
    assert ConvolutionTiles().for_channels(channels) == tiles
