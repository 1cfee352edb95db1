"""kokoro_ext.build.passes.quantize and the choice it acts on (kokoro_ext.build.precision),
by kernel: a native kernel call on chosen weight parameters becomes its int8 form, the
int8 values and scales computed from the parameter by the kernel's quantizer.

Rewrites are checked as TVM checks its passes: a module before, the module expected, and
tvm.ir.assert_structural_equal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from kokoro_ext.build.export import PackedLSTM
from kokoro_ext.build.passes import quantize_weights
from kokoro_ext.build.backend.cpu.pipeline import PipelineOptions, get_default_pipeline
from kokoro_ext.build.precision import (
    LSTM_WEIGHTS,
    PRECISION_FEATURES,
    LayerProducts,
    int8_weights,
    lossy_rows,
)
from kokoro_ext.run import cpu, native


@pytest.fixture(scope="module", autouse=True)
def native_library():
    native.load()


# -- lstm -> lstm_q8 ------------------------------------------------------------------------


@I.ir_module
class LstmBefore:
    @R.function
    def main(
        x: R.Tensor((1, 9, 20), dtype="float32"),
        lengths: R.Tensor((1,), dtype="int64"),
        p_w_ih_first: R.Tensor((2, 64, 20), dtype="float32"),
        p_w_ih_rest: R.Tensor((0, 2, 64, 32), dtype="float32"),
        p_w_hh: R.Tensor((1, 2, 64, 16), dtype="float32"),
        p_bias: R.Tensor((1, 2, 64), dtype="float32"),
    ) -> R.Tensor((1, 9, 32), dtype="float32"):
        R.func_attr({"num_input": 2})
        with R.dataflow():
            lv = R.full(R.shape([2, 1, 16]), R.const(0.0, "float32"), dtype="float32")
            lv1 = R.call_dps_packed(
                "kokoro_ext.lstm",
                (R.shape([0]), x, lengths, lv, lv, p_w_ih_first, p_w_ih_rest, p_w_hh, p_bias),
                out_ty=[
                    R.Tensor((1, 9, 32), dtype="float32"),
                    R.Tensor((2, 1, 16), dtype="float32"),
                    R.Tensor((2, 1, 16), dtype="float32"),
                ],
            )
            gv: R.Tensor((1, 9, 32), dtype="float32") = lv1[0]
            R.output(gv)
        return gv


@I.ir_module
class LstmExpected:
    @R.function
    def main(
        x: R.Tensor((1, 9, 20), dtype="float32"),
        lengths: R.Tensor((1,), dtype="int64"),
        p_w_ih_first: R.Tensor((2, 64, 20), dtype="float32"),
        p_w_ih_rest: R.Tensor((0, 2, 64, 32), dtype="float32"),
        p_w_hh: R.Tensor((1, 2, 64, 16), dtype="float32"),
        p_bias: R.Tensor((1, 2, 64), dtype="float32"),
    ) -> R.Tensor((1, 9, 32), dtype="float32"):
        R.func_attr({"num_input": 2})
        with R.dataflow():
            lv = R.full(R.shape([2, 1, 16]), R.const(0.0, "float32"), dtype="float32")
            first = R.call_dps_packed(
                "kokoro_ext.lstm_weights_q8",
                (p_w_ih_first,),
                out_ty=[R.Tensor((2, 64, 20), dtype="int8"), R.Tensor((2, 64), dtype="float32")],
            )
            rest = R.call_dps_packed(
                "kokoro_ext.lstm_weights_q8",
                (p_w_ih_rest,),
                out_ty=[
                    R.Tensor((0, 2, 64, 32), dtype="int8"),
                    R.Tensor((0, 2, 64), dtype="float32"),
                ],
            )
            hh = R.call_dps_packed(
                "kokoro_ext.lstm_recurrent_q8",
                (p_w_hh,),
                out_ty=[
                    R.Tensor((1, 2, 1, 16, 128), dtype="int8"),
                    R.Tensor((1, 2, 64), dtype="float32"),
                ],
            )
            lv1 = R.call_dps_packed(
                "kokoro_ext.lstm_q8",
                (
                    R.shape([0]), x, lengths, lv, lv,
                    first[0], first[1], rest[0], rest[1], hh[0], hh[1],
                    p_bias,
                ),
                out_ty=[
                    R.Tensor((1, 9, 32), dtype="float32"),
                    R.Tensor((2, 1, 16), dtype="float32"),
                    R.Tensor((2, 1, 16), dtype="float32"),
                ],
            )
            gv: R.Tensor((1, 9, 32), dtype="float32") = lv1[0]
            R.output(gv)
        return gv


LSTM_PARAMS = ("p_w_ih_first", "p_w_ih_rest", "p_w_hh")


def test_lstm_on_chosen_weights_becomes_lstm_q8():
    after = quantize_weights(LSTM_PARAMS)(LstmBefore)
    tvm.ir.assert_structural_equal(after, LstmExpected)


@pytest.mark.parametrize("missing", LSTM_PARAMS)
def test_lstm_keeps_float32_weights_unless_all_three_are_chosen(missing):
    """lstm_q8 takes its three weights in int8: one left float32 keeps the call as it is."""
    names = [n for n in LSTM_PARAMS if n != missing] + ["p_bias"]
    after = quantize_weights(names)(LstmBefore)
    tvm.ir.assert_structural_equal(after, LstmBefore)


def _run_pipeline(mod, weights, names, inputs):
    """``mod`` through the build's pipeline (``names`` stored as int8): main's outputs on
    ``inputs``, with the weights its lifted transform makes of ``weights``."""
    target = tvm.target.Target("llvm")
    options = PipelineOptions(int8_weights=frozenset(names))
    pipeline = get_default_pipeline(target, options)
    executable = tvm.compile(mod, target=target, relax_pipeline=pipeline)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    stored = vm["main_transform_params"]([tvm.runtime.tensor(w) for w in weights])
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs], *stored)
    return [o.numpy() for o in out], [np.from_dlpack(w) for w in stored]


def test_lstm_weights_on_a_grid_are_stored_int8_and_give_the_float32_outputs():
    """A PackedLSTM whose weights lie on an int8 grid (a scale per direction, as the int8
    checkpoint's do), compiled as a build compiles a stage: precision chooses its weights,
    the transform stores them as int8, and the outputs are the float32 build's, bit for bit."""
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_ext.build.frontend import custom_convert_map

    rng = np.random.default_rng(0)
    module = PackedLSTM(20, 16, num_layers=2, bidirectional=True).eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name in LSTM_WEIGHTS:
                steps = torch.tensor([0.011, 0.017]).view(2, 1, 1)  # per direction
                p.copy_(torch.randint(-64, 65, p.shape) * steps)
            else:
                p.copy_(torch.randn(p.shape) * 0.1)
    x = rng.standard_normal((2, 9, 20), dtype=np.float32)
    lengths = np.array([9, 4], np.int64)
    program = torch.export.export(module, (torch.from_numpy(x), torch.from_numpy(lengths)))
    mod = from_exported_program(program, custom_convert_map=custom_convert_map("native"),
                                keep_params_as_input=True)
    names = [name for name, _ in program.named_parameters()]
    relax_names = [v.name for v in mod["main"].params[-len(names):]]
    mod, params = detach_params(mod)
    weights = [w.numpy() for w in params["main"]]
    chosen = int8_weights(zip(names, weights), "auto")
    assert chosen == LSTM_WEIGHTS
    int8 = [r for n, r in zip(names, relax_names) if n in chosen]
    got, stored = _run_pipeline(mod, weights, int8, (x, lengths))
    want, stored_f32 = _run_pipeline(mod, weights, [], (x, lengths))
    assert sorted(str(w.dtype) for w in stored).count("int8") == 3
    assert all(w.dtype == np.float32 for w in stored_f32)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_precision_knows_lstm_weights_by_packed_lstm_parameter_names():
    names = {name for name, _ in PackedLSTM(4, 8, num_layers=2).named_parameters()}
    assert names == LSTM_WEIGHTS | {"bias"}


def test_lossy_rows_of_lstm_weights_are_per_gate_row():
    """A scale per gate row of each direction: lossless as an LSTM's weight, though as a
    conv1d filter (a row per first axis) the rows are not on one grid."""
    rng = np.random.default_rng(1)
    # multiples of the row's step, as a trained weight's: most near zero, a few to 127
    w = np.clip(np.round(rng.standard_normal((2, 64, 96)) * 30), -127, 127).astype(np.float32)
    w *= rng.random((2, 64, 1), dtype=np.float32) + 0.5
    assert lossy_rows(w, lstm=True) == 0
    assert lossy_rows(w) == 2
    assert lossy_rows(np.zeros((0, 2, 64, 32), np.float32), lstm=True) == 0
    assert lossy_rows(rng.standard_normal((1, 2, 64, 16), dtype=np.float32), lstm=True) == 128
    named = [("lstm.w_ih_first", w), ("lstm.w_ih_rest", np.zeros((0, 2, 64, 32), np.float32)),
             ("lstm.w_hh", rng.standard_normal((1, 2, 64, 16), dtype=np.float32))]
    assert int8_weights(named, "auto") == {"lstm.w_ih_first", "lstm.w_ih_rest"}
    assert int8_weights(named, "int8") == {"lstm.w_ih_first", "lstm.w_ih_rest", "lstm.w_hh"}


# -- convolutions: the kernel of the build's products ------------------------------------------


def _conv_module(body: str) -> tvm.IRModule:
    """A module whose main runs ``body`` (TVMScript lines) on x and a 16x16x3 filter."""
    return tvm.script.from_source(f"""
@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor((1, 16, 40), dtype="float32"),
        p_w: R.Tensor((16, 16, 3), dtype="float32"),
        p_b: R.Tensor((16,), dtype="float32"),
    ) -> R.Tensor((1, 16, 40), dtype="float32"):
        R.func_attr({{"num_input": 1}})
        with R.dataflow():
{body}
            R.output(y)
        return y
""")


DIRECT = """\
            taps = R.call_dps_packed("kokoro_ext.taps_filter", (p_w,), out_ty=R.Tensor((2, 3, 16, 8), dtype="float32"))
            y = R.call_dps_packed("kokoro_ext.conv1d_taps", (R.shape([1, 1]), x, taps, p_b), out_ty=R.Tensor((1, 16, 40), dtype="float32"))"""
LONG = """\
            taps = R.call_dps_packed("kokoro_ext.taps_filter", (p_w,), out_ty=R.Tensor((2, 3, 16, 8), dtype="float32"))
            gw = R.call_dps_packed("kokoro_ext.winograd_filter", (p_w,), out_ty=R.Tensor((6, 2, 16, 8), dtype="float32"))
            y = R.call_dps_packed("kokoro_ext.conv1d_winograd_if_pays", (R.shape([1, 1, 3]), x, taps, gw, p_b), out_ty=R.Tensor((1, 16, 40), dtype="float32"))"""
QUANTIZED = """\
            q = R.call_dps_packed("kokoro_ext.taps_filter_q8", (p_w,), out_ty=[R.Tensor((2, 3, 16, 8), dtype="int8"), R.Tensor((16,), dtype="float32")])
            y = R.call_dps_packed("{kernel}", (R.shape([1, 1]), x, q[0], q[1], p_b), out_ty=R.Tensor((1, 16, 40), dtype="float32"))"""
# the int8 products take the filter in quads of input channels, with each output channel's sum
QUANTIZED_INT8 = """\
            q = R.call_dps_packed("kokoro_ext.taps_filter_q8_quads", (p_w,), out_ty=[R.Tensor((2, 3, 4, 8, 4), dtype="int8"), R.Tensor((16,), dtype="int32"), R.Tensor((16,), dtype="float32")])
            y = R.call_dps_packed("kokoro_ext.conv1d_taps_q8_int8", (R.shape([1, 1]), x, q[0], q[1], q[2], p_b), out_ty=R.Tensor((1, 16, 40), dtype="float32"))"""


@pytest.mark.parametrize("before, products, kernel", [
    (DIRECT, LayerProducts(), "kokoro_ext.conv1d_taps_q8"),
    (DIRECT, LayerProducts(direct="bf16"), "kokoro_ext.conv1d_taps_q8_bf16"),
    (DIRECT, LayerProducts(long="int8"), "kokoro_ext.conv1d_taps_q8"),
    (DIRECT, LayerProducts(long="int8", direct="int8"), "kokoro_ext.conv1d_taps_q8_int8"),
    (LONG, LayerProducts(), "kokoro_ext.conv1d_winograd_q8_if_pays"),
    (LONG, LayerProducts(direct="bf16"), "kokoro_ext.conv1d_winograd_q8_if_pays"),
    (LONG, LayerProducts(long="int8", direct="bf16"), "kokoro_ext.conv1d_taps_q8_int8"),
])
def test_a_convolution_on_an_int8_filter_takes_the_kernel_of_its_products(before, products, kernel):
    after = quantize_weights(frozenset({"p_w"}), products)(_conv_module(before))
    quantized = QUANTIZED_INT8 if kernel == "kokoro_ext.conv1d_taps_q8_int8" else QUANTIZED
    tvm.ir.assert_structural_equal(after, _conv_module(quantized.format(kernel=kernel)))


# -- linear layers: int8 products over sequences, float32 on style vectors -----------------


def _linear_module(body: str) -> tvm.IRModule:
    """A module whose main runs ``body`` (TVMScript lines) on x [b * n, 16] (a batch of
    sequences' rows) and s [b, 16] (a row per batch entry) with a 16 x 12 weight."""
    return tvm.script.from_source(f"""
@I.ir_module
class Module:
    @R.function
    def main(
        x3: R.Tensor(("b", "n", 16), dtype="float32"),
        s: R.Tensor(("b", 16), dtype="float32"),
        p_w: R.Tensor((16, 12), dtype="float32"),
        p_b: R.Tensor((12,), dtype="float32"),
    ) -> R.Tuple(R.Tensor(("b * n", 12), dtype="float32"), R.Tensor(("b", 12), dtype="float32")):
        b = T.int64()
        n = T.int64()
        R.func_attr({{"num_input": 2}})
        with R.dataflow():
            x = R.reshape(x3, R.shape([b * n, 16]))
{body}
            out = (y, z)
            R.output(out)
        return out
""")


LINEAR = """\
            y = R.call_dps_packed("kokoro_ext.addmm", (p_b, x, p_w), out_ty=R.Tensor((b * n, 12), dtype="float32"))
            z = R.call_dps_packed("kokoro_ext.addmm", (p_b, s, p_w), out_ty=R.Tensor((b, 12), dtype="float32"))"""
STYLE_FLOAT32 = """\
            q = R.call_dps_packed("kokoro_ext.columns_q8", (p_w,), out_ty=[R.Tensor((16, 12), dtype="int8"), R.Tensor((12,), dtype="float32")])
            z = R.call_dps_packed("kokoro_ext.addmm_q8", (p_b, s, q[0], q[1]), out_ty=R.Tensor((b, 12), dtype="float32"))"""
SEQUENCE_FLOAT32 = """\
            p = R.call_dps_packed("kokoro_ext.columns_q8", (p_w,), out_ty=[R.Tensor((16, 12), dtype="int8"), R.Tensor((12,), dtype="float32")])
            y = R.call_dps_packed("kokoro_ext.addmm_q8", (p_b, x, p[0], p[1]), out_ty=R.Tensor((b * n, 12), dtype="float32"))
""" + STYLE_FLOAT32
SEQUENCE_INT8 = """\
            p = R.call_dps_packed("kokoro_ext.columns_q8_quads", (p_w,), out_ty=[R.Tensor((2, 4, 8, 4), dtype="int8"), R.Tensor((12,), dtype="int32"), R.Tensor((12,), dtype="float32")])
            y = R.call_dps_packed("kokoro_ext.addmm_q8_int8", (p_b, x, p[0], p[1], p[2]), out_ty=R.Tensor((b * n, 12), dtype="float32"))
""" + STYLE_FLOAT32


@pytest.mark.parametrize("products, expected", [
    (LayerProducts(), SEQUENCE_FLOAT32),
    (LayerProducts(long="int8", direct="bf16"), SEQUENCE_FLOAT32),
    (LayerProducts(linear="int8"), SEQUENCE_INT8),
])
def test_a_linear_layer_over_a_sequence_takes_the_int8_products_of_its_build(products, expected):
    after = quantize_weights(frozenset({"p_w"}), products)(_linear_module(LINEAR))
    tvm.ir.assert_structural_equal(after, _linear_module(expected))


# -- transposed convolutions: polyphase, int8 products -----------------------------------------


def _transposed_module(body: str, w_shape=(8, 4, 4), options=(2, 1, 0)) -> tvm.IRModule:
    """A module whose main runs ``body`` on x [1, 8, n]: a convolution (filter p_c, bias
    p_cb) to x2, then a transposed convolution of x2 with filter p_w [C_in, C_out, K] and
    bias p_b to y [1, 4, 2 n]."""
    return tvm.script.from_source(f"""
@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor((1, 8, "n"), dtype="float32"),
        p_w: R.Tensor({tuple(w_shape)}, dtype="float32"),
        p_b: R.Tensor((4,), dtype="float32"),
        p_c: R.Tensor((8, 8, 3), dtype="float32"),
        p_cb: R.Tensor((8,), dtype="float32"),
    ) -> R.Tensor((1, 4, "n * 2"), dtype="float32"):
        n = T.int64()
        R.func_attr({{"num_input": 1}})
        with R.dataflow():
{body.format(options=list(options))}
            R.output(y)
        return y
""", extra_vars={"I": I, "R": R, "T": T, "np": np})


CONV = """\
            taps = R.call_dps_packed("kokoro_ext.taps_filter", (p_c,), out_ty=R.Tensor((1, 3, 8, 8), dtype="float32"))
            x2 = R.call_dps_packed("kokoro_ext.conv1d_taps", (R.shape([1, 1]), x, taps, p_cb), out_ty=R.Tensor((1, 8, n), dtype="float32"))
"""
CONV_Q8 = """\
            c = R.call_dps_packed("kokoro_ext.taps_filter_q8", (p_c,), out_ty=[R.Tensor((1, 3, 8, 8), dtype="int8"), R.Tensor((8,), dtype="float32")])
            x2 = R.call_dps_packed("{kernel}", (R.shape([1, 1]), x, c[0], c[1], p_cb), out_ty=R.Tensor((1, 8, n), dtype="float32"))
"""
TRANSPOSED = """\
            y = R.call_dps_packed("kokoro_ext.conv1d_transpose", (R.shape({options}), x2, p_w, p_b), out_ty=R.Tensor((1, 4, n * 2), dtype="float32"))"""
# stride 2, pad 1: phase 0 is taps 3 and 1 over x[n - 1] and x[n], phase 1 taps 2 and 0
# over x[n] and x[n + 1], the same two-tap convolution read one column later
POLYPHASE = """\
            w2 = R.reshape(R.permute_dims(R.reshape(R.take(p_w, R.const(np.array([3, 1, 2, 0])), axis=2), R.shape([8, 4, 2, 2])), axes=[1, 2, 0, 3]), R.shape([8, 8, 2]))
            q = R.call_dps_packed("kokoro_ext.taps_filter_q8_quads", (w2,), out_ty=[R.Tensor((1, 2, 2, 8, 4), dtype="int8"), R.Tensor((8,), dtype="int32"), R.Tensor((8,), dtype="float32")])
            b2 = R.repeat(p_b, 2, axis=0)
            z = R.call_dps_packed("kokoro_ext.conv1d_taps_q8_int8", (R.shape([1, 1]), x2, q[0], q[1], q[2], b2), out_ty=R.Tensor((1, 8, n + 1), dtype="float32"))
            z4 = R.reshape(z, R.shape([1, 4, 2, n + 1]))
            phases = R.concat((R.strided_slice(z4, axes=[2, 3], begin=[0, 0], end=[1, n], assume_inbound=True), R.strided_slice(z4, axes=[2, 3], begin=[1, 1], end=[2, n + 1], assume_inbound=True)), axis=2)
            y = R.reshape(R.permute_dims(phases, axes=[0, 1, 3, 2]), R.shape([1, 4, n * 2]))"""
TAPS_Q8 = CONV_Q8.replace("{kernel}", "kokoro_ext.conv1d_taps_q8")


def test_a_transposed_convolution_with_int8_products_becomes_polyphase_taps():
    after = quantize_weights(frozenset({"p_c"}), LayerProducts(transposed="int8"))(
        _transposed_module(CONV + TRANSPOSED)
    )
    tvm.ir.assert_structural_equal(after, _transposed_module(TAPS_Q8 + POLYPHASE))


@pytest.mark.parametrize("w_shape, options, products, kernel", [
    ((8, 4, 4), (2, 1, 0), LayerProducts(long="int8", direct="bf16", linear="int8"),
     "kokoro_ext.conv1d_taps_q8_bf16"),  # transposed convolutions float32
    ((8, 4, 6), (2, 2, 0), LayerProducts(transposed="int8"), "kokoro_ext.conv1d_taps_q8"),  # kernel 3 strides
    ((8, 4, 4), (2, 1, 1), LayerProducts(transposed="int8"), "kokoro_ext.conv1d_taps_q8"),  # output padding
])
def test_a_transposed_convolution_stays_float32_where_the_rule_does_not_apply(
    w_shape, options, products, kernel
):
    before = _transposed_module(CONV + TRANSPOSED, w_shape, options)
    expected = _transposed_module(CONV_Q8.replace("{kernel}", kernel) + TRANSPOSED, w_shape, options)
    tvm.ir.assert_structural_equal(quantize_weights(frozenset({"p_c"}), products)(before), expected)


def test_a_function_without_int8_convolutions_keeps_its_transposed_ones_float32():
    """A float32 checkpoint's build may still choose weights that no kernel reads as int8
    (weight norms' one-value rows lie on any grid): its convolutions stay float32, and so
    do its transposed ones."""
    before = _transposed_module(CONV + TRANSPOSED)
    after = quantize_weights(frozenset({"p_w", "p_b"}), LayerProducts(transposed="int8"))(before)
    tvm.ir.assert_structural_equal(after, before)


def test_a_transposed_convolution_on_an_input_filter_stays_float32():
    """A filter that is not a weight cannot be transformed once, at build time."""
    def with_filter_as_input(mod):
        return tvm.IRModule({"main": mod["main"].with_attr("num_input", 2)})

    before = with_filter_as_input(_transposed_module(CONV + TRANSPOSED))
    after = quantize_weights(frozenset({"p_c"}), LayerProducts(transposed="int8"))(before)
    tvm.ir.assert_structural_equal(after, with_filter_as_input(_transposed_module(TAPS_Q8 + TRANSPOSED)))


@pytest.mark.skipif(not PRECISION_FEATURES["int8"] <= cpu.HostCPU.detect().enabled,
                    reason="this CPU lacks AVX512_VNNI")
@pytest.mark.parametrize("stride", [2, 6, 10])
def test_polyphase_int8_transposed_convolution_computes_the_float32_one(stride):
    """Kokoro's upsampling shapes in small (kernel 2 stride, padding stride / 2) after a
    convolution on int8 weights, through the build's pipeline: the int8 polyphase form is
    the float32 transposed convolution up to int8 quantization of both its operands
    (about 40 dB), phase for phase (the convolution before it is exact)."""
    rng = np.random.default_rng(stride)
    c_in, c_out, n = 32, 16, 50
    taps, pad = 2 * stride, stride // 2
    conv = torch.nn.Conv1d(c_in, c_in, 3, padding=1)
    module = torch.nn.Sequential(conv, torch.nn.ConvTranspose1d(c_in, c_out, taps, stride, pad))
    module.eval()
    with torch.no_grad():
        conv.weight.copy_(torch.randint(-127, 128, conv.weight.shape) * 0.004)  # an int8 grid
        module[1].weight.copy_(torch.randn(c_in, c_out, taps) * 0.1)
    x = rng.standard_normal((1, c_in, n), dtype=np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.torch import from_exported_program

    program = torch.export.export(module, (torch.from_numpy(x),))
    mod, params = detach_params(from_exported_program(program, keep_params_as_input=True))
    names = frozenset(v.name for v in mod["main"].params[1:])  # the weights, as int8
    target = tvm.target.Target("llvm")
    options = PipelineOptions(int8_weights=names, products=LayerProducts(transposed="int8"))
    executable = tvm.compile(mod, target=target,
                             relax_pipeline=get_default_pipeline(target, options))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    stored = vm["main_transform_params"]([tvm.runtime.tensor(p.numpy()) for p in params["main"]])
    assert any(np.from_dlpack(s).dtype == np.int8 for s in stored)
    got = vm["main"](tvm.runtime.tensor(x), *stored)
    got = got[0].numpy()  # main returns a tuple of its one output
    assert got.shape == want.shape == (1, c_out, n * stride)
    snr = 20 * np.log10(np.linalg.norm(want) / np.linalg.norm(got - want))
    assert 35 < snr < 60, snr  # int8's error (float32 would be over 100 dB), no more
