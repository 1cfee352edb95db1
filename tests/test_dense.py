"""The native GEMM kernels (conv1d, Winograd conv1d, conv1d_transpose, addmm, bmm) against
PyTorch, through import.

Each case is exported, imported and compiled with the project's pipeline; the IR after its
library dispatch must call the native kernel (so a silent fallback fails the test) unless
the case is one the kernels do not take (grouped convolution), which must keep TVM's own
lowering and stay correct.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from torch import nn
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.run import kernels, native
from kokoro_ext.build.compiler import compile_module
from kokoro_ext.build.passes.winograd import pack_taps
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.frontend import custom_convert_map
from kokoro_ext.build.backend.cpu.pipeline import library_dispatch_passes

LLVM = tvm.target.Target({"kind": "llvm"})


def compiled_matches_torch(module: nn.Module, *args: torch.Tensor) -> str:
    """Compile ``module``, check it, return its Relax IR after library dispatch (the native
    kernels, then Winograd)."""
    module = module.eval()
    with torch.no_grad():
        want = module(*args)
        program = torch.export.export(module, args)
    mod = from_exported_program(program, custom_convert_map=custom_convert_map())
    with LLVM:
        ir = tvm.transform.Sequential(library_dispatch_passes(LLVM))(mod).script()
    (got,) = StageRunner(compile_module(module, args).executable)(*args)
    assert got.shape == tuple(want.shape)
    assert np.abs(got - want.numpy()).max() <= 1e-4 * max(1.0, float(want.abs().max()))
    return ir


@pytest.fixture(autouse=True, scope="module")
def _native_loaded():
    native.load()


@pytest.mark.parametrize(
    "cin,cout,k,stride,padding,dilation,bias",
    [(8, 16, 3, 1, 1, 1, True), (8, 4, 7, 1, 9, 3, True), (22, 16, 12, 6, 3, 1, True),
     (16, 8, 1, 1, 0, 1, False), (5, 3, 11, 1, 25, 5, True), (3, 600, 5, 2, 0, 1, True)],
)
def test_conv1d(cin, cout, k, stride, padding, dilation, bias):
    conv = nn.Conv1d(cin, cout, k, stride, padding, dilation, bias=bias)
    x = torch.randn(2, cin, 300)  # 300 columns: more than one 256-column tile
    # stride 1 with a weight filter: on the filter reordered once as taps [K, C_out, C_in]
    kernel = f'"{kernels.CONV1D_TAPS}"' if stride == 1 else f'"{kernels.CONV1D}"'
    assert kernel in compiled_matches_torch(conv, x)


@pytest.mark.parametrize(
    "cin,cout,k,padding,dilation,frames",
    # kokoro's generator convolutions (3, 7, 11 taps; dilations 1, 3, 5), 5 taps (a short
    # last chunk), uneven tile counts per phase, and more than one 256-tile column block.
    [(64, 64, 3, 1, 1, 300), (72, 64, 7, 9, 3, 803), (64, 80, 11, 25, 5, 1301),
     (64, 64, 5, 2, 1, 2100), (96, 64, 11, 5, 1, 1029)],
)
def test_conv1d_winograd(cin, cout, k, padding, dilation, frames):
    conv = nn.Conv1d(cin, cout, k, padding=padding, dilation=dilation)
    ir = compiled_matches_torch(conv, torch.randn(2, cin, frames))
    assert f'"{kernels.CONV1D_WINOGRAD}"' in ir


@pytest.mark.parametrize(
    # bound: about 1.5x the error measured here, against float64 (F(4, 3): 7.8x the direct
    # convolution's; F(4, 7): 13x; F(6, 6) in two chunks: 26x)
    "k,dilation,bound", [(3, 5, 10), (7, 3, 20), (11, 5, 40)],
)
def test_winograd_error_is_near_direct_convolution(k, dilation, bound):
    # Winograd reassociates the products: its float32 error must stay within a known
    # multiple of the direct convolution's (a badly chosen point set is over 100x).
    torch.manual_seed(0)
    conv = nn.Conv1d(128, 128, k, padding=dilation * (k - 1) // 2, dilation=dilation).eval()
    x = torch.randn(1, 128, 2000)
    with torch.no_grad():
        exact = conv.double()(x.double()).numpy()
        direct = conv.float()(x).numpy()
    (got,) = StageRunner(compile_module(conv, (x,)).executable)(x)
    direct_error = np.abs(direct - exact).max()
    error = np.abs(got - exact).max()
    assert error <= bound * direct_error, (error, direct_error)


@pytest.mark.parametrize(
    "cin,cout,k,stride,padding,output_padding",
    [(32, 16, 20, 10, 5, 0), (16, 40, 12, 6, 3, 0), (4, 4, 3, 2, 1, 1), (6, 5, 20, 5, 0, 0)],
)
def test_conv1d_transpose(cin, cout, k, stride, padding, output_padding):
    conv = nn.ConvTranspose1d(cin, cout, k, stride, padding, output_padding)
    x = torch.randn(2, cin, 37)
    assert f'"{kernels.CONV1D_TRANSPOSE}"' in compiled_matches_torch(conv, x)


@pytest.mark.parametrize(
    # up to 64 rows on products.h (N % 16 columns one at a time), more on OpenBLAS
    "rows,features_in,features_out",
    [(1, 8, 5), (37, 64, 300), (5, 3, 1), (64, 256, 300), (65, 70, 33), (130, 32, 48)],
)
def test_linear_goes_to_addmm(rows, features_in, features_out):
    linear = nn.Linear(features_in, features_out)
    assert f'"{kernels.ADDMM}"' in compiled_matches_torch(linear, torch.randn(rows, features_in))


def test_attention_products_go_to_bmm():
    class Attention(nn.Module):
        def forward(self, q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v

    q, k, v = (torch.randn(1, 12, 37, 64) for _ in range(3))
    ir = compiled_matches_torch(Attention(), q, k, v)
    assert ir.count(f'"{kernels.BMM}"') == 2


@pytest.mark.parametrize(
    # few rows with fewer entries than threads: products.h over the columns (N % 16 one at a
    # time); otherwise OpenBLAS per entry
    "batch,rows,inner,cols",
    [(1, 7, 768, 768), (1, 5, 64, 50), (1, 64, 32, 300), (1, 65, 32, 48), (12, 7, 64, 7)],
)
def test_einsum_with_a_weight_goes_to_bmm(batch, rows, inner, cols):
    class Project(nn.Module):  # ALBERT's attention output projection: an einsum with a weight
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(batch, inner, cols) / inner**0.5)

        def forward(self, x):
            return torch.bmm(x, self.w)

    ir = compiled_matches_torch(Project(), torch.randn(batch, rows, inner))
    assert f'"{kernels.BMM}"' in ir


def test_grouped_convolution_keeps_tvm_lowering():
    depthwise = nn.ConvTranspose1d(6, 6, 3, stride=2, padding=1, output_padding=1, groups=6)
    ir = compiled_matches_torch(depthwise, torch.randn(1, 6, 10))
    assert kernels.CONV1D not in ir
    grouped = nn.Conv1d(6, 6, 3, padding=1, groups=3)
    assert kernels.CONV1D not in compiled_matches_torch(grouped, torch.randn(1, 6, 10))


def test_taps_kernel_equals_the_filter_kernel_and_names_a_wrong_filter():
    conv1d = tvm_ffi.get_global_func(kernels.CONV1D)
    taps_conv = tvm_ffi.get_global_func(kernels.CONV1D_TAPS)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 30), dtype=np.float32)
    w = rng.standard_normal((5, 4, 3), dtype=np.float32)
    bias = rng.standard_normal(5, dtype=np.float32)
    want, got = np.zeros((2, 5, 26), np.float32), np.zeros((2, 5, 26), np.float32)
    conv1d(tvm_ffi.Shape([1, 0, 2]), *[tvm_ffi.from_dlpack(a) for a in (x, w, bias, want)])
    taps = pack_taps(w)  # [1, 3, 4, 8]: 5 output channels padded to one block of 8
    taps_conv(tvm_ffi.Shape([0, 2]), *[tvm_ffi.from_dlpack(a) for a in (x, taps, bias, got)])
    np.testing.assert_array_equal(got, want)  # the same products in the same order
    with pytest.raises(ValueError, match=r"conv1d_taps: taps must have shape \[1, 3, 4, 8\]"):
        wrong = np.zeros((1, 3, 3, 8), np.float32)  # C_in 3, x has 4
        taps_conv(tvm_ffi.Shape([0, 2]), *[tvm_ffi.from_dlpack(a) for a in (x, wrong, bias, got)])


def test_kernel_names_a_wrong_argument():
    conv1d = tvm_ffi.get_global_func(kernels.CONV1D)
    x = np.zeros((1, 4, 10), np.float32)
    w = np.zeros((2, 3, 3), np.float32)  # C_in 3, x has 4
    out = np.zeros((1, 2, 8), np.float32)
    with pytest.raises(ValueError, match=r"kokoro_ext.conv1d: w must have shape \[2, 4, 3\]"):
        conv1d(tvm_ffi.Shape([1, 0, 1]), *[tvm_ffi.from_dlpack(a) for a in
                                           (x, w, np.zeros(2, np.float32), out)])


def test_winograd_kernel_names_a_wrong_filter():
    conv = tvm_ffi.get_global_func(kernels.CONV1D_WINOGRAD)
    x = np.zeros((1, 64, 300), np.float32)
    gw = np.zeros((6, 8, 32, 8), np.float32)  # [n, C_out / 8, chunks C_in, 8] for C_in 32; x has 64
    out = np.zeros((1, 64, 300), np.float32)
    with pytest.raises(ValueError, match=r"conv1d_winograd: gw must have shape \[6, 8, 64, 8\]"):
        conv(tvm_ffi.Shape([1, 1, 3]), *[tvm_ffi.from_dlpack(a) for a in
                                         (x, gw, np.zeros(64, np.float32), out)])
