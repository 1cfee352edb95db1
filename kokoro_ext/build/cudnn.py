"""The cuDNN convolution library a CUDA build carries when its target lists ``"cudnn"`` in
``libs`` (TVM's way of naming the vendor libraries a target may call):
``{"kind": "cuda", "arch": "sm_90", "libs": ["cudnn"]}``.

kokoro_ext.build.passes.dispatch (``cudnn_kernels``) sends such a build's float32 1-D
convolutions to ``kokoro_ext.cudnn.conv1d`` (cpp/cuda/cudnn_conv.cc), and the build
compiles that file here into ``libkokoro_ext_cudnn.so`` beside the stage libraries
(``build_library``), recording its SHA-256 in the manifest's ``requires``; the run side
loads it before the stages (kokoro_ext.run.cuda.load_libraries).

The library is host code: the C++ compiler, cuDNN 9's headers and the CUDA toolkit's
(``cuda_runtime_api.h``, beside nvcc), no GPU and no cuDNN library.  It opens
``libcudnn.so.9`` at its first call, so any cuDNN 9 serves where it runs (the
``nvidia-cudnn-cu13`` wheel of the ``[cuda]`` extra, or PyTorch's).  The headers come
from that wheel (``CUDNN_WHEEL``), downloaded once with pip and kept in the cache
without the wheel's libraries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kokoro_ext.build.environment import REPO_ROOT
from kokoro_ext.run import artifacts
from kokoro_ext.run import cuda as run_cuda
from kokoro_ext.run.cache import cache_dir

#: The wheel whose headers the library is compiled with (cuDNN 9: the run side's any 9.x).
CUDNN_WHEEL = "nvidia-cudnn-cu13==9.28.1.4"
SOURCE = REPO_ROOT / "cpp" / "cuda" / "cudnn_conv.cc"
#: What a target's ``libs`` names for it.
LIB = "cudnn"


def headers() -> Path:
    """cuDNN's include folder, from ``CUDNN_WHEEL`` (downloaded once into the cache)."""
    version = CUDNN_WHEEL.split("==")[1]
    include = cache_dir() / "cudnn" / version / "include"
    if (include / "cudnn.h").is_file():
        return include
    with tempfile.TemporaryDirectory(prefix="kokoro-cudnn-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--only-binary=:all:", "--platform", "manylinux_2_27_x86_64",
                   "-d", tmp, CUDNN_WHEEL]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise ValueError(f"a CUDA build with cuDNN needs cuDNN's headers, from the "
                             f"{CUDNN_WHEEL} wheel, which pip could not download: "
                             f"{result.stderr.strip()[-500:]}")  # fmt: skip
        staged = include.with_name("include.partial")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith("nvidia/cudnn/include/") and name.endswith(".h"):
                    (staged / Path(name).name).write_bytes(wheel.read(name))
        staged.rename(include)
    return include


def cuda_headers() -> Path:
    """The CUDA toolkit's include folder (``cuda_runtime_api.h``), as nvcc itself names
    it (``nvcc --dryrun``: nvcc may be a wrapper outside the toolkit)."""
    import re

    from kokoro_ext.build.cuda import nvcc

    dry = subprocess.run([nvcc(), "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True)  # fmt: skip
    for folder in re.findall(r'INCLUDES="([^"]*)"', dry.stdout + dry.stderr)[:1]:
        for flag in folder.split():
            include = Path(flag.removeprefix("-I"))
            if (include / "cuda_runtime_api.h").is_file():
                return include
    raise ValueError("nvcc names no include folder with cuda_runtime_api.h: install the "
                     "CUDA 13 toolkit")  # fmt: skip


def build_library(out: Path) -> Path:
    """``cpp/cuda/cudnn_conv.cc`` compiled into ``out/`` (run_cuda.CUDNN_LIBRARY); its path.
    Plain x86-64 host code (no -march): it only calls cuDNN."""
    import tvm_ffi

    ffi = Path(tvm_ffi.__file__).resolve().parent
    library = out / run_cuda.CUDNN_LIBRARY
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise ValueError("a CUDA build with cuDNN compiles its convolution library with a "
                         "C++ compiler: install g++")  # fmt: skip
    command = [compiler, "-std=c++17", "-O2", "-fPIC", "-shared", "-o", str(library),
               str(SOURCE), f"-I{ffi / 'include'}", f"-I{headers()}", f"-I{cuda_headers()}",
               f"-L{ffi / 'lib'}", "-ltvm_ffi", "-ldl"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return library


def library_record(library: Path) -> dict[str, str]:
    """The manifest's ``requires["libraries"]`` entry of ``library``: name -> SHA-256."""
    return {library.name: artifacts.sha256(library)}
