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
