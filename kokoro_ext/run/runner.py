"""Running one compiled stage: a Relax VM over a library and, for a build, its weights.

Run side: numpy and the TVM runtime only (no torch, no compiler).  A build's libraries
take their weights as arguments of ``main``, after the inputs, in the layout the build
stored them (kokoro_ext.run.weights): loading a stage maps them and computes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm.runtime.vm import VirtualMachine

from kokoro_ext.run import native
from kokoro_ext.run.threads import configure_thread_pool

#: The function LiftTransformParams makes from a stage's ``main`` (kokoro_ext.build.schedule):
#: the checkpoint's parameters -> the weights ``main`` takes (transposed, weight-normed,
#: Winograd).  The build runs it (kokoro_ext.build.compiler.transform_weights) and stores
#: its outputs; the runtime never does.
TRANSFORM_PARAMS = "main_transform_params"


def load_library(path: str | Path) -> tvm.runtime.Module:
    """A compiled stage library (a shared object: the runtime's loader, no compiler)."""
    return tvm.runtime.load_module(str(path))


class StageRunner:
    """Runs a compiled stage on numpy inputs and returns numpy outputs.

    ``weights``: the arrays ``main`` takes after the inputs (a build's ``<stage>.weights``,
    memory-mapped: kokoro_ext.run.weights.load_weights), passed on every call as they
    are.  Without weights, ``main`` takes the inputs alone (weights bound as constants:
    kokoro_ext.build.compiler.compile_module).
    """

    def __init__(
        self,
        executable: tvm.runtime.Module | tvm.runtime.Executable,
        weights: Sequence[np.ndarray] = (),
    ):
        configure_thread_pool()  # before TVM creates its pool: one thread per core
        native.load()  # the native kernels must be registered before the VM resolves them
        # "naive": buffers go back to the system after each call.  The default pooled
        # allocator keeps every freed buffer for reuse at the same size, and with symbolic
        # lengths nearly every call has sizes of its own: the pool would only grow.
        self._vm = VirtualMachine(executable, tvm.cpu(), memory_cfg="naive")
        # DLPack: memory-mapped weights reach main without a copy (their pages are read
        # from the file when a kernel first touches them)
        self._weights = [tvm.runtime.from_dlpack(np.ascontiguousarray(w)) for w in weights]

    def __call__(self, *args: np.ndarray) -> list[np.ndarray]:
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(_numpy(a))) for a in args]
        out = self._vm["main"](*tensors, *self._weights)
        if isinstance(out, tvm.runtime.Tensor):
            return [out.numpy()]
        return [o.numpy() for o in out]


def _numpy(value) -> np.ndarray:
    # torch tensors (tests, comparison tools) without importing torch here
    return value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
