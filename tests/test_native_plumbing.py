"""The native library reaches compiled Relax code through call_dps_packed."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

from kokoro_ext.run import kernels, native


@pytest.fixture(scope="module", autouse=True)
def native_library():
    native.load()


def _compile_add(n: int):
    @tvm.script.ir_module
    class Module:
        @R.function
        def main(a: R.Tensor((n,), "float32"), b: R.Tensor((n,), "float32")):
            out = R.call_dps_packed(kernels.ADD, (a, b), out_ty=R.Tensor((n,), "float32"))
            return out

    return relax.VirtualMachine(tvm.compile(Module, target="llvm"), tvm.cpu())


def test_kernel_is_registered():
    assert native.has_function(kernels.ADD)


def test_call_dps_packed_from_compiled_relax():
    vm = _compile_add(5)
    a = np.arange(5, dtype="float32")
    b = np.full(5, 0.5, dtype="float32")
    out = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b))
    np.testing.assert_array_equal(out.numpy(), a + b)


def test_kernel_rejects_wrong_dtype_with_a_clear_error():
    add = tvm.get_global_func(kernels.ADD)
    a = tvm.runtime.tensor(np.zeros(3, dtype="float64"))
    out = tvm.runtime.tensor(np.zeros(3, dtype="float32"))
    with pytest.raises(ValueError, match="kokoro_ext.add: a must be float32"):
        add(a, out, out)


def test_kernel_rejects_mismatched_shapes_with_a_clear_error():
    add = tvm.get_global_func(kernels.ADD)
    a = tvm.runtime.tensor(np.zeros(3, dtype="float32"))
    b = tvm.runtime.tensor(np.zeros(4, dtype="float32"))
    with pytest.raises(ValueError, match=r"b must have shape \[3\], got \[4\]"):
        add(a, b, a)


def test_missing_library_names_the_build_command(monkeypatch, tmp_path):
    monkeypatch.setenv("KOKORO_EXT_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(FileNotFoundError, match="cmake -S . -B build"):
        native.library_path()
