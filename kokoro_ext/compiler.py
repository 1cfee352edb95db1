"""torch.export -> Relax (our converters) -> tvm.compile, for one stage and bucket."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import tvm
from torch import Tensor, nn
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext import native
from kokoro_ext.frontend import LstmBackend, custom_convert_map
from kokoro_ext.schedule import relax_pipeline


@dataclass
class CompiledModule:
    """A compiled stage with what it took to build it."""

    executable: tvm.runtime.Executable
    ir_lines: int  # lines of the imported Relax module (TVMScript)
    seconds: dict[str, float] = field(default_factory=dict)  # export / import / compile


def compile_module(
    module: nn.Module,
    example: Sequence[Tensor],
    target: str | dict = "llvm",
    lstm_backend: LstmBackend = "native",
    native_dense: bool = True,
) -> CompiledModule:
    """Export ``module`` on ``example`` (static shapes), import it into Relax and compile it.

    ``lstm_backend`` chooses the LSTM's lowering (kokoro_ext.frontend), ``native_dense``
    whether the pipeline dispatches the GEMM-shaped ops to the native kernels
    (kokoro_ext.schedule.relax_pipeline).
    """
    seconds = {}
    start = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(module.eval(), tuple(example))
    seconds["export"] = time.perf_counter() - start
    start = time.perf_counter()
    converters = custom_convert_map(lstm_backend)
    mod = from_exported_program(program, custom_convert_map=converters)
    seconds["import"] = time.perf_counter() - start
    ir_lines = len(mod.script().splitlines())
    start = time.perf_counter()
    target = tvm.target.Target(target)
    # tvm.compile's "default" Relax pipeline is the target-specific one only for GPUs; for
    # llvm it skips operator fusion.  Ours is the CPU pipeline plus the native kernels'
    # dispatch and inlining (schedule.py).
    pipeline = relax_pipeline(target, native_dense)
    executable = tvm.compile(mod, target=target, relax_pipeline=pipeline)
    seconds["compile"] = time.perf_counter() - start
    return CompiledModule(executable, ir_lines, seconds)


class StageRunner:
    """Runs a compiled stage on numpy/torch inputs and returns numpy outputs."""

    def __init__(self, executable: tvm.runtime.Module | tvm.runtime.Executable):
        native.load()  # the native kernels must be registered before the VM resolves them
        self._vm = relax.VirtualMachine(executable, tvm.cpu())

    def __call__(self, *args: np.ndarray | Tensor) -> list[np.ndarray]:
        tensors = [
            tvm.runtime.tensor(a.numpy() if isinstance(a, Tensor) else np.ascontiguousarray(a))
            for a in args
        ]
        out = self._vm["main"](*tensors)
        if isinstance(out, tvm.runtime.Tensor):
            return [out.numpy()]
        return [o.numpy() for o in out]
