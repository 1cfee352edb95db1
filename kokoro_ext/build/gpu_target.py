"""GPU targets: what a build for a GPU differs in, in one place.

A ``--target`` naming one of ``GPU_TARGETS`` compiles the stages through
kokoro_ext.build.gpu_pipeline instead of the CPU pipeline, with the LSTM as GPU kernels
(kokoro_ext.build.kernels.lstm_gpu), and links each stage as the target's runtime loads
it.  The weight transform still runs on the build machine, compiled for it.

  webgpu   WGSL kernels, wasm32 host code linked with TVM's web runtime into one
           ``<stage>.wasm`` that tvmjs loads in a browser (kokoro_ext.build.web).  WGSL
           has no 64- or 8-bit integers: the stages' int64 tensors become int32, and so
           do the bool tensors passed between kernels.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kokoro_ext.build.gpu_pipeline import GpuPipelineOptions

#: The browser's files of this package: the page and its module.
STATIC = Path(__file__).resolve().parents[1] / "web" / "static"


@dataclass(frozen=True)
class GpuTarget:
    """A GPU a build can be for."""

    name: str  # the --target word
    what: str  # for messages and --help
    target: Mapping[str, Any]  # the TVM target, as JSON
    library_suffix: str  # of the stage libraries
    #: what it takes of the GPU pipeline (kokoro_ext.build.gpu_pipeline)
    pipeline: GpuPipelineOptions
    #: what the manifest tells the loader of the device it needs
    requires: Mapping[str, Any] = field(default_factory=dict)

    def add_page(self, directory: Path) -> None:
        """Write what loads the build beside its stages in ``directory``: for webgpu,
        tvmjs and the page's module (kokoro_ext/web/static), so that the folder works
        from any static host."""
        if self.name != "webgpu":
            return
        from kokoro_ext.build.web import runtime, text

        shutil.copyfile(runtime.tvmjs_script(), directory / runtime.TVMJS_FILE)
        text.add_files(directory)  # text.js's espeak-ng and lexicons
        for file in sorted(STATIC.iterdir()):
            if file.is_file():
                shutil.copyfile(file, directory / file.name)

    def check(self, executable: Any, stage: str) -> None:
        """ValueError naming what of ``executable``'s kernels the device would refuse."""
        if self.name == "webgpu":
            from kokoro_ext.build.web import wgsl

            wgsl.check(executable, stage)

    def fcompile(self) -> Callable | None:
        """``export_library``'s ``fcompile`` for this target's stage libraries."""
        if self.name == "webgpu":
            from kokoro_ext.build.web import runtime

            runtime.emcc()  # refuses with how to install it, before any compiling
            return runtime.link
        return None


WEBGPU = GpuTarget(
    name="webgpu",
    what="WebGPU in a browser: WGSL kernels, wasm32 host code with TVM's web runtime",
    target={"kind": "webgpu", "host": {"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm"}},
    library_suffix=".wasm",
    # 16 operators a kernel: at most 9 storage buffers, 80 kB of WGSL (the decoder)
    pipeline=GpuPipelineOptions(wgsl=True, fuse_depth=16),
    # float32 kernels of at most 256 threads a work group: WebGPU's default limits
    requires={"features": [], "limits": {"maxComputeInvocationsPerWorkgroup": 256}},
)

GPU_TARGETS: dict[str, GpuTarget] = {t.name: t for t in (WEBGPU,)}


def gpu_target(target: Mapping[str, Any] | str) -> GpuTarget | None:
    """The GPU target of a parsed target dict or a --target word, None for a CPU one."""
    if isinstance(target, str):
        return GPU_TARGETS.get(target.strip())
    kind = target.get("kind")
    for gpu in GPU_TARGETS.values():
        if gpu.target["kind"] == kind:
            return gpu
    return None
