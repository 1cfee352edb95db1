"""The native kernels (``cpp/src``) compiled for WebAssembly, linked into the ``wasm``
target's stages.

TVM leaves the convolutions and products its default pipeline lowers unscheduled; in a
browser's CPU those loops are most of a stage's time, as on a native CPU.  The same
kernels the native builds call (``kokoro_ext.conv1d``, ``conv1d_taps``, Winograd, the LSTM)
compile with emscripten for wasm32 with SIMD128: their register blocks are GCC vector
types, which clang lowers to 128-bit SIMD.  OpenBLAS has no WebAssembly build here, so
the few BLAS products they call come from ``cpp/blas/sgemm.cc``.  TVM's web runtime runs
``TVMBackendParallelLaunch`` serially; ``cpp/web/threads.cc`` takes its place, with a
pool of Web Workers on the stage's shared memory where the page can have one, so that the
TVM-generated parallel loops and the kernels' tiles run on the page's cores.

They register themselves with tvm-ffi's global registry when the module starts (static
initializers, as in the native library), where the stages' host code looks them up.
The objects are compiled once per source, emscripten and TVM version, and kept in the
cache beside the web runtime's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import tvm
import tvm_ffi

from kokoro_ext.build.environment import REPO_ROOT
from kokoro_ext.build.web import runtime

CPP = REPO_ROOT / "cpp"
#: The kernel sources a stage can call (storage.cc is the native pool, which wasm builds
#: do not use; noise.cc is host.js's in the page).
SOURCES = (
    CPP / "src" / "dense.cc",
    CPP / "src" / "elementwise.cc",
    CPP / "src" / "low_precision.cc",
    CPP / "src" / "lstm.cc",
    CPP / "src" / "winograd.cc",
    CPP / "blas" / "sgemm.cc",
    CPP / "web" / "threads.cc",
)
_CFLAGS = ["-O3", "-std=c++17", "-msimd128", "-fno-math-errno", "-Wno-ignored-attributes",
           *runtime.THREADS_CFLAGS]  # fmt: skip


def _includes() -> list[str]:
    tvm_dir = Path(tvm.__file__).parent
    return [
        f"-I{CPP / 'include'}",
        f"-I{CPP / 'blas'}",  # cblas.h: the BLAS subset sgemm.cc implements
        f"-I{tvm_dir / 'include'}",
        f"-I{tvm_ffi.libinfo.find_include_path()}",
        f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}",
        f"-I{runtime.SUPPORT / 'include'}",
    ]


def _headers() -> list[Path]:
    return sorted(p for d in ("include", "blas") for p in (CPP / d).rglob("*.h"))


def kernels_dir() -> Path:
    """The cached folder of the kernels' objects for these sources, emcc and TVM."""
    if not all(s.is_file() for s in SOURCES):
        raise runtime.ToolchainError(
            f"the wasm target compiles the native kernels from {CPP}, which this "
            "installation lacks: build from a source checkout of kokoro-tvm-ext"
        )
    digest = hashlib.sha256(f"{tvm.__version__}|{runtime.emcc_version()}|{_CFLAGS}".encode())
    for path in (*SOURCES, *_headers()):
        digest.update(path.read_bytes())
    return runtime.cache.cache_dir() / "web" / f"kernels-{digest.hexdigest()[:12]}"


def kernel_parts() -> list[Path]:
    """The kernels' wasm object files, compiled first if the cache lacks them."""
    return runtime.compile_objects(list(SOURCES), [*_includes(), *_CFLAGS], kernels_dir())


def link(output: str, objects: list[str], options: list[str] | None = None) -> None:
    """``export_library``'s ``fcompile`` for the wasm target: ``runtime.link`` with the
    kernels' objects and the thread pool, on shared memory."""
    runtime.link(output, [*objects, *map(str, kernel_parts())], options, threads=True)


link.object_format = "o"  # type: ignore[attr-defined]
