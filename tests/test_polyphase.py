"""polyphase_conv_transpose (kokoro_ext.build.passes.polyphase): the rewrite, what it leaves
alone, and the same numbers as TVM's own lowering of the transposed convolution."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from kokoro_ext.build.passes.polyphase import polyphase_conv_transpose

_OP = "relax.nn.conv1d_transpose"


def _module(c_in, c_out, taps, stride, padding, output_padding=0, groups=1):
    bb = relax.BlockBuilder()
    t = tvm.tirx.Var("t", "int64")
    x = relax.Var("x", relax.TensorType([1, c_in, t], "float32"))
    w = relax.Var("w", relax.TensorType([c_in, c_out // groups, taps], "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv1d_transpose(
                x, w, strides=stride, padding=padding, output_padding=output_padding,
                groups=groups))  # fmt: skip
        bb.emit_func_output(y)
    return bb.get()


def _ops(mod) -> list[str]:
    names = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: names.append(e.op.name) if isinstance(e, relax.Call)
        and isinstance(e.op, tvm.ir.Op) else None)  # fmt: skip
    return names


def _run(mod, *arrays):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


# Kokoro's two upsampling layers (halved in channels), and an odd kernel, output padding
@pytest.mark.parametrize(
    "c_in, c_out, taps, stride, padding, output_padding",
    [(32, 16, 20, 10, 5, 0), (16, 8, 12, 6, 3, 0), (8, 4, 8, 4, 2, 1), (8, 4, 7, 3, 2, 1)],
)
def test_same_numbers_as_tvms_lowering(c_in, c_out, taps, stride, padding, output_padding):
    mod = _module(c_in, c_out, taps, stride, [padding, padding], output_padding)
    rewritten = polyphase_conv_transpose(mod)
    ops = _ops(rewritten)
    assert _OP not in ops and "relax.nn.conv1d" in ops
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c_in, c_out, taps)).astype("float32")
    for length in (1, 9, 40):  # one compiled function, any length
        x = rng.standard_normal((1, c_in, length)).astype("float32")
        want = _run(mod, x, w)
        got = _run(rewritten, x, w)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_leaves_stride_one_and_groups_alone():
    for mod in (_module(8, 4, 5, 1, [2, 2]), _module(8, 8, 6, 2, [1, 1], groups=2)):
        assert _OP in _ops(polyphase_conv_transpose(mod))


def test_the_rewrite():
    """The weight's phases (lifted to the weight transform by LiftTransformParams), one
    stride-1 convolution with Kr - 1 padding, the gather that interleaves and crops."""
    mod = polyphase_conv_transpose(_module(4, 2, 5, 2, [1, 1]))
    assert _ops(mod) == [
        "relax.nn.pad", "relax.reshape", "relax.permute_dims", "relax.flip", "relax.reshape",
        "relax.nn.conv1d", "relax.call_tir",
    ]  # fmt: skip
    calls = []
    relax.analysis.post_order_visit(mod["main"], lambda e: calls.append(e) if isinstance(e, relax.Call) else None)
    conv = next(c for c in calls if isinstance(c.op, tvm.ir.Op) and c.op.name == "relax.nn.conv1d")
    assert [int(v) for v in conv.attrs.padding] == [2, 2] and [int(d) for d in conv.args[1].ty.shape] == [4, 4, 3]
    assert "interleave_phases" in [g.name_hint for g in mod.get_global_vars()]
    # the output keeps the transposed convolution's length, 2 (t - 1) - 2 + 5 + 0 = 2 t + 1
    t = mod["main"].params[0].ty.shape[2]
    assert tvm.sym.Analyzer().can_prove_equal(mod["main"].ret_ty.shape[2], t * 2 + 1)
