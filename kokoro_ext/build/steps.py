"""A CUDA build's steps module: the host steps of a synthesis as device kernels
(kokoro_ext.build.kernels.steps), compiled for the build's target into ``steps.so``
beside the stages, its file and SHA-256 recorded in the manifest's ``requires["steps"]``
(kokoro_ext.run.resident loads it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import tvm

from kokoro_ext.build.kernels.steps import KERNELS
from kokoro_ext.run.resident import STEPS_FILE, steps_record


class CudaTarget(Protocol):
    """What of a CUDA target (kokoro_ext.build.backend.cuda, which builds this module)
    the compile takes."""

    target: Mapping[str, Any]

    def codegen(self) -> contextlib.AbstractContextManager: ...
    def fcompile(self) -> Callable | None: ...
    def fpack_imports(self) -> Callable | None: ...


def steps_module() -> tvm.IRModule:
    """The kernels as one module, each exported under its name."""
    return tvm.IRModule({name: kernel.with_attr("global_symbol", name)
                         for name, kernel in KERNELS.items()})  # fmt: skip


def compile_steps(target: CudaTarget) -> tvm.runtime.Executable:
    """The steps module compiled for ``target`` (its kernels through nvcc where TVM's
    CUDA runtime loads: ``target.codegen``)."""
    with target.codegen(), tvm.target.Target(dict(target.target)) as tvm_target:
        return tvm.compile(steps_module(), target=tvm_target)


def build_steps(target: CudaTarget, directory: Path) -> dict[str, str]:
    """``steps.so`` in ``directory`` for ``target``, its kernels machine code (the
    target's ``fpack_imports``); the manifest's record of it."""
    path = Path(directory) / STEPS_FILE
    compile_steps(target).export_library(
        str(path), fcompile=target.fcompile(), fpack_imports=target.fpack_imports()
    )
    return steps_record(path)
