"""A GPU kernel's TIR run on the CPU: its blockIdx/threadIdx loops made serial, the rest
(the arithmetic, the indexing, the register buffers) as the GPU schedule left it, compiled
for llvm.  What a GPU would compute, where CI has no GPU."""

from __future__ import annotations

import re

import numpy as np
import tvm

_BINDING = re.compile(r'T\.thread_binding\((.*), thread="(?:blockIdx|threadIdx)\.[xyz]"\)')


def without_thread_bindings(func: tvm.tirx.PrimFunc, loops: int) -> tvm.tirx.PrimFunc:
    """``func`` with its ``loops`` thread-bound loops serial (AssertionError if it has
    another number: the rewrite is of TVMScript's text, one loop a line)."""
    script, bound = _BINDING.subn(r"T.serial(\1)", func.script())
    assert bound == loops, func.script()
    return tvm.script.from_source(script)


def cpu_function(func: tvm.tirx.PrimFunc, loops: int):
    """``func`` (GPU-scheduled, ``loops`` thread-bound loops) compiled for llvm: a function
    of tvm.runtime tensors."""
    kernel = without_thread_bindings(func, loops).with_attr("global_symbol", "kernel")
    return tvm.tirx.build(tvm.IRModule({"kernel": kernel}), target="llvm")["kernel"]


def run(
    function, *arrays: np.ndarray, out_shape: tuple[int, ...], scalars: tuple[int, ...] = ()
) -> np.ndarray:
    """``function(*arrays, out, *scalars)`` on the CPU; ``out`` (float32 of ``out_shape``)
    as numpy."""
    out = tvm.runtime.tensor(np.zeros(out_shape, np.float32), tvm.cpu())
    function(*(tvm.runtime.tensor(np.ascontiguousarray(a), tvm.cpu()) for a in arrays), out, *scalars)
    return out.numpy()
