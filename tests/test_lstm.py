"""The length-aware LSTM: torch op, native kernel and TIR loop against torch.nn.LSTM.

The reference is ``nn.LSTM`` on ``pack_padded_sequence`` input, padded back with
``pad_packed_sequence``.  Both compiled backends run through the same path (export ->
from_exported_program with our converter -> tvm.compile -> VM) and the same tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.run import kernels, native
from kokoro_ext.build.export import PackedLSTM
from kokoro_ext.build.frontend import LSTM_BACKENDS, custom_convert_map

INPUT, HIDDEN, STEPS = 20, 16, 9
TOL = 1e-5


@pytest.fixture(scope="module", autouse=True)
def native_library():
    native.load()


def make_lstm(num_layers: int, bidirectional: bool, seed: int = 0) -> torch.nn.LSTM:
    torch.manual_seed(seed)
    return torch.nn.LSTM(
        INPUT, HIDDEN, num_layers=num_layers, bidirectional=bidirectional, batch_first=True
    ).eval()


def reference(lstm, x, lengths, hx=None):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        y, (h_n, c_n) = lstm(packed, hx)
    y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
    return [y.numpy(), h_n.numpy(), c_n.numpy()]


class _WithState(torch.nn.Module):
    """Exports PackedLSTM with explicit initial state as inputs."""

    def __init__(self, lstm):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, lengths, h0, c0):
        y, (h_n, c_n) = self.lstm(x, lengths, (h0, c0))
        return y, h_n, c_n


_compiled: dict = {}


def compiled(lstm: torch.nn.LSTM, backend: str, batch: int, with_state: bool = False):
    """Export PackedLSTM(lstm), import with our converter, compile; cached per config."""
    key = (id(lstm), backend, batch, with_state)
    if key not in _compiled:
        module = PackedLSTM.from_lstm(lstm).eval()
        D = 2 if lstm.bidirectional else 1
        args = [torch.zeros(batch, STEPS, INPUT), torch.full((batch,), STEPS)]
        if with_state:
            module = _WithState(module)
            # Two distinct tensors: export would alias one object passed twice.
            args += [torch.zeros(lstm.num_layers * D, batch, HIDDEN) for _ in range(2)]
        ep = torch.export.export(module, tuple(args))
        mod = from_exported_program(ep, custom_convert_map=custom_convert_map(backend))
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        _compiled[key] = (lstm, vm)  # keep lstm alive so id() stays unique
    return _compiled[key][1]


def run(vm, *arrays):
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays])
    return [o.numpy() for o in out]


def max_errors(got, want):
    return [float(np.abs(g - w).max()) for g, w in zip(got, want)]


CASES = [
    pytest.param(layers, bidir, lengths, id=f"L{layers}-{'bi' if bidir else 'uni'}-{lengths}")
    for layers in (1, 2)
    for bidir in (False, True)
    for lengths in ([STEPS], [1], [STEPS, 1, 4], [3, STEPS, 1])
]


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
@pytest.mark.parametrize("layers,bidirectional,lengths", CASES)
def test_matches_packed_torch_lstm(backend, layers, bidirectional, lengths):
    lstm = make_lstm(layers, bidirectional)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((len(lengths), STEPS, INPUT)).astype("float32")
    # Garbage in the padding must not leak into the valid region.
    for b, n in enumerate(lengths):
        x[b, n:] = 1e3
    lens = np.array(lengths, dtype="int64")
    got = run(compiled(lstm, backend, len(lengths)), x, lens)
    want = reference(lstm, torch.from_numpy(x), torch.from_numpy(lens))
    assert max(max_errors(got, want)) <= TOL, max_errors(got, want)
    for b, n in enumerate(lengths):
        assert not got[0][b, n:].any(), "output past the length must be zero"


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
def test_initial_state_is_used(backend):
    lstm = make_lstm(2, True)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, STEPS, INPUT)).astype("float32")
    lens = np.array([5, STEPS, 2], dtype="int64")
    h0, c0 = rng.standard_normal((2, 4, 3, HIDDEN)).astype("float32")
    got = run(compiled(lstm, backend, 3, with_state=True), x, lens, h0, c0)
    hx = (torch.from_numpy(h0), torch.from_numpy(c0))
    want = reference(lstm, torch.from_numpy(x), torch.from_numpy(lens), hx)
    assert max(max_errors(got, want)) <= TOL


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
def test_batch_equals_each_sequence_alone(backend):
    lstm = make_lstm(2, True, seed=3)
    rng = np.random.default_rng(3)
    lengths = [4, STEPS, 1]
    x = rng.standard_normal((3, STEPS, INPUT)).astype("float32")
    batch = run(compiled(lstm, backend, 3), x, np.array(lengths, dtype="int64"))
    single = compiled(lstm, backend, 1)
    for b, n in enumerate(lengths):
        alone = run(single, x[b : b + 1], np.array([n], dtype="int64"))
        np.testing.assert_array_equal(batch[0][b], alone[0][0])
        np.testing.assert_array_equal(batch[1][:, b], alone[1][:, 0])
        np.testing.assert_array_equal(batch[2][:, b], alone[2][:, 0])


def test_torch_op_matches_nn_lstm():
    lstm = make_lstm(2, True)
    x = torch.randn(3, STEPS, INPUT)
    lengths = torch.tensor([2, STEPS, 5])
    y, (h_n, c_n) = PackedLSTM.from_lstm(lstm)(x, lengths)
    got = [y.detach().numpy(), h_n.detach().numpy(), c_n.detach().numpy()]
    assert max(max_errors(got, reference(lstm, x, lengths))) <= TOL


@pytest.mark.parametrize("bad,message", [([STEPS + 1, 2, 3], "outside"), ([0, 2, 3], "outside")])
@pytest.mark.parametrize("backend", LSTM_BACKENDS)
def test_bad_lengths_are_rejected_at_run_time(backend, bad, message):
    vm = compiled(make_lstm(1, True), backend, 3)
    x = np.zeros((3, STEPS, INPUT), dtype="float32")
    with pytest.raises(Exception, match=message) as err:
        run(vm, x, np.array(bad, dtype="int64"))
    assert "packed_lstm" in str(err.value) or kernels.LSTM in str(err.value)


def test_unsorted_lengths_with_enforce_sorted_are_rejected():
    lstm = PackedLSTM.from_lstm(make_lstm(1, False), enforce_sorted=True)
    with pytest.raises(ValueError, match="sorted in decreasing order"):
        lstm(torch.zeros(2, STEPS, INPUT), torch.tensor([2, 5]))


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
def test_unsorted_lengths_with_enforce_sorted_are_rejected_when_compiled(backend):
    module = PackedLSTM.from_lstm(make_lstm(1, False), enforce_sorted=True).eval()
    ep = torch.export.export(module, (torch.zeros(2, STEPS, INPUT), torch.tensor([5, 2])))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map(backend))
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    x = np.zeros((2, STEPS, INPUT), dtype="float32")
    run(vm, x, np.array([5, 2], dtype="int64"))  # sorted: fine
    with pytest.raises(Exception, match="sorted in decreasing order"):
        run(vm, x, np.array([2, 5], dtype="int64"))


def test_torch_op_rejects_wrong_dtype_and_shape():
    lstm = PackedLSTM.from_lstm(make_lstm(1, False))
    with pytest.raises(ValueError, match="lengths must be int64"):
        lstm(torch.zeros(2, STEPS, INPUT), torch.tensor([2, 5], dtype=torch.int32))
    with pytest.raises(ValueError, match="x must be a float32"):
        lstm(torch.zeros(2, STEPS, INPUT, dtype=torch.float16), torch.tensor([2, 5]))
    with pytest.raises(ValueError, match=r"w_ih_first must be torch.float32 \[1, 64, 7\] like x"):
        lstm(torch.zeros(2, STEPS, 7), torch.tensor([2, 5]))
    with pytest.raises(ValueError, match="outside"):
        lstm(torch.zeros(2, STEPS, INPUT), torch.tensor([STEPS + 1, 5]))


def test_native_kernel_rejects_mismatched_weights():
    lstm_fn = tvm.get_global_func(kernels.LSTM)
    import tvm_ffi

    f32 = lambda *s: tvm.runtime.tensor(np.zeros(s, dtype="float32"))  # noqa: E731
    lengths = tvm.runtime.tensor(np.array([2], dtype="int64"))
    args = [f32(1, STEPS, INPUT), lengths, f32(1, 1, HIDDEN), f32(1, 1, HIDDEN),
            f32(1, 4 * HIDDEN, INPUT + 1), f32(0, 1, 4 * HIDDEN, HIDDEN),
            f32(1, 1, 4 * HIDDEN, HIDDEN), f32(1, 1, 4 * HIDDEN),
            f32(1, STEPS, HIDDEN), f32(1, 1, HIDDEN), f32(1, 1, HIDDEN)]
    with pytest.raises(ValueError, match=r"w_ih_first must have shape \[1, 64, 20\]"):
        lstm_fn(tvm_ffi.Shape((0,)), *args)


def test_from_lstm_rejects_unsupported_configurations():
    with pytest.raises(ValueError, match="batch_first=True"):
        PackedLSTM.from_lstm(torch.nn.LSTM(4, 4))
    with pytest.raises(ValueError, match="proj_size"):
        PackedLSTM.from_lstm(torch.nn.LSTM(4, 8, proj_size=2, batch_first=True))


def test_tir_loop_ir_does_not_grow_with_sequence_length():
    sizes = []
    for steps in (8, 64):
        module = PackedLSTM.from_lstm(make_lstm(1, True)).eval()
        ep = torch.export.export(module, (torch.zeros(1, steps, INPUT), torch.tensor([steps])))
        mod = from_exported_program(ep, custom_convert_map=custom_convert_map("tir"))
        sizes.append(len(mod.script(show_meta=False).splitlines()))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
def test_compiled_module_rejects_wrong_input_dtype_and_shape(backend):
    vm = compiled(make_lstm(1, True), backend, 1)
    x = np.zeros((1, STEPS, INPUT), dtype="float32")
    with pytest.raises(ValueError, match="param=lengths.*int64"):
        run(vm, x, np.array([STEPS], dtype="int32"))
    with pytest.raises(Exception, match="param=x"):
        run(vm, np.zeros((1, STEPS + 1, INPUT), dtype="float32"), np.array([STEPS]))


# -- int8 weights: kokoro_ext.lstm_q8 and its quantizer kokoro_ext.lstm_weights_q8 --------


def _call(name: str, *arrays, enforce_sorted: bool = False):
    """The native ``name`` on numpy arrays (the LSTM's inputs, then its weights and bias):
    (y, h_n, c_n)."""
    import tvm_ffi

    x, h0, bias = arrays[0], arrays[2], arrays[-1]
    B, T, D, H = x.shape[0], x.shape[1], bias.shape[1], h0.shape[2]
    outs = [np.empty((B, T, D * H), np.float32), np.empty_like(h0), np.empty_like(h0)]
    args = [tvm_ffi.from_dlpack(np.ascontiguousarray(a)) for a in (*arrays, *outs)]
    tvm.get_global_func(name)(tvm_ffi.Shape((int(enforce_sorted),)), *args)
    return outs


def _quantize(w: np.ndarray):
    """(q, scale, lossy rows) of w by kokoro_ext.lstm_weights_q8."""
    import tvm_ffi

    w = np.ascontiguousarray(w, np.float32)
    q, scale = np.empty(w.shape, np.int8), np.empty(w.shape[:-1], np.float32)
    lossy = tvm.get_global_func(kernels.LSTM_WEIGHTS_Q8)(*map(tvm_ffi.from_dlpack, (w, q, scale)))
    return q, scale, int(lossy)


PANEL = 128  # gates per panel of lstm_q8's w_hh


def _panels(w_hh: np.ndarray):
    """(panels, scale, lossy rows) of w_hh [..., 4H, H] by kokoro_ext.lstm_recurrent_q8."""
    import tvm_ffi

    w = np.ascontiguousarray(w_hh, np.float32)
    *lead, G, H = w.shape
    panels = np.empty((*lead, -(-G // PANEL), H, PANEL), np.int8)
    scale = np.empty(w.shape[:-1], np.float32)
    lossy = tvm.get_global_func(kernels.LSTM_RECURRENT_Q8)(
        *map(tvm_ffi.from_dlpack, (w, panels, scale)))
    return panels, scale, int(lossy)


def _q8_weights(weights):
    """lstm_q8's six weight arguments for float32 (w_ih_first, w_ih_rest, w_hh), and the
    rows quantized off a grid."""
    out, lossy = [], 0
    for w in weights[:2]:
        q, scale, n = _quantize(w)
        out, lossy = out + [q, scale], lossy + n
    panels, scale, n = _panels(weights[2])
    return out + [panels, scale], lossy + n


def _inputs(rng, layers, D, lengths, I, H):
    B, L = len(lengths), layers
    x = rng.standard_normal((B, STEPS, I), dtype=np.float32)
    h0, c0 = rng.standard_normal((2, L * D, B, H), dtype=np.float32) * 0.5
    bias = rng.standard_normal((L, D, 4 * H), dtype=np.float32) * 0.1
    return x, np.array(lengths, np.int64), h0, c0, bias


def _weight_shapes(layers, D, I, H):
    return [(D, 4 * H, I), (layers - 1, D, 4 * H, D * H), (layers, D, 4 * H, H)]


Q8_CASES = [
    # layers, directions, lengths, I, H: 4H = 160 leaves a tail past the 128-gate panels,
    # I = 33 a tail past the vector lanes the rows are dequantized in.
    pytest.param(1, 2, [STEPS, 1, 4], INPUT, HIDDEN, id="L1-bi"),
    pytest.param(2, 1, [3, STEPS, 1], 33, 40, id="L2-uni-tails"),
    pytest.param(2, 2, [5, 2], 33, 40, id="L2-bi-tails"),
    pytest.param(3, 2, [7], INPUT, 32, id="L3-bi"),
]


@pytest.mark.parametrize("layers,D,lengths,I,H", Q8_CASES)
def test_lstm_q8_equals_lstm_on_the_dequantized_weights_bit_for_bit(layers, D, lengths, I, H):
    """Weights on an int8 grid with a scale per row (as DynamicQuantizeLSTM's are): the int8
    kernel computes the float32 kernel's sums on float(q) * scale, in the same order (w_hh
    in its int8 panels, dequantized in registers)."""
    rng = np.random.default_rng(layers * 10 + D)
    x, lens, h0, c0, bias = _inputs(rng, layers, D, lengths, I, H)
    for b, n in enumerate(lengths):
        x[b, n:] = 1e3  # padding, never read
    dequantized = []
    for shape in _weight_shapes(layers, D, I, H):
        q = rng.integers(-128, 128, shape, dtype=np.int8)
        scale = ((rng.random(shape[:-1]) + 0.5) / (8 * np.sqrt(H))).astype(np.float32)
        dequantized.append(q.astype(np.float32) * scale[..., None])
    quantized, lossy = _q8_weights(dequantized)
    assert lossy == 0
    got = _call(kernels.LSTM_Q8, x, lens, h0, c0, *quantized, bias)
    want = _call(kernels.LSTM, x, lens, h0, c0, *dequantized, bias)
    for g, w, name in zip(got, want, ("y", "h_n", "c_n")):
        np.testing.assert_array_equal(g, w, err_msg=name)
    for b, n in enumerate(lengths):
        assert not got[0][b, n:].any(), "output past the length must be zero"


@pytest.mark.parametrize("G,H", [(64, 16), (160, 40), (1024, 256)])
def test_recurrent_panels_hold_the_int8_rows(G, H):
    """lstm_recurrent_q8: the int8 values and scales of lstm_weights_q8, gate g's row in
    column g % 128 of panel g // 128, gates past 4H zero."""
    rng = np.random.default_rng(G + H)
    w = rng.standard_normal((2, 1, G, H)).astype(np.float32)
    q, scale, lossy = _quantize(w)
    panels, panel_scale, panel_lossy = _panels(w)
    assert panels.shape == (2, 1, -(-G // PANEL), H, PANEL)
    np.testing.assert_array_equal(panel_scale, scale)
    assert panel_lossy == lossy == 2 * G
    padded = np.zeros((2, 1, panels.shape[2] * PANEL, H), np.int8)
    padded[:, :, :G] = q
    unpacked = padded.reshape(2, 1, -1, PANEL, H).transpose(0, 1, 2, 4, 3)
    np.testing.assert_array_equal(panels, unpacked)


def test_lstm_weights_q8_finds_the_grid_and_gives_the_values_back():
    """A scale per direction (DynamicQuantizeLSTM's), per gate row, and an empty w_ih_rest
    (one layer): lossless, float(q) * scale is the weight bit for bit."""
    rng = np.random.default_rng(5)
    # multiples of the step as a trained weight's are: most near zero, a few up to 127
    n = np.clip(np.round(rng.standard_normal((2, 64, 96)) * 30), -127, 127).astype(np.float32)
    per_direction = n * np.array([0.013, 0.021], np.float32)[:, None, None]
    per_row = n * (rng.random((2, 64, 1), dtype=np.float32) + 0.1)
    for w in (per_direction, per_row, per_row.reshape(1, 2, 64, 96)):
        q, scale, lossy = _quantize(w)
        assert lossy == 0
        np.testing.assert_array_equal(q.astype(np.float32) * scale[..., None], w)
    q, scale, lossy = _quantize(np.zeros((0, 2, 64, 32), np.float32))
    assert lossy == 0 and q.shape == (0, 2, 64, 32) and scale.shape == (0, 2, 64)


def test_lstm_q8_on_lossy_weights_stays_near_float64():
    """Float weights off any grid: each row quantized symmetrically (max |w| / 127), every
    row lossy.  Error against float64 on the float weights: within 1e-2 (the float32
    kernel on the same weights: within TOL)."""
    layers, D, lengths, I, H = 2, 2, [STEPS, 4, 1], INPUT, HIDDEN
    rng = np.random.default_rng(7)
    x, lens, h0, c0, bias = _inputs(rng, layers, D, lengths, I, H)
    weights = [(rng.uniform(-1, 1, s) / np.sqrt(H)).astype(np.float32)
               for s in _weight_shapes(layers, D, I, H)]
    quantized, lossy = _q8_weights(weights)
    assert lossy == sum(int(np.prod(w.shape[:-1])) for w in weights)
    got = _call(kernels.LSTM_Q8, x, lens, h0, c0, *quantized, bias)
    as64 = [torch.from_numpy(a).double() for a in (x, h0, c0, *weights, bias)]
    want = torch.ops.kokoro_ext.packed_lstm(
        as64[0], torch.from_numpy(lens), *as64[1:], False)
    errors = max_errors(got, [w.numpy() for w in want])
    assert max(errors) <= 1e-2, errors
    float32 = _call(kernels.LSTM, x, lens, h0, c0, *weights, bias)
    assert max(max_errors(float32, [w.numpy() for w in want])) <= TOL


def test_lstm_q8_and_its_quantizer_reject_bad_weights_naming_them():
    import tvm_ffi

    rng = np.random.default_rng(9)
    x, lens, h0, c0, bias = _inputs(rng, 1, 2, [STEPS], INPUT, HIDDEN)
    shapes = _weight_shapes(1, 2, INPUT, HIDDEN)
    good, _ = _q8_weights([np.zeros(s, np.float32) for s in shapes])
    _call(kernels.LSTM_Q8, x, lens, h0, c0, *good, bias)  # fine as it is
    cases = [
        (0, np.zeros(shapes[0], np.float32), r"w_ih_first must be int8"),
        (1, np.ones((2, 63), np.float32), r"w_ih_first_scale must have shape \[2, 64\]"),
        (3, np.ones((0, 2, 64), np.float64), r"w_ih_rest_scale must be float32"),
        (2, np.zeros((1, 2, 64, 32), np.int8), r"w_ih_rest must have shape \[0, 2, 64, 32\]"),
        (4, np.zeros((1, 2, 1, 16, 128), np.float32), r"w_hh must be int8"),
        (4, np.zeros(shapes[2], np.int8), r"w_hh must have 5 dimensions"),
        (4, np.zeros((1, 2, 1, 16, 64), np.int8), r"w_hh must have shape \[1, 2, 1, 16, 128\]"),
        (5, np.ones((1, 2, 64, 1), np.float32), r"w_hh_scale must have 3 dimensions"),
    ]
    for index, bad, message in cases:
        args = list(good)
        args[index] = bad
        with pytest.raises(ValueError, match=rf"kokoro_ext.lstm_q8: {message}"):
            _call(kernels.LSTM_Q8, x, lens, h0, c0, *args, bias)
    quantize = tvm.get_global_func(kernels.LSTM_WEIGHTS_Q8)
    w = np.zeros((2, 64, 20), np.float32)
    for arrays, message in [
        ((w, np.zeros(w.shape, np.float32), np.zeros((2, 64), np.float32)), "q must be int8"),
        ((w, np.zeros(w.shape, np.int8), np.zeros((2, 20), np.float32)),
         r"scale must have shape \[2, 64\]"),
        ((w.astype(np.float64), np.zeros(w.shape, np.int8), np.zeros((2, 64), np.float32)),
         "w must be float32"),
        ((np.zeros(20, np.float32), np.zeros(20, np.int8), np.zeros(1, np.float32)),
         r"w must be \[\.\.\., 4H, n\]"),
    ]:
        with pytest.raises(ValueError, match=rf"kokoro_ext.lstm_weights_q8: {message}"):
            quantize(*map(tvm_ffi.from_dlpack, arrays))
    pack = tvm.get_global_func(kernels.LSTM_RECURRENT_Q8)
    for arrays, message in [
        ((w, np.zeros((2, 1, 20, 64), np.int8), np.zeros((2, 64), np.float32)),
         r"panels must have shape \[2, 1, 20, 128\]"),
        ((w, np.zeros((2, 64, 20), np.int8), np.zeros((2, 64), np.float32)),
         "panels must have 4 dimensions"),
        ((np.zeros(20, np.float32), np.zeros((1, 20, 128), np.int8), np.zeros(1, np.float32)),
         r"w must be \[\.\.\., 4H, H\]"),
    ]:
        with pytest.raises(ValueError, match=rf"kokoro_ext.lstm_recurrent_q8: {message}"):
            pack(*map(tvm_ffi.from_dlpack, arrays))
