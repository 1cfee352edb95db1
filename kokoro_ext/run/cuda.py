"""Running a CUDA build: TVM's CUDA runtime, the GPU, and the refusals where it cannot run.

A CUDA build's stage libraries (kokoro_ext.build.cuda) hold x86-64 host code and a
fatbin: machine code for the architectures the manifest's ``requires`` lists, and maybe
PTX that the driver compiles for a later GPU.  Running them takes TVM's CUDA runtime
library (``libtvm_runtime_cuda.so``: beside ``libtvm_runtime.so`` in the apache-tvm
wheel or a runtime wheel), the CUDA 13 runtime (``libcudart.so.13``: the
``nvidia-cuda-runtime`` wheel, ``pip install kokoro-tvm-ext[cuda]``, or a CUDA install), and
the NVIDIA driver's ``libcuda.so.1``, with a GPU.  ``check_device`` refuses, naming what
is missing, before anything of TVM runs.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tvm_ffi

from kokoro_ext.run import artifacts, native

RUNTIME_NAME = "libtvm_runtime_cuda.so"
CUDART_NAME = "libcudart.so.13"
CUDNN_NAME = "libcudnn.so.9"
#: The convolution library a build with "libs": ["cudnn"] carries (kokoro_ext.build.cudnn).
CUDNN_LIBRARY = "libkokoro_ext_cudnn.so"
DRIVER_NAME = "libcuda.so.1"
#: DLPack's device types, and TVM's device attributes (runtime.GetDeviceAttr)
KDL_CPU, KDL_CUDA = 1, 2
_EXIST, _COMPUTE_VERSION, _DEVICE_NAME = 0, 4, 5


def _wheel_library(name: str) -> Path | None:
    """``name`` from one of NVIDIA's wheels (nvidia/*/lib/), None for the system's."""
    spec = importlib.util.find_spec("nvidia")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(location).glob(f"*/lib/{name}")):
            return path
    return None


def _cudart() -> Path | None:
    """libcudart.so.13 of the nvidia-cuda-runtime wheel, None for the system's."""
    return _wheel_library(CUDART_NAME)


def load_libraries(directory: Path, requires: Mapping[str, Any]) -> list[Path]:
    """The libraries of their own that a build's stages call (``requires["libraries"]``:
    file name -> SHA-256; the cuDNN convolutions of kokoro_ext.build.cudnn), each checked
    and loaded once, with cuDNN from the nvidia-cudnn-cu13 wheel where it is installed.
    ValueError naming a missing or changed file, or a missing cuDNN."""
    loaded = []
    for name, sha256 in dict(requires.get("libraries") or {}).items():
        path = Path(directory) / name
        if not path.is_file():
            raise ValueError(f"{path} is missing: these artifacts' stages call it; rebuild them")
        if artifacts.sha256(path) != sha256:
            raise ValueError(f"{path} differs from the one these artifacts were built with; "
                             "rebuild them")  # fmt: skip
        if name == CUDNN_LIBRARY:
            cudnn = _wheel_library(CUDNN_NAME)
            try:
                ctypes.CDLL(str(cudnn) if cudnn else CUDNN_NAME, ctypes.RTLD_GLOBAL)
            except OSError as err:
                raise ValueError(
                    f"these artifacts' convolutions run through cuDNN 9 ({CUDNN_NAME} does "
                    f"not load: {err}): pip install 'kokoro-tvm-ext[cuda]' (the "
                    "nvidia-cudnn-cu13 wheel), or build without \"cudnn\" in the target's libs"
                ) from None
        _load_once(str(path.resolve()))
        loaded.append(path)
    return loaded


@functools.cache
def _load_once(path: str) -> None:
    ctypes.CDLL(path, ctypes.RTLD_GLOBAL)  # registers its global functions


@functools.cache
def load_runtime() -> Path:
    """Load TVM's CUDA runtime once (after TVM's runtime: kokoro_ext.run.native); returns
    its path.  ValueError naming what is missing: the driver, the CUDA runtime, TVM's
    CUDA runtime library."""
    native.load_runtime()
    try:
        ctypes.CDLL(DRIVER_NAME, ctypes.RTLD_GLOBAL)
    except OSError as err:
        raise ValueError(
            f"this machine has no NVIDIA driver ({DRIVER_NAME} does not load: {err}): a "
            "CUDA build runs on an NVIDIA GPU with its driver; on a CPU, build for it with "
            "`python -m kokoro_ext.build --target llvm`"
        ) from None
    cudart = _cudart()
    try:
        ctypes.CDLL(str(cudart) if cudart else CUDART_NAME, ctypes.RTLD_GLOBAL)
    except OSError as err:
        raise ValueError(
            f"the CUDA 13 runtime ({CUDART_NAME}) does not load ({err}): "
            "pip install 'kokoro-tvm-ext[cuda]' (the nvidia-cuda-runtime wheel), or install "
            "CUDA 13 and put its lib64 on LD_LIBRARY_PATH"
        ) from None
    path = native.runtime_library().path.with_name(RUNTIME_NAME)
    if not path.is_file():
        raise ValueError(
            f"TVM's CUDA runtime ({path}) is missing: install apache-tvm as setup.py pins "
            "it, or a runtime wheel that carries it (python -m kokoro_ext.tools.wheel)"
        )
    if tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is None:
        ctypes.CDLL(str(path), ctypes.RTLD_GLOBAL)  # registers the CUDA device and loader
    return path


def device_architecture(device: int = 0) -> tuple[str, str]:
    """(name, ``sm_XX``) of CUDA device ``device``; ValueError if there is none."""
    load_runtime()
    attr = tvm_ffi.get_global_func("runtime.GetDeviceAttr")
    if not attr(KDL_CUDA, device, _EXIST):
        raise ValueError(
            f"no CUDA GPU {device} on this machine (the driver is installed but reports "
            "none: check nvidia-smi and CUDA_VISIBLE_DEVICES)"
        )
    version = str(attr(KDL_CUDA, device, _COMPUTE_VERSION))  # "9.0"
    return str(attr(KDL_CUDA, device, _DEVICE_NAME)), "sm_" + version.replace(".", "")


def runs_on(arch: str, requires: Mapping[str, Any]) -> bool:
    """Whether kernels with ``requires`` (a manifest's: architectures, ptx) run on a GPU of
    ``arch``: its own machine code, or PTX of an architecture at most its own."""
    if arch in requires.get("architectures", ()):
        return True
    ptx = requires.get("ptx")
    return bool(ptx) and _number(ptx) <= _number(arch)


def _number(arch: str) -> int:
    return int("".join(c for c in arch.rsplit("_", 1)[1] if c.isdigit()))


def check_device(requires: Mapping[str, Any], device: int = 0) -> None:
    """ValueError unless CUDA device ``device`` runs kernels built with ``requires``."""
    name, arch = device_architecture(device)
    if not runs_on(arch, requires):
        built = ", ".join(requires.get("architectures", ())) or "none"
        ptx = requires.get("ptx")
        raise ValueError(
            f"these artifacts hold CUDA machine code for {built}"
            + (f" and PTX for {ptx} and later" if ptx else "")
            + f"; this GPU ({name}) is {arch}: rebuild with --target cuda (every preset) "
            f"or --target cuda-{arch.replace('_', '')}"
        )


def to_device(tensor: tvm_ffi.Tensor, device: int = 0) -> tvm_ffi.Tensor:
    """A copy of host ``tensor`` on CUDA device ``device``."""
    alloc = tvm_ffi.get_global_func("runtime.TVMTensorAllocWithScope")
    out = alloc(tvm_ffi.Shape(tensor.shape), tensor.dtype, tvm_ffi.device("cuda", device), None)
    tvm_ffi.get_global_func("runtime.TVMTensorCopyFromTo")(tensor, out)
    return out


def to_host(tensor: tvm_ffi.Tensor) -> tvm_ffi.Tensor:
    """A host copy of ``tensor`` (a device tensor the VM returned); waits for it."""
    alloc = tvm_ffi.get_global_func("runtime.TVMTensorAllocWithScope")
    out = alloc(tvm_ffi.Shape(tensor.shape), tensor.dtype, tvm_ffi.device("cpu", 0), None)
    tvm_ffi.get_global_func("runtime.TVMTensorCopyFromTo")(tensor, out)
    return out


def vm_devices(device: int = 0) -> Sequence[int]:
    """``vm_initialization``'s arguments for a CUDA VM: the GPU, then the host (where
    shapes are computed), each with TVM's pooled allocator (2): one pool per device,
    its freed buffers reused."""
    return (KDL_CUDA, device, 2, KDL_CPU, 0, 2)
