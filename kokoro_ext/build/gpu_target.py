"""GPU targets, and the browser's CPU: what a build for them differs in, in one place.

A ``--target`` naming one of ``GPU_TARGETS`` compiles the stages through
kokoro_ext.build.gpu_pipeline instead of the CPU pipeline, with the LSTM as GPU kernels
(kokoro_ext.build.kernels.lstm_gpu), and links each stage as the target's runtime loads
it.  The weight transform still runs on the build machine, compiled for it.
``wasm`` is the one entry that is not a GPU: the CPU pipeline for a browser's CPU
(below).

  webgpu   WGSL kernels, wasm32 host code linked with TVM's web runtime into one
           ``<stage>.wasm`` that tvmjs loads in a browser (kokoro_ext.build.web).  WGSL
           has no 64- or 8-bit integers: the stages' int64 tensors become int32, and so
           do the bool tensors passed between kernels.
  cuda     NVIDIA GPUs: kernels as machine code (a fatbin nvcc makes at build time, no
           GPU needed: kokoro_ext.build.cuda), x86-64 host code, one ``<stage>.so`` that
           TVM's CUDA runtime loads (kokoro_ext.run.cuda).  ``cuda`` holds SASS for every
           architecture of ``CUDA_ARCHITECTURES`` and compute_90 PTX, which the driver
           compiles for a later GPU; ``cuda-sm80`` ... ``cuda-sm90`` one architecture
           each (nvcc's sm_XX, what ``nvidia-smi --query-gpu=compute_cap`` reports as
           X.Y), a quarter of the kernels' size.
  wasm     a browser's CPU, for browsers without WebGPU: the CPU pipeline's kernels as
           wasm32 code with SIMD (simd128), linked with TVM's web runtime into one
           ``<stage>.wasm`` as for webgpu, the page's files beside them.  The
           convolutions, products and LSTM go to the native kernels (cpp/) compiled by
           emscripten into the same module (kokoro_ext.build.web.kernels); the storage
           is the VM's own, the weights float32.  Token ids and lengths stay int64
           (wasm32 has 64-bit integers; kokoro.js passes tvmjs their bytes).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kokoro_ext.build import cudnn
from kokoro_ext.build.gpu_pipeline import GpuPipelineOptions
from kokoro_ext.build.pipeline import PipelineOptions

#: The browser's files of this package: the page and its module.
STATIC = Path(__file__).resolve().parents[1] / "web" / "static"


@dataclass(frozen=True)
class GpuTarget:
    """A GPU a build can be for."""

    name: str  # the --target word
    what: str  # for messages and --help
    target: Mapping[str, Any]  # the TVM target, as JSON
    library_suffix: str  # of the stage libraries
    #: what it takes of the GPU pipeline (kokoro_ext.build.gpu_pipeline), or of the CPU
    #: pipeline (kokoro_ext.build.pipeline) for a CPU without the native kernels
    pipeline: GpuPipelineOptions | PipelineOptions
    #: what the manifest tells the loader of the device it needs
    requires: Mapping[str, Any] = field(default_factory=dict)
    #: CUDA: the architectures whose machine code the kernels hold (sm_XX), and the PTX
    #: (compute_XX) stored for later ones, or None
    architectures: tuple[str, ...] = ()
    ptx: str | None = None
    #: the LSTM's lowering (kokoro_ext.build.frontend.lstm)
    lstm_backend: str = "gpu"
    #: the most frames a call takes (the manifest's limit), where the device's memory
    #: holds fewer than kokoro_ext.build.stages.MAX_FRAMES; None: that
    max_frames: int | None = None

    @property
    def is_cuda(self) -> bool:
        return self.target["kind"] == "cuda"

    @property
    def is_gpu(self) -> bool:
        """Whether the kernels are GPU kernels (wasm's are CPU code)."""
        return self.target["kind"] != "llvm"

    @property
    def native_kernels(self) -> bool:
        """Whether the stages call the native kernels (cpp/), compiled for the target."""
        return getattr(self.pipeline, "native_dense", False)

    @property
    def in_browser(self) -> bool:
        """Whether the stages run in a browser: tvmjs loads them, the page's files ship
        beside them."""
        return self.library_suffix == ".wasm"

    def add_page(self, directory: Path) -> None:
        """Write what loads the build beside its stages in ``directory``: for webgpu,
        tvmjs, the page and its modules (kokoro_ext/web/static), and the fetched voice
        packs (``voices/<name>.bin``, listed in ``voices.json``), so that the folder
        works from any static host."""
        if not self.in_browser:
            return
        from kokoro_ext.build.web import runtime, text
        from kokoro_ext.run import cache
        from kokoro_ext.run.voices import list_voices

        shutil.copyfile(runtime.tvmjs_script(), directory / runtime.TVMJS_FILE)
        text.add_files(directory)  # text.js's espeak-ng and lexicons
        for file in sorted(STATIC.iterdir()):
            if file.is_file():
                shutil.copyfile(file, directory / file.name)
        # the page reads kokoro-js's raw float32 packs: .bin only
        names = [n for n in list_voices() if (cache.voices_dir() / f"{n}.bin").is_file()]
        (directory / "voices").mkdir(exist_ok=True)
        for name in names:
            shutil.copyfile(cache.voices_dir() / f"{name}.bin", directory / "voices" / f"{name}.bin")
        (directory / "voices.json").write_text(json.dumps(names))

    def add_libraries(self, directory: Path) -> Mapping[str, Any]:
        """Write the libraries of its own the stages call beside them in ``directory``
        (the cuDNN convolutions of a target whose ``libs`` name cuDNN: kokoro_ext.build
        .cudnn); the manifest's ``requires`` with their SHA-256 added."""
        requires = dict(self.requires)
        if self.is_cuda and cudnn.LIB in self.target.get("libs", ()):
            requires["libraries"] = cudnn.library_record(cudnn.build_library(directory))
        return requires

    def check(self, executable: Any, stage: str) -> None:
        """ValueError naming what of ``executable``'s kernels the device would refuse."""
        if self.name == "webgpu":
            from kokoro_ext.build.web import wgsl

            wgsl.check(executable, stage)

    def fcompile(self) -> Callable | None:
        """``export_library``'s ``fcompile`` for this target's stage libraries; refuses
        (ValueError) where its toolchain is missing, before any compiling."""
        if self.in_browser:
            from kokoro_ext.build.web import kernels, runtime

            runtime.emcc()  # refuses with how to install it, before any compiling
            if self.native_kernels:
                kernels.kernel_parts()  # compiled (or refused) before minutes of compiling
                return kernels.link
            return runtime.link
        if self.is_cuda:
            from kokoro_ext.build import cuda

            cuda.nvcc()
        return None

    def fpack_imports(self) -> Callable | None:
        """``export_library``'s ``fpack_imports``: for CUDA, the kernels compiled to
        machine code where TVM kept their source (kokoro_ext.build.cuda)."""
        if self.is_cuda:
            from kokoro_ext.build import cuda

            return cuda.pack_imports(self.architectures, self.ptx)
        return None

    def codegen(self) -> contextlib.AbstractContextManager:
        """What TVM's codegen for this target runs in: for CUDA, our nvcc compile as
        TVM's compile callback (where TVM's CUDA runtime loads, it compiles at codegen)."""
        if self.is_cuda:
            from kokoro_ext.build import cuda

            return cuda.compiling(self.architectures, self.ptx)
        return contextlib.nullcontext()


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

#: A browser's CPU: wasm32 with 128-bit SIMD (every browser since 2021-2023: Chrome 91,
#: Firefox 89, Safari 16.4), through the CPU pipeline with the native kernels compiled by
#: emscripten (kokoro_ext.build.web.kernels), the VM's own allocator and float32 weights.
WASM = GpuTarget(
    name="wasm",
    what="a browser's CPU without WebGPU: wasm32 SIMD code with TVM's web runtime",
    target={"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm", "mcpu": "generic",
            "mattr": ["+simd128"]},
    library_suffix=".wasm",
    pipeline=PipelineOptions(native_dense=True, native_storage=False),
    requires={"wasm_features": ["simd128"]},
    lstm_backend="native",
    # A wasm32 instance has at most 2 GB: the decoder's, with its 262 MB of weights, grows
    # about 0.5 MB a frame (474 MiB at 285 frames in Chromium, its storage planned for the
    # call's batch: kokoro_ext.build.passes.memory.exact_dynamic_sizes), so 2048 frames
    # (82 s of audio) stay near 1.3 GB.  Longer chunks are halved by the page (tts.js).
    max_frames=2048,
)

#: What the plain ``cuda`` target holds machine code for: A100 (sm_80), the RTX 30 and A10
#: (sm_86), the RTX 40, L4 and L40 (sm_89), H100 and H200 (sm_90).
CUDA_ARCHITECTURES = ("sm_80", "sm_86", "sm_89", "sm_90")
#: TVM's CUDA host: x86-64 code for any x86-64 CPU (the host side only launches kernels).
_CUDA_HOST = {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "x86-64"}


def _cuda(
    name: str, what: str, architectures: tuple[str, ...], ptx: str | None, libs: tuple[str, ...] = ()
) -> GpuTarget:
    return GpuTarget(
        name=name,
        what=what,
        # the codegen's architecture: the oldest the kernels run on
        target={"kind": "cuda", "arch": architectures[0], "host": _CUDA_HOST,
                **({"libs": list(libs)} if libs else {})},  # fmt: skip
        library_suffix=".so",
        pipeline=GpuPipelineOptions(),  # TVM's fusion depth
        requires={"architectures": list(architectures), "ptx": ptx},
        architectures=architectures,
        ptx=ptx,
    )


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

GPU_TARGETS: dict[str, GpuTarget] = {
    t.name: t for t in (WEBGPU, WASM, CUDA, *CUDA_PRESETS, *CUDNN_PRESETS)
}


def gpu_target(target: Mapping[str, Any] | str) -> GpuTarget | None:
    """The GPU_TARGETS entry of a parsed target dict or a --target word, None for a CPU
    one.

    A dict is the entry whose TVM target it is (``cuda`` before ``cuda-sm80``, whose
    targets are the same: a build names its entry by the word), else the first GPU of
    its kind (an llvm dict is wasm's only if it is wasm's target)."""
    if isinstance(target, str):
        return GPU_TARGETS.get(target.strip())
    for gpu in GPU_TARGETS.values():
        if dict(gpu.target) == dict(target):
            return gpu
    kind = target.get("kind")
    for gpu in GPU_TARGETS.values():
        if gpu.is_gpu and gpu.target["kind"] == kind:
            return gpu
    return None
