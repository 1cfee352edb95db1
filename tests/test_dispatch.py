"""DispatchNativeKernels (kokoro_ext.build.passes.dispatch): which Relax ops go to the native kernels,
with static and symbolic shapes, and a symbolic-length module compiled end to end."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
import tvm
from torch import nn
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from kokoro_ext.run import kernels, native
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.passes.dispatch import DispatchNativeKernels
from kokoro_ext.build.export import DecoderStage
from kokoro_ext.build.frontend import custom_convert_map
from kokoro_ext.build.model import build_model, small_config
from kokoro_ext.build.backend.cpu.pipeline import get_default_pipeline, library_dispatch_passes
from kokoro_ext.build.stages import STAGES, Geometry

LLVM = tvm.target.Target({"kind": "llvm"})
ZEROS_6 = np.zeros(6, "float32")


def _check(before: tvm.IRModule, expected: tvm.IRModule) -> None:
    tvm.ir.assert_structural_equal(DispatchNativeKernels()(before), expected)


def _unchanged(before: tvm.IRModule) -> None:
    tvm.ir.assert_structural_equal(DispatchNativeKernels()(before), before)


def test_conv1d_with_bias_static():
    @I.ir_module
    class Before:
        @R.function
        def main(
            x: R.Tensor((2, 4, 10), "float32"),
            w: R.Tensor((6, 4, 3), "float32"),
            b: R.Tensor((6,), "float32"),
        ):
            with R.dataflow():
                lv = R.nn.conv1d(x, w, padding=[1, 1], out_dtype="float32")
                lv1 = R.reshape(b, R.shape([1, 6, 1]))
                lv2 = R.add(lv, lv1)
                R.output(lv2)
            return lv2

    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((2, 4, 10), "float32"),
            w: R.Tensor((6, 4, 3), "float32"),
            b: R.Tensor((6,), "float32"),
        ):
            with R.dataflow():
                lv2 = R.call_dps_packed(
                    kernels.CONV1D,
                    (R.shape([1, 1, 1]), x, w, b),
                    out_ty=R.Tensor((2, 6, 10), "float32"),
                )
                R.output(lv2)
            return lv2

    _check(Before, Expected)


def test_conv1d_symbolic_length_with_and_without_bias():
    # stride 2, padding 3, dilation 2, 3 taps: t_out = (t + 2*3 - 2*(3-1) - 1) // 2 + 1.
    # The second convolution has no bias; the third's add is not its only use, so the
    # bias stays a separate add.
    @I.ir_module
    class Before:
        @R.function
        def main(
            x: R.Tensor((1, 4, "t"), "float32"),
            w: R.Tensor((6, 4, 3), "float32"),
            b: R.Tensor((6,), "float32"),
        ):
            t = T.int64()
            with R.dataflow():
                lv = R.nn.conv1d(x, w, [2], [3, 3], [2], out_dtype="float32")
                lv1 = R.reshape(b, R.shape([1, 6, 1]))
                lv2 = R.add(lv, lv1)
                lv3 = R.nn.conv1d(x, w, [2], [3, 3], [2], out_dtype="float32")
                lv4 = R.nn.conv1d(x, w, [2], [3, 3], [2], out_dtype="float32")
                lv5 = R.add(lv4, lv1)
                lv6 = R.multiply(lv4, lv5)
                R.output(lv2, lv3, lv6)
            return (lv2, lv3, lv6)

    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((1, 4, "t"), "float32"),
            w: R.Tensor((6, 4, 3), "float32"),
            b: R.Tensor((6,), "float32"),
        ):
            t = T.int64()
            with R.dataflow():
                lv1 = R.reshape(b, R.shape([1, 6, 1]))
                lv2 = R.call_dps_packed(
                    kernels.CONV1D,
                    (R.shape([2, 3, 2]), x, w, b),
                    out_ty=R.Tensor((1, 6, (t + 1) // 2 + 1), "float32"),
                )
                lv3 = R.call_dps_packed(
                    kernels.CONV1D,
                    (R.shape([2, 3, 2]), x, w, R.const(ZEROS_6)),
                    out_ty=R.Tensor((1, 6, (t + 1) // 2 + 1), "float32"),
                )
                lv4 = R.call_dps_packed(
                    kernels.CONV1D,
                    (R.shape([2, 3, 2]), x, w, R.const(ZEROS_6)),
                    out_ty=R.Tensor((1, 6, (t + 1) // 2 + 1), "float32"),
                )
                lv5 = R.add(lv4, lv1)
                lv6 = R.multiply(lv4, lv5)
                R.output(lv2, lv3, lv6)
            return (lv2, lv3, lv6)

    _check(Before, Expected)


def _conv1d_transpose_module(length, out_length):
    """x [1, 8, length] -> conv1d_transpose (stride 2, padding 1, output padding 1, 4 taps)
    plus bias, as the importer gives it."""

    @I.ir_module
    class Before:
        @R.function
        def main(
            x: R.Tensor((1, 8, length), "float32"),
            w: R.Tensor((8, 6, 4), "float32"),
            b: R.Tensor((6,), "float32"),
        ) -> R.Tensor((1, 6, out_length), "float32"):
            with R.dataflow():
                lv = R.nn.conv1d_transpose(
                    x, w, strides=[2], padding=[1, 1], output_padding=[1], out_dtype="float32"
                )
                lv1 = R.reshape(b, R.shape([1, 6, 1]))
                lv2 = R.add(lv, lv1)
                R.output(lv2)
            return lv2

    return Before


def test_conv1d_transpose_static():
    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((1, 8, 37), "float32"),
            w: R.Tensor((8, 6, 4), "float32"),
            b: R.Tensor((6,), "float32"),
        ) -> R.Tensor((1, 6, 75), "float32"):
            with R.dataflow():
                lv2 = R.call_dps_packed(
                    kernels.CONV1D_TRANSPOSE,
                    (R.shape([2, 1, 1]), x, w, b),
                    out_ty=R.Tensor((1, 6, 75), "float32"),
                )
                R.output(lv2)
            return lv2

    # t_out = (t - 1) * 2 - 2 * 1 + 4 + 1 = 2 t + 1
    _check(_conv1d_transpose_module(37, 75), Expected)


def test_conv1d_transpose_symbolic_length():
    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((1, 8, "t"), "float32"),
            w: R.Tensor((8, 6, 4), "float32"),
            b: R.Tensor((6,), "float32"),
        ) -> R.Tensor((1, 6, "t * 2 + 1"), "float32"):
            t = T.int64()
            with R.dataflow():
                lv2 = R.call_dps_packed(
                    kernels.CONV1D_TRANSPOSE,
                    (R.shape([2, 1, 1]), x, w, b),
                    out_ty=R.Tensor((1, 6, t * 2 + 1), "float32"),
                )
                R.output(lv2)
            return lv2

    _check(_conv1d_transpose_module("t", "t * 2 + 1"), Expected)


def test_bmm_symbolic():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor(("b", "m", 64), "float32"), w: R.Tensor(("b", 64, "m"), "float32")):
            b, m = T.int64(), T.int64()
            with R.dataflow():
                lv = R.matmul(x, w, out_dtype="float32")
                R.output(lv)
            return lv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor(("b", "m", 64), "float32"), w: R.Tensor(("b", 64, "m"), "float32")):
            b, m = T.int64(), T.int64()
            with R.dataflow():
                lv = R.call_dps_packed(
                    kernels.BMM, (x, w), out_ty=R.Tensor((b, m, m), "float32")
                )
                R.output(lv)
            return lv

    _check(Before, Expected)


def _addmm_module(rows):
    """aten.addmm imports as add(bias, matmul), aten.linear as add(matmul, bias)."""

    @I.ir_module
    class Before:
        @R.function
        def main(
            x: R.Tensor((rows, 16), "float32"),
            w: R.Tensor((16, 8), "float32"),
            b: R.Tensor((8,), "float32"),
        ) -> R.Tuple(R.Tensor((rows, 8), "float32"), R.Tensor((rows, 8), "float32")):
            with R.dataflow():
                lv = R.matmul(x, w, out_dtype="float32")
                lv1 = R.add(b, lv)
                lv2 = R.matmul(x, w, out_dtype="float32")
                lv3 = R.add(lv2, b)
                R.output(lv1, lv3)
            return (lv1, lv3)

    return Before


def test_addmm_static():
    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((5, 16), "float32"),
            w: R.Tensor((16, 8), "float32"),
            b: R.Tensor((8,), "float32"),
        ) -> R.Tuple(R.Tensor((5, 8), "float32"), R.Tensor((5, 8), "float32")):
            with R.dataflow():
                lv1 = R.call_dps_packed(
                    kernels.ADDMM, (b, x, w), out_ty=R.Tensor((5, 8), "float32")
                )
                lv3 = R.call_dps_packed(
                    kernels.ADDMM, (b, x, w), out_ty=R.Tensor((5, 8), "float32")
                )
                R.output(lv1, lv3)
            return (lv1, lv3)

    _check(_addmm_module(5), Expected)


def test_addmm_symbolic_rows():
    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor(("m", 16), "float32"),
            w: R.Tensor((16, 8), "float32"),
            b: R.Tensor((8,), "float32"),
        ) -> R.Tuple(R.Tensor(("m", 8), "float32"), R.Tensor(("m", 8), "float32")):
            m = T.int64()
            with R.dataflow():
                lv1 = R.call_dps_packed(
                    kernels.ADDMM, (b, x, w), out_ty=R.Tensor((m, 8), "float32")
                )
                lv3 = R.call_dps_packed(
                    kernels.ADDMM, (b, x, w), out_ty=R.Tensor((m, 8), "float32")
                )
                R.output(lv1, lv3)
            return (lv1, lv3)

    _check(_addmm_module("m"), Expected)


def test_addmm_bias_must_match_the_columns():
    # a [1] bias broadcast over 8 columns is not what the kernel takes
    @I.ir_module
    class Before:
        @R.function
        def main(
            x: R.Tensor((5, 16), "float32"),
            w: R.Tensor((16, 8), "float32"),
            b: R.Tensor((1,), "float32"),
        ):
            with R.dataflow():
                lv = R.matmul(x, w, out_dtype="float32")
                lv1 = R.add(lv, b)
                R.output(lv1)
            return lv1

    _unchanged(Before)


def test_grouped_convolutions_are_left_alone():
    @I.ir_module
    class Before:
        @R.function
        def main(
            x: R.Tensor((1, 4, "t"), "float32"),
            w: R.Tensor((6, 2, 3), "float32"),
            wt: R.Tensor((4, 3, 3), "float32"),
        ):
            with R.dataflow():
                lv = R.nn.conv1d(x, w, padding=[1, 1], groups=2, out_dtype="float32")
                lv1 = R.nn.conv1d_transpose(x, wt, strides=[2], groups=2, out_dtype="float32")
                R.output(lv, lv1)
            return (lv, lv1)

    _unchanged(Before)


def test_float16_and_other_shapes_are_left_alone():
    @I.ir_module
    class Before:
        @R.function
        def main(
            x16: R.Tensor((1, 4, 10), "float16"),
            w16: R.Tensor((6, 4, 3), "float16"),
            a: R.Tensor((2, 3, 5, 8), "float32"),
            c: R.Tensor((2, 3, 8, 5), "float32"),
            d: R.Tensor((1, 5, 8), "float32"),
            e: R.Tensor((4, 8, 5), "float32"),
            x: R.Tensor((1, 4, 10), "float32"),
            w: R.Tensor((6, 4, 3), "float32"),
            wt: R.Tensor((4, 6, 3), "float32"),
            p: R.Tensor((5, 8), "float32"),
            q: R.Tensor((8, 5), "float32"),
        ):
            with R.dataflow():
                # float16
                lv = R.nn.conv1d(x16, w16, out_dtype="float16")
                # 4-D matmul; a broadcast batch (the kernel takes equal ones)
                lv1 = R.matmul(a, c, out_dtype="float32")
                lv2 = R.matmul(d, e, out_dtype="float32")
                # asymmetric padding; a dilated transposed convolution
                lv3 = R.nn.conv1d(x, w, padding=[2, 0], out_dtype="float32")
                lv4 = R.nn.conv1d_transpose(x, wt, dilation=[2], out_dtype="float32")
                # a 2-D matmul without a bias add
                lv5 = R.matmul(p, q, out_dtype="float32")
                R.output(lv, lv1, lv2, lv3, lv4, lv5)
            return (lv, lv1, lv2, lv3, lv4, lv5)

    _unchanged(Before)


class Block(nn.Module):
    """A convolution, an upsampling transposed one, a Linear (addmm) and two bmm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 5, padding=4, dilation=2)
        self.up = nn.ConvTranspose1d(8, 6, 4, stride=2, padding=1)
        self.linear = nn.Linear(6, 6)

    def forward(self, x):
        y = self.up(torch.tanh(self.conv(x)))  # [1, 6, 2T]
        z = self.linear(y[0].transpose(0, 1))  # [2T, 6]
        scores = torch.bmm(z.unsqueeze(0), y)  # [1, 2T, 2T]
        return torch.bmm(torch.tanh(scores), z.unsqueeze(0)) * 0.05


def _ops(mod: tvm.IRModule) -> list[str]:
    """The Relax ops and packed functions the module's Relax functions call."""
    names = []

    def visit(expr):
        if isinstance(expr, relax.Call):
            if isinstance(expr.op, tvm.ir.Op):
                names.append(expr.op.name)
            if expr.op.same_as(tvm.ir.Op.get("relax.call_dps_packed")):
                names.append(expr.args[0].global_symbol)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return names


def test_symbolic_length_module_compiles_to_native_kernels():
    native.load()
    torch.manual_seed(0)
    block = Block().eval()
    frames = torch.export.Dim("frames", min=8, max=4096)
    x = torch.randn(1, 4, 37)
    with torch.no_grad():
        program = torch.export.export(block, (x,), dynamic_shapes=({2: frames},))
    mod = from_exported_program(program, custom_convert_map=custom_convert_map())
    assert "relax.nn.conv1d" in _ops(mod)  # what the importer gave

    with LLVM:
        dispatched = tvm.transform.Sequential(library_dispatch_passes(LLVM))(mod)
    ops = _ops(dispatched)
    assert not {"relax.nn.conv1d", "relax.nn.conv1d_transpose", "relax.matmul"} & set(ops), ops
    assert ops.count(kernels.CONV1D) + ops.count(kernels.CONV1D_TAPS) == 1, ops
    assert ops.count(kernels.CONV1D_TRANSPOSE) == 1, ops
    assert ops.count(kernels.ADDMM) == 1, ops
    assert ops.count(kernels.BMM) == 2, ops

    run = StageRunner(tvm.compile(mod, target=LLVM, relax_pipeline=get_default_pipeline(LLVM)))
    for length in (37, 61):
        x = torch.randn(1, 4, length)
        with torch.no_grad():
            want = block(x).numpy()
        (got,) = run(x)
        assert got.shape == want.shape == (1, 2 * length, 6)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_native_dense_off_keeps_tvm_lowering():
    block = Block().eval()
    program = torch.export.export(block, (torch.randn(1, 4, 37),))
    mod = from_exported_program(program, custom_convert_map=custom_convert_map())
    with LLVM:
        kept = tvm.transform.Sequential(library_dispatch_passes(LLVM, native_dense=False))(mod)
    ops = _ops(kept)
    assert "relax.nn.conv1d" in ops and "relax.nn.conv1d_transpose" in ops, ops
    assert not any(op.startswith(kernels.PREFIX) for op in ops), ops


def test_decoder_with_symbolic_frames_goes_to_native_kernels():
    # Issue 16: with the importer's converters choosing on static shapes, a symbolic frames
    # axis left every convolution of the decoder to TVM's unscheduled lowering.
    model = build_model(small_config(), seed=0)
    frames = torch.export.Dim("frames", min=4, max=1024)
    spectrum_frames = Geometry.from_model(model).spectrum_per_frame * frames + 1
    dynamic = ({2: frames}, {1: 2 * frames}, {1: 2 * frames}, None, None, {2: spectrum_frames})
    with torch.no_grad():
        program = torch.export.export(
            DecoderStage(model).eval(),
            STAGES["decoder"].example(model, 16),
            dynamic_shapes=dynamic,
        )
    mod = from_exported_program(program, custom_convert_map=custom_convert_map())
    (audio,) = mod["main"].ty.ret.fields
    assert not isinstance(audio.shape.values[1], tvm.tirx.IntImm)  # samples: 600 * frames
    imported = Counter(_ops(mod))
    assert imported["relax.nn.conv1d"] > 0 and imported["relax.nn.conv1d_transpose"] > 0

    with LLVM:
        dispatched = tvm.transform.Sequential(library_dispatch_passes(LLVM))(mod)
    ops = Counter(_ops(dispatched))
    assert ops["relax.nn.conv1d"] == 0 and ops["relax.matmul"] == 0, ops
    # every convolution is native; the long stride-1 ones take Winograd where it pays at
    # every length, or choose per call where it pays at some (kokoro_ext.build.passes.winograd)
    winograd = ops[kernels.CONV1D_WINOGRAD] + ops[kernels.CONV1D_WINOGRAD_IF_PAYS]
    assert winograd > 0, ops
    direct = ops[kernels.CONV1D] + ops[kernels.CONV1D_TAPS]
    assert direct + winograd == imported["relax.nn.conv1d"], ops
    assert ops[kernels.ADDMM] + ops[kernels.BMM] == imported["relax.matmul"], ops
    # only the grouped (depthwise) transposed convolution keeps TVM's lowering
    grouped = []
    relax.analysis.post_order_visit(
        dispatched["main"],
        lambda e: isinstance(e, relax.Call)
        and e.op.same_as(tvm.ir.Op.get("relax.nn.conv1d_transpose"))
        and grouped.append(e.attrs.groups),
    )
    assert grouped and all(groups > 1 for groups in grouped), grouped
    transposed = ops[kernels.CONV1D_TRANSPOSE] + len(grouped)
    assert transposed == imported["relax.nn.conv1d_transpose"], ops
