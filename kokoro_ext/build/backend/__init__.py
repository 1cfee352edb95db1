"""The targets a build can be for, one class per kind, as TVM keeps one backend per
target (tvm.relax.backend.<target>.pipeline).

``resolve`` turns a ``--target`` (a word, TVM's CLI form, a JSON dict) into one
``BuildTarget`` (kokoro_ext.build.backend.base), once, at the build's entry; the driver and
the compiler take that object and ask it, never the text again:

  kind      class (module)                          pipeline
  llvm      CpuTarget (backend.cpu), presets as     backend/cpu/pipeline.py
            data (kokoro_ext.build.target.PRESETS)
  wasm      WasmTarget (backend.browser)            backend/cpu/pipeline.py, VM storage
  webgpu    WebGpuTarget (backend.browser)          backend/gpu/pipeline.py, WGSL
  cuda      CudaTarget (backend.cuda), presets      backend/gpu/pipeline.py (cuDNN where
            cuda-sm80 ... cuda-sm90, -cudnn         the target's libs name it)

A kind is one class: its TVM target, its Relax pipeline (``pipeline``, ``compile``), its
codegen and packing hooks (``codegen``, ``fcompile``, ``fpack_imports``), its library
suffix, its weights' wire format and what else of the build's options it takes
(``options``: anything else is refused by name, ``choose``), what it writes beside the
stages (``add_files``, ``add_libraries``) and what the manifest records of it
(``target``, ``requires``, ``max_frames``, ``cpu_features``).  Registered
(``register``), it is found by its words (``named``) and by TVM targets it ``claim``s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kokoro_ext.build.backend.base import FLAGS, BuildTarget, Choices
from kokoro_ext.build.backend.browser import WASM, WEBGPU, WasmTarget, WebGpuTarget
from kokoro_ext.build.backend.cpu import CpuTarget, this_machine
from kokoro_ext.build.backend.cuda import CUDA, CUDA_TARGETS, CudaTarget
from kokoro_ext.build.target import HostCPU, parse_target, target_dict

#: The registered kinds, the latest first: a TVM target goes to the first that claims it.
KINDS: list[type[BuildTarget]] = []


def register(kind: type[BuildTarget]) -> type[BuildTarget]:
    """Make ``kind`` a target ``--target`` finds, before those registered earlier."""
    if kind not in KINDS:
        KINDS.insert(0, kind)
    return kind


def unregister(kind: type[BuildTarget]) -> None:
    KINDS.remove(kind)


for _kind in (CpuTarget, WebGpuTarget, WasmTarget, CudaTarget):
    register(_kind)


def named_targets() -> dict[str, BuildTarget]:
    """Every target a --target word names, of every kind (not the CPU presets)."""
    return {name: t for kind in reversed(KINDS) for name, t in kind.named().items()}


def resolve(
    text: str | Mapping[str, Any] | BuildTarget, host: HostCPU | None = None
) -> BuildTarget:
    """The target a ``--target`` value names; ValueError naming what is wrong with it.

    A word of a kind (``named``: webgpu, wasm, cuda, cuda-sm90, ...) is that target; any
    other value is read as a TVM target (kokoro_ext.build.target.target_dict: a CPU
    preset, a JSON dict, the CLI form) and goes to the kind that claims it.  ``host``:
    the machine a CPU target without ``mcpu`` means (None: this one)."""
    if isinstance(text, BuildTarget):
        return text
    words = named_targets()
    if isinstance(text, str) and text.strip() in words:
        return words[text.strip()]
    target = target_dict(dict(text) if isinstance(text, Mapping) else text)
    name = text.strip() if isinstance(text, str) else str(dict(text))
    for kind in KINDS:
        if (claimed := kind.claim(target, name, host)) is not None:
            return claimed
    # no kind takes it: the CPU parser's message, naming the other targets
    parse_target(target if isinstance(text, Mapping) else text, host, others=list(words))
    raise ValueError(f"--target {name!r}: no target kind claims {target}")


def targets_help() -> Iterator[str]:
    """``name (what)`` of each named target, for --help."""
    for name, target in named_targets().items():
        yield f"{name} ({target.what})"


__all__ = [
    "CUDA", "CUDA_TARGETS", "FLAGS", "KINDS", "WASM", "WEBGPU", "BuildTarget", "Choices",
    "CpuTarget", "CudaTarget", "WasmTarget", "WebGpuTarget", "named_targets", "register",
    "resolve", "targets_help", "this_machine", "unregister",
]  # fmt: skip
