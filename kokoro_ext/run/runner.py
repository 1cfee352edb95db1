"""Running one compiled stage: a Relax VM over a library and, for a build, its weights.

Run side: numpy, tvm-ffi and the TVM runtime library only (no torch, no compiler).  A
build's libraries take their weights as arguments of ``main``, after the inputs, in the
layout the build stored them (kokoro_ext.run.weights): loading a stage maps them and
computes nothing.

The runtime library (``libtvm_runtime.so``: the Relax VM, the thread pool; found and
loaded by kokoro_ext.run.native) is used through tvm-ffi, without importing the ``tvm``
Python package.
That import registers ~140 Python classes whose C++ types only the compiler library has;
with the runtime library alone each lookup fails in C++, and the first failure builds a
backtrace, which initializes libbacktrace over every loaded library: 0.15-0.2 s and
30 MiB at every start where the interpreter carries debug information (pyenv's
libpython does), for nothing a stage needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tvm_ffi

from kokoro_ext.run import cuda, native
from kokoro_ext.run.threads import configure_thread_pool
from kokoro_ext.run.weights import ALIGN

#: The function LiftTransformParams makes from a stage's ``main`` (kokoro_ext.build.schedule):
#: the checkpoint's parameters -> the weights ``main`` takes (transposed, weight-normed,
#: Winograd).  The build runs it (kokoro_ext.build.compiler.transform_weights) and stores
#: its outputs; the runtime never does.
TRANSFORM_PARAMS = "main_transform_params"
#: The Relax VM's arguments to ``vm_initialization``: kDLCPU, device 0, the naive allocator
#: (tvm.runtime.vm.VirtualMachine's NAIVE_ALLOCATOR).  A stage library takes its buffers
#: from the native library's pool instead (kokoro_ext.build.memory), which reuses a freed
#: buffer for any request it fits; the VM's pooled allocator keeps freed buffers for
#: requests of exactly their size, and with symbolic lengths nearly every call has sizes
#: of its own: that pool would only grow.
_CPU, _NAIVE_ALLOCATOR = 1, 1
#: Where a stage runs: this CPU, or CUDA device 0 (a CUDA build: kokoro_ext.run.cuda).
Device = Literal["cpu", "cuda"]

def load_library(path: str | Path, device: Device = "cpu") -> tvm_ffi.Module:
    """A compiled stage library (a shared object: the runtime's loader, no compiler); for
    ``device`` "cuda", after TVM's CUDA runtime (kokoro_ext.run.cuda), which loads its
    kernels."""
    native.load_runtime()
    if device == "cuda":
        cuda.load_runtime()
    return tvm_ffi.load_module(str(path))


def load_vm(library: Any, device: Device = "cpu") -> tvm_ffi.Module:
    """A Relax VM over ``library``: a loaded stage library, or a ``tvm.runtime.Executable``
    fresh from ``tvm.compile`` (tests, comparisons).  On this CPU with the naive
    allocator, or on CUDA device 0 (kokoro_ext.run.cuda.vm_devices)."""
    native.load_runtime()
    if device == "cuda":
        cuda.load_runtime()
    else:
        configure_thread_pool()  # before TVM creates its pool: one thread per core
        native.load()  # the native kernels must be registered before the VM resolves them
    if hasattr(library, "jit"):  # an Executable: its module (no import of tvm here)
        library = library.jit()
    vm = library["vm_load_executable"]()
    if device == "cuda":
        vm["vm_initialization"](*cuda.vm_devices())
    else:
        vm["vm_initialization"](_CPU, 0, _NAIVE_ALLOCATOR)
    return vm


def to_tensor(array: np.ndarray, copy: bool = True) -> tvm_ffi.Tensor:
    """``array`` as a tvm-ffi tensor through DLPack, at an ``ALIGN``-byte address (compiled
    code may assume it): a copy, or with ``copy=False`` the array itself where it is
    C-contiguous and aligned already (a weights file's arrays are)."""
    array = np.asarray(array)
    aligned = array.flags.c_contiguous and array.ctypes.data % ALIGN == 0
    if copy or not aligned:
        buffer = np.empty(array.nbytes + ALIGN, np.uint8)
        start = -buffer.ctypes.data % ALIGN
        # np.ndarray at an offset: a slice of zero elements would not move the pointer
        target = np.ndarray(array.shape, array.dtype, buffer=buffer, offset=start)
        target[...] = array
        array = target
    return tvm_ffi.from_dlpack(array, require_alignment=ALIGN, require_contiguous=True)


def to_numpy(tensor: tvm_ffi.Tensor) -> np.ndarray:
    """A numpy copy of a tensor the VM returned (the VM's buffer is not kept)."""
    return np.array(np.from_dlpack(tensor), copy=True)


class PoolBound:
    """Keeps TVM's pooled allocator on a GPU from growing with every input length.

    The pool keeps each freed buffer for later requests of exactly its size; with
    symbolic lengths nearly every chunk brings sizes of its own, so over a long-running
    server the pool would hold a buffer for every length it has seen.  This counts the
    distinct input shapes the stages have been called with since the pool was last
    emptied, and empties it (``clear``: ``vm.builtin.memory_manager.clear``, which frees
    the buffers no tensor holds) before a call that would make them more than
    ``shapes``: the pool then serves repeated lengths, as a server's retries and a
    bench's repeats are, and holds the buffers of at most ``shapes`` lengths.
    """

    def __init__(self, clear: Callable[[], Any], shapes: int = 4):
        self._clear, self.shapes = clear, shapes
        self._seen: set[tuple] = set()
        self._lock = threading.Lock()
        self.clears = 0

    def before_call(self, key: tuple) -> None:
        with self._lock:
            if key in self._seen:
                return
            if len(self._seen) >= self.shapes:
                self._clear()
                self._seen.clear()
                self.clears += 1
            self._seen.add(key)


_gpu_pool: PoolBound | None = None


def gpu_pool() -> PoolBound:
    """The process's PoolBound over TVM's memory manager (one for every GPU VM: TVM's
    memory manager is global)."""
    global _gpu_pool
    if _gpu_pool is None:
        _gpu_pool = PoolBound(tvm_ffi.get_global_func("vm.builtin.memory_manager.clear"))
    return _gpu_pool


class StageRunner:
    """Runs a compiled stage on numpy inputs and returns numpy outputs.

    ``weights``: the arrays ``main`` takes after the inputs (a build's ``<stage>.weights``,
    memory-mapped: kokoro_ext.run.weights.load_weights), passed on every call as they
    are.  Without weights, ``main`` takes the inputs alone (weights bound as constants:
    kokoro_ext.build.compiler.compile_module).
    """

    def __init__(
        self, executable: Any, weights: Sequence[np.ndarray] = (), device: Device = "cpu"
    ):
        self._vm = load_vm(executable, device)
        self._main = self._vm["main"]
        self._device = device
        # DLPack: memory-mapped weights reach main without a copy (their pages are read
        # from the file when a kernel first touches them); on a GPU, copied there once
        self._weights = [self._input(to_tensor(w, copy=False)) for w in weights]

    def _input(self, tensor: tvm_ffi.Tensor) -> tvm_ffi.Tensor:
        return cuda.to_device(tensor) if self._device == "cuda" else tensor

    def _output(self, tensor: tvm_ffi.Tensor) -> np.ndarray:
        return to_numpy(cuda.to_host(tensor) if self._device == "cuda" else tensor)

    def __call__(self, *args: np.ndarray) -> list[np.ndarray]:
        arrays = [_numpy(a) for a in args]
        out = self.call_tensors(*(self._input(to_tensor(a)) for a in arrays))
        return [self._output(o) for o in out]

    def call_tensors(self, *inputs: tvm_ffi.Tensor) -> list[tvm_ffi.Tensor]:
        """``main`` on tensors already on the stage's device; its outputs left there
        (kokoro_ext.run.resident keeps a chunk's tensors on the GPU)."""
        if self._device == "cuda":
            gpu_pool().before_call((id(self), *(tuple(int(d) for d in t.shape) for t in inputs)))
        out = self._main(*inputs, *self._weights)
        return [out] if isinstance(out, tvm_ffi.Tensor) else list(out)


class NamedStage:
    """A stage called by name: keyword inputs (or one mapping), passed to ``call`` in the
    order of ``inputs``; its outputs returned as a dict in the order of ``outputs``.

    ``call`` runs the stage on positional arrays: a StageRunner (``inputs`` and
    ``outputs`` from the build's signature: kokoro_ext.run.manifest), or a PyTorch module
    in the comparison tools.
    """

    def __init__(
        self, call: Callable[..., Sequence[Any]], inputs: Sequence[str], outputs: Sequence[str]
    ):
        self.call, self.inputs, self.outputs = call, tuple(inputs), tuple(outputs)

    def __call__(
        self, inputs: Mapping[str, Any] | None = None, /, **named: Any
    ) -> dict[str, np.ndarray]:
        given = {**(inputs or {}), **named}
        if set(given) != set(self.inputs):
            missing = [n for n in self.inputs if n not in given]
            unknown = [n for n in given if n not in self.inputs]
            raise TypeError(
                f"a stage taking {self.inputs} got {tuple(given)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        out = self.call(*(given[n] for n in self.inputs))
        if len(out) != len(self.outputs):
            raise ValueError(f"a stage returning {self.outputs} returned {len(out)} arrays")
        return dict(zip(self.outputs, out))


def _numpy(value) -> np.ndarray:
    # torch tensors (tests, comparison tools) without importing torch here
    return value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
