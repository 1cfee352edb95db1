"""NVIDIA GPUs: kernels as machine code (a fatbin nvcc makes at build time, no GPU
needed: kokoro_ext.build.cuda), x86-64 host code, one ``<stage>.so`` that TVM's CUDA
runtime loads (kokoro_ext.run.cuda).  ``cuda`` holds SASS for every architecture of
``CUDA_ARCHITECTURES`` and compute_90 PTX, which the driver compiles for a later GPU;
``cuda-sm80`` ... ``cuda-sm90`` one architecture each (nvcc's sm_XX, what
``nvidia-smi --query-gpu=compute_cap`` reports as X.Y), a quarter of the kernels' size."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pathlib import Path

from kokoro_ext.build import cuda, cudnn, steps
from kokoro_ext.build.backend.gpu import GpuTarget
from kokoro_ext.run.resident import STEPS


@dataclass(frozen=True)
class CudaTarget(GpuTarget):
    """A CUDA build: the architectures whose machine code the kernels hold (sm_XX), and
    the PTX (compute_XX) stored for later ones, or None."""

    architectures: tuple[str, ...] = ()
    ptx: str | None = None

    @classmethod
    def named(cls) -> Mapping[str, CudaTarget]:
        return CUDA_TARGETS

    @classmethod
    def claim(cls, target: Mapping[str, Any], text: str, host=None) -> CudaTarget | None:
        """The entry whose TVM target it is (``cuda`` before ``cuda-sm80``, whose targets
        are the same: a build names its entry by the word), its host optional; the plain
        ``cuda`` for a target that names neither an architecture nor libraries.  Any other
        is refused (ValueError naming the presets): an entry of other machine code or
        without the libraries asked for would be a silent substitute."""
        if target.get("kind") != "cuda":
            return None
        same = [t for t in CUDA_TARGETS.values() if dict(t.target) == dict(target)]
        if same:
            return same[0]
        given = {k: v for k, v in target.items() if k != "host"}
        alike = [t for t in CUDA_TARGETS.values()
                 if {k: v for k, v in t.target.items() if k != "host"} == given]  # fmt: skip
        if alike:
            return alike[0]
        if "arch" not in target and "libs" not in target:
            return CUDA
        raise ValueError(
            f"--target {text!r}: no CUDA target builds {json.dumps(given, sort_keys=True)}; "
            f"the CUDA targets are {', '.join(CUDA_TARGETS)} (a JSON target must be one of "
            "theirs: an arch of " + ", ".join(CUDA_ARCHITECTURES) + ", libs [] or [\"cudnn\"])"
        )

    is_cuda: ClassVar[bool] = True

    def prepare(self) -> None:
        cuda.nvcc()  # refuses with how to install it, before any compiling

    def add_libraries(self, directory: Path) -> Mapping[str, Any]:
        """The steps module (the host steps as device kernels: kokoro_ext.build.steps)
        and, for a target whose ``libs`` name cuDNN, the cuDNN convolutions' library
        (kokoro_ext.build.cudnn); each recorded in ``requires`` with its SHA-256."""
        requires = dict(self.requires)
        if cudnn.LIB in self.target.get("libs", ()):
            requires["libraries"] = cudnn.library_record(cudnn.build_library(directory))
        requires[STEPS] = steps.build_steps(self, directory)
        return requires

    def fcompile(self) -> Callable | None:
        cuda.nvcc()
        return None

    def fpack_imports(self) -> Callable | None:
        """The kernels compiled to machine code where TVM kept their source."""
        return cuda.pack_imports(self.architectures, self.ptx)

    def codegen(self) -> contextlib.AbstractContextManager:
        """Our nvcc compile as TVM's compile callback (where TVM's CUDA runtime loads, it
        compiles at codegen)."""
        return cuda.compiling(self.architectures, self.ptx)


#: What the plain ``cuda`` target holds machine code for: A100 (sm_80), the RTX 30 and A10
#: (sm_86), the RTX 40, L4 and L40 (sm_89), H100 and H200 (sm_90).
CUDA_ARCHITECTURES = ("sm_80", "sm_86", "sm_89", "sm_90")
#: TVM's CUDA host: x86-64 code for any x86-64 CPU (the host side only launches kernels).
_CUDA_HOST = {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "x86-64"}


def _cuda(
    name: str, what: str, architectures: tuple[str, ...], ptx: str | None, libs: tuple[str, ...] = ()
) -> CudaTarget:
    return CudaTarget(
        name=name,
        what=what,
        # the codegen's architecture: the oldest the kernels run on
        target={"kind": "cuda", "arch": architectures[0], "host": _CUDA_HOST,
                **({"libs": list(libs)} if libs else {})},  # fmt: skip
        requires={"architectures": list(architectures), "ptx": ptx},
        architectures=architectures,
        ptx=ptx,
    )  # TVM's fusion depth


CUDA = _cuda(
    "cuda",
    "NVIDIA GPUs sm_80 to sm_90: A100, RTX 30/40, L4, H100, H200; later ones through PTX",
    CUDA_ARCHITECTURES,
    "compute_90",
)
CUDA_PRESETS = tuple(
    _cuda(f"cuda-{arch.replace('_', '')}", f"NVIDIA GPUs of compute capability "
          f"{arch[3]}.{arch[4:]} only", (arch,), None)
    for arch in CUDA_ARCHITECTURES
)  # fmt: skip
#: The same with the convolutions through cuDNN (kokoro_ext.build.cudnn), for the GPUs
#: where cuDNN's convolutions beat the build's own (bench/gpu.py measures both).
CUDNN_PRESETS = tuple(
    _cuda(f"{t.name}-cudnn", f"{t.what}; convolutions through cuDNN 9", t.architectures, t.ptx,
          (cudnn.LIB,))
    for t in (CUDA, *CUDA_PRESETS)
)  # fmt: skip
CUDA_TARGETS: dict[str, CudaTarget] = {t.name: t for t in (CUDA, *CUDA_PRESETS, *CUDNN_PRESETS)}
