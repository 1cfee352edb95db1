"""Loading the native kernel library (cpp/, built by CMake or setup.py).

The library registers its kernels as tvm-ffi global functions ("kokoro_ext.*") when it
is loaded; compiled Relax code reaches them by name through ``call_dps_packed``.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import tvm_ffi

LIBRARY_NAME = "libkokoro_ext_kernels.so"
_ENV_OVERRIDE = "KOKORO_EXT_LIBRARY"
_loaded: Path | None = None


def library_path() -> Path:
    """Return the path of the native library, or raise FileNotFoundError saying how to build it.

    ``$KOKORO_EXT_LIBRARY`` overrides the default location, ``kokoro_ext/lib/``.
    """
    override = os.environ.get(_ENV_OVERRIDE)
    path = Path(override) if override else Path(__file__).parent / "lib" / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"native kernel library not found at {path}; build it with "
            "`cmake -S . -B build && cmake --build build` (or `pip install -e .`) "
            f"from the repository root, or set ${_ENV_OVERRIDE} to its path"
        )
    return path


def load() -> Path:
    """Load the native library once per process so its global functions are registered.

    Returns the path that was loaded.
    """
    global _loaded
    if _loaded is None:
        path = library_path()
        # RTLD_GLOBAL is not needed: registration happens in the library's static
        # initializers, into the libtvm_ffi.so that Python already has loaded.
        ctypes.CDLL(str(path))
        _loaded = path
    return _loaded


def has_function(name: str) -> bool:
    """Whether a tvm-ffi global function of this name is registered (after ``load()``)."""
    return tvm_ffi.get_global_func(name, allow_missing=True) is not None
