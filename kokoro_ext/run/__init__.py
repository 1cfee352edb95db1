"""The run side: load a build (``python -m kokoro_ext.build``) and speak.

Imports numpy, tvm-ffi (which loads TVM's runtime library, ``libtvm_runtime.so``: the
Relax VM, kokoro_ext.run.runner) and the standard library only, plus the G2P through
kokoro_ext.text; never the ``tvm`` Python package, torch, TVM's compiler or
kokoro_ext.build / kokoro_ext.tools (import-linter contracts in pyproject.toml).  What a
deployment copies and installs: README.md, "Deploy".
"""

from __future__ import annotations

import os
import sys

#: TVM's switch to load libtvm_runtime.so alone, without libtvm_compiler.so (LLVM).
RUNTIME_LIB_ENV = "TVM_USE_RUNTIME_LIB"


def prefer_runtime_library() -> bool:
    """Import tvm-ffi without torch, and have any later ``import tvm`` load the runtime
    library only; whether it will.

    For processes that only run builds (``python -m kokoro_ext.say``).  The run side does
    not import ``tvm`` itself (kokoro_ext.run.runner); should anything else in the
    process do so, the switch saves loading the compiler library and LLVM.  A process
    that compiles too must not call it, as TVM reads the switch once, at its import; so
    this is left to entry points and does nothing once tvm is imported or when the
    environment sets the switch already.
    """
    if "tvm" in sys.modules:
        return os.environ.get(RUNTIME_LIB_ENV) == "1"
    os.environ.setdefault(RUNTIME_LIB_ENV, "1")
    if "tvm_ffi" not in sys.modules and "torch" not in sys.modules:
        # tvm_ffi imports torch first whenever it is installed (a workaround for a symbol
        # clash seen on Windows only), a second or more that speaking never needs: hide
        # torch for that one import; it stays importable afterwards.
        sys.modules["torch"] = None  # type: ignore[assignment]
        try:
            import tvm_ffi  # noqa: F401
        finally:
            del sys.modules["torch"]
    return os.environ[RUNTIME_LIB_ENV] == "1"
