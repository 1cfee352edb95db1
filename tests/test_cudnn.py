"""A CUDA build's convolutions through cuDNN (kokoro_ext.build.cudnn, cpp/cuda/cudnn_conv.cc):
the dispatch (before/expected), the GPU pipeline for a target whose libs name cuDNN, the
library compiled here and its refusals where there is no GPU, and the run side's checks of
the library a build records.  Its numbers against PyTorch are bench/gpu.py's, on a GPU."""

from __future__ import annotations

import ctypes
import json
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from kokoro_ext.build import cudnn
from kokoro_ext.build.backend import CUDA_TARGETS, resolve
from kokoro_ext.build.backend.gpu import pipeline as gpu_pipeline
from kokoro_ext.build.passes.dispatch import DispatchNativeKernels, cudnn_kernels
from kokoro_ext.run import cuda as run_cuda
from kokoro_ext.run import kernels, native

# fmt: off
@I.ir_module
class Conv:
    @R.function
    def main(x: R.Tensor((1, 4, "n"), "float32"), w: R.Tensor((8, 4, 3), "float32"), b: R.Tensor((8,), "float32")):
        n = T.int64()
        with R.dataflow():
            y = R.nn.conv1d(x, w, strides=[1], padding=[2, 2], dilation=[2])
            bias = R.reshape(b, R.shape([1, 8, 1]))
            z = R.add(y, bias)
            out = R.nn.relu(z)
            R.output(out)
        return out


@I.ir_module
class Dispatched:
    @R.function
    def main(x: R.Tensor((1, 4, "n"), "float32"), w: R.Tensor((8, 4, 3), "float32"), b: R.Tensor((8,), "float32")):
        n = T.int64()
        with R.dataflow():
            z = R.call_dps_packed("kokoro_ext.cudnn.conv1d", (R.shape([1, 2, 2, 2]), x, w, b), out_ty=R.Tensor((1, 8, n), dtype="float32"))
            out = R.nn.relu(z)
            R.output(out)
        return out
# fmt: on


def test_convolutions_and_their_bias_go_to_cudnn_with_the_math_type():
    after = DispatchNativeKernels(cudnn_kernels(kernels.CUDNN_MATH["fp16"]))(Conv)
    tvm.ir.assert_structural_equal(after, Dispatched)


def test_cudnn_kernels_leave_the_products_to_tvm():
    @I.ir_module
    class Products:
        @R.function
        def main(x: R.Tensor((2, 3, 4), "float32"), w: R.Tensor((2, 4, 5), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(DispatchNativeKernels(cudnn_kernels(0))(Products), Products)


def test_the_gpu_pipeline_dispatches_only_where_the_target_names_cudnn():
    plain = CUDA_TARGETS["cuda-sm90"]
    with_cudnn = CUDA_TARGETS["cuda-sm90-cudnn"]
    assert with_cudnn.target["libs"] == ["cudnn"] and "libs" not in plain.target
    assert resolve(dict(with_cudnn.target)) is with_cudnn
    for gpu, dispatched in ((plain, False), (with_cudnn, True)):
        target = tvm.target.Target(dict(gpu.target))
        with target:
            mod = tvm.transform.Sequential(gpu_pipeline.library_dispatch_passes(target))(Conv)
        assert ("kokoro_ext.cudnn.conv1d" in mod.script()) == dispatched


def test_a_json_cuda_target_is_a_preset_or_refused():
    # the host may be left out; a target the presets do not build is refused, not swapped
    assert resolve('{"kind": "cuda", "arch": "sm_90", "libs": ["cudnn"]}') is CUDA_TARGETS["cuda-sm90-cudnn"]
    assert resolve('{"kind": "cuda", "arch": "sm_86"}') is CUDA_TARGETS["cuda-sm86"]
    assert resolve('{"kind": "cuda"}') is CUDA_TARGETS["cuda"]
    with pytest.raises(ValueError, match=r"no CUDA target builds .*sm_75.*cuda-sm90-cudnn"):
        resolve('{"kind": "cuda", "arch": "sm_75"}')
    with pytest.raises(ValueError, match="no CUDA target builds"):
        resolve('{"kind": "cuda", "arch": "sm_90", "libs": ["cublas"]}')


def test_the_whole_gpu_pipeline_schedules_what_is_left():
    target = tvm.target.Target(dict(CUDA_TARGETS["cuda-sm90-cudnn"].target))
    lowered = gpu_pipeline.get_gpu_pipeline(target)(Conv)
    script = lowered.script()
    assert "kokoro_ext.cudnn.conv1d" in script and "conv1d_ncw" not in script


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("the library compiles with the CUDA toolkit's headers (nvcc's)")
    return cudnn.build_library(tmp_path_factory.mktemp("cudnn"))


def test_the_library_loads_without_cudnn_or_a_gpu_and_refuses_host_tensors(library):
    native.load_runtime()
    run_cuda._load_once(str(library))
    conv = tvm_ffi.get_global_func(kernels.CUDNN_CONV1D)
    x = tvm_ffi.from_dlpack(np.zeros((1, 4, 10), np.float32))
    w = tvm_ffi.from_dlpack(np.zeros((8, 4, 3), np.float32))
    b = tvm_ffi.from_dlpack(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        conv(tvm_ffi.Shape([1, 1, 1, 0]), x, w, b, x)
    with pytest.raises(ValueError, match=r"options must be \[stride, padding, dilation, math\]"):
        conv(tvm_ffi.Shape([1, 1, 1]), x, w, b, x)
    # no cuDNN symbols are needed to load it: they are looked up at the first call
    undefined = ctypes.CDLL(str(library))  # loads again, no unresolved cuDNN symbol
    assert undefined is not None and b"cudnnConvolutionForward" in library.read_bytes()


def test_the_run_side_checks_the_recorded_library(library, tmp_path):
    shutil.copy2(library, tmp_path / library.name)
    requires = {"libraries": cudnn.library_record(tmp_path / library.name)}
    assert run_cuda.load_libraries(tmp_path, {}) == []
    tampered = dict(requires["libraries"])
    tampered[library.name] = "0" * 64
    with pytest.raises(ValueError, match="differs from the one these artifacts were built with"):
        run_cuda.load_libraries(tmp_path, {"libraries": tampered})
    with pytest.raises(ValueError, match="is missing"):
        run_cuda.load_libraries(tmp_path / "elsewhere", requires)
    # present and unchanged: loaded, or refused for want of cuDNN, naming the extra
    try:
        assert run_cuda.load_libraries(tmp_path, requires) == [tmp_path / library.name]
    except ValueError as err:
        assert "nvidia-cudnn-cu13" in str(err) and json.dumps(requires)
