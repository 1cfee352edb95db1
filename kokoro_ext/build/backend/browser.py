"""Browsers: the four stages linked with TVM's web runtime into one WebAssembly module,
``stages.wasm``, that tvmjs loads (each stage's symbols under a prefix of its own), shipped
with the page (kokoro_ext/web/static), tvmjs and the voices,
their large weights in a wire format (kokoro_ext.run.wire).

  webgpu   WGSL kernels, wasm32 host code (kokoro_ext.build.web).  WGSL has no 64- or
           8-bit integers: the stages' int64 tensors become int32, and so do the bool
           tensors passed between kernels.
  wasm     a browser's CPU, for browsers without WebGPU: the CPU pipeline's kernels as
           wasm32 code with SIMD (simd128).  The convolutions, products and LSTM go to
           the native kernels (cpp/) compiled by emscripten into the same module
           (kokoro_ext.build.web.kernels); the storage is the VM's own.  The weights
           on an int8 grid (--weight-dtype auto, the default: the int8 checkpoint's)
           stay int8 codes with a float32 scale per output channel, on the wire and in
           the module's memory, dequantized where the kernels read them, as a CPU build
           keeps them; the products are float32.  Token ids and lengths stay int64
           (wasm32 has 64-bit integers; kokoro.js passes tvmjs their bytes).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import tvm
from tvm.support.tar import tar

from kokoro_ext.build.backend.base import BuildTarget
from kokoro_ext.build.backend.cpu.pipeline import PipelineOptions, get_default_pipeline
from kokoro_ext.build.backend.gpu import GpuTarget
from kokoro_ext.build.backend.gpu.pipeline import GpuPipelineOptions
from kokoro_ext.run import artifacts
from kokoro_ext.run.manifest import StageEntry, StageSignature, TensorSpec

#: The browser's files of this package: the page and its module.
STATIC = Path(__file__).resolve().parents[2] / "web" / "static"
#: The wire formats a browser build's weights may take, its default first.
WIRES = ("float16", "float32", "int8")
#: The module a browser build's stages are linked into.
LIBRARY = "stages.wasm"
#: A wasm build's fusion reach (kokoro_ext.build.passes.fusion.near_fusion): every
#: reach from 4 to 64 bindings keeps five of the decoder's 128-channel tensors at 120
#: steps a frame alive at its peak, not seven; 32 leaves the fewest producers unfused.
FUSION_REACH = 32


class InBrowser:
    """What the browser targets share: one module of the stages, the page, the wire."""

    #: each stage's objects, as ``export_library`` writes them; ``link_stages`` links
    #: them, with the web runtime, into ``LIBRARY``
    library_suffix: ClassVar[str] = ".tar"
    #: whether the stages call the native kernels (cpp/), compiled by emscripten
    native_kernels: ClassVar[bool] = False

    def prepare(self) -> None:
        """Refuses (ValueError) where emcc is missing, or the kernels do not compile,
        before minutes of compiling."""
        self._link()

    def _link(self) -> Callable:
        from kokoro_ext.build.web import kernels, runtime

        runtime.emcc()  # refuses with how to install it
        if self.native_kernels:
            kernels.kernel_parts()
            return kernels.link
        return runtime.link

    def fcompile(self) -> Callable | None:
        """A stage's objects in a tar (tvm.support.tar): ``link_stages`` links them."""
        return tar

    def name_stage(self, mod: tvm.IRModule, stage: str) -> tvm.IRModule:
        """Its symbols prefixed (``symbol_prefix``): the stages share one module."""
        return mod.with_attr("system_lib_prefix", symbol_prefix(stage))

    def link_stages(self, directory: Path, stages: Mapping[str, StageEntry]) -> dict[str, StageEntry]:
        """The stages' objects linked with the web runtime (and the kernels) into one
        WebAssembly module, ``LIBRARY``, whose one instance and memory the page runs them
        all in: a memory never shrinks, so four would each keep their stage's largest
        call resident, and a runtime, its code and its threads apiece."""
        link = self._link()
        with tempfile.TemporaryDirectory(prefix="objects-", dir=directory) as scratch:
            objects = []
            for name, entry in stages.items():
                folder = Path(scratch) / name
                with tarfile.open(directory / entry.file) as archive:
                    archive.extractall(folder, filter="data")
                objects += sorted(str(p) for p in folder.glob("*.o"))
                (directory / entry.file).unlink()
            link(str(directory / LIBRARY), objects)
        digest = artifacts.sha256(directory / LIBRARY)
        return {
            name: dataclasses.replace(entry, file=LIBRARY, sha256=digest, prefix=symbol_prefix(name))
            for name, entry in stages.items()
        }

    def add_files(self, directory: Path) -> None:
        """tvmjs, the page and its modules (kokoro_ext/web/static), and the fetched voice
        packs (``voices/<name>.bin``, listed in ``voices.json``), so that the folder works
        from any static host, and ``files.json`` (kokoro_ext.build.web.package)."""
        from kokoro_ext.build.web import package, runtime, text
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
            voice = f"{name}.bin"
            shutil.copyfile(cache.voices_dir() / voice, directory / "voices" / voice)
        (directory / "voices.json").write_text(json.dumps(names))
        # the SHA-256 of every file the manifest does not list, for the page's cache (sw.js)
        package.write_file_list(directory)


@dataclass(frozen=True)
class WebGpuTarget(InBrowser, GpuTarget):
    """WebGPU in a browser."""

    options: ClassVar[Mapping[str, tuple[str, ...]]] = {**GpuTarget.options, "wire": WIRES}

    @classmethod
    def named(cls) -> Mapping[str, WebGpuTarget]:
        return {WEBGPU.name: WEBGPU}

    @classmethod
    def claim(cls, target: Mapping[str, Any], text: str, host=None) -> WebGpuTarget | None:
        return WEBGPU if target.get("kind") == "webgpu" else None

    def check(self, executable: tvm.runtime.Executable, stage: str) -> None:
        from kokoro_ext.build.web import wgsl

        wgsl.check(executable, stage)

    def signature(self, signature: StageSignature) -> StageSignature:
        """int64 tensors as int32 (kokoro_ext.build.passes.narrow)."""
        return narrowed(signature)


@dataclass(frozen=True)
class WasmTarget(InBrowser, BuildTarget):
    """A browser's CPU: wasm32 with 128-bit SIMD (every browser since 2021-2023: Chrome
    91, Firefox 89, Safari 16.4), through the CPU pipeline with the native kernels
    compiled by emscripten (kokoro_ext.build.web.kernels), the VM's own allocator, int8
    weights where the checkpoint's lie on an int8 grid and float32 products."""

    options: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "lstm_backend": ("native",),
        "dense": ("native",),
        "weight_dtype": ("auto", "int8", "float32"),
        "precision": ("auto", "fp32"),
        "wire": WIRES,
    }
    limited_because: ClassVar[str] = (
        "its stages call the native kernels compiled by emscripten, with float32 products"
    )
    native_kernels: ClassVar[bool] = True
    # the stages run in a browser: the weight transform is compiled for the build machine
    transform_apart: ClassVar[bool] = True

    @classmethod
    def named(cls) -> Mapping[str, WasmTarget]:
        return {WASM.name: WASM}

    @classmethod
    def claim(cls, target: Mapping[str, Any], text: str, host=None) -> WasmTarget | None:
        """wasm's own TVM target only: any other llvm target is a CPU's."""
        return WASM if dict(target) == dict(WASM.target) else None

    def pipeline(self, options: PipelineOptions) -> tvm.transform.Pass:
        # the VM's own storage, each sized by the call, and no fusion that keeps tensors
        # alive across a stretch of the stage: no native pool in a browser, and its memory
        # never shrinks
        options = dataclasses.replace(options, native_storage=False, bounded_storage=False,
                                      fusion_reach=FUSION_REACH)
        return get_default_pipeline(tvm.target.Target(dict(self.target)), options)


def symbol_prefix(stage: str) -> str:
    """The prefix of ``stage``'s symbols in a browser build's module.  At least 8
    characters: TVM 0.27 reads the prefix back from the module as an object, which a
    string of 7 bytes or fewer (tvm-ffi's small string) is not."""
    return f"kokoro_{stage}_"


def narrowed(signature: StageSignature) -> StageSignature:
    """``signature`` with its int64 tensors as int32 (kokoro_ext.build.passes.narrow)."""

    def narrow(spec: TensorSpec) -> TensorSpec:
        return dataclasses.replace(spec, dtype="int32") if spec.dtype == "int64" else spec

    return dataclasses.replace(
        signature,
        inputs=tuple(map(narrow, signature.inputs)),
        outputs=tuple(map(narrow, signature.outputs)),
    )


WEBGPU = WebGpuTarget(
    name="webgpu",
    what="WebGPU in a browser: WGSL kernels, wasm32 host code with TVM's web runtime",
    target={"kind": "webgpu", "host": {"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm"}},
    # 16 operators a kernel: at most 9 storage buffers, 80 kB of WGSL (the decoder)
    gpu_pipeline=GpuPipelineOptions(wgsl=True, fuse_depth=16),
    # float32 kernels of at most 256 threads a work group: WebGPU's default limits
    requires={"features": [], "limits": {"maxComputeInvocationsPerWorkgroup": 256}},
)

WASM = WasmTarget(
    name="wasm",
    what="a browser's CPU without WebGPU: wasm32 SIMD code with TVM's web runtime",
    target={"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm", "mcpu": "generic",
            "mattr": ["+simd128"]},
    # shared memory (threads): the stages run on a pool of Web Workers where the page
    # is cross-origin isolated (cpp/web/threads.cc); the page creates the memory
    requires={"wasm_features": ["simd128", "threads"],
              "wasm_memory": {"initial_pages": 2560, "maximum_pages": 32768, "shared": True}},
    # A wasm32 instance has at most 2 GB: the stages' one module, with their 86 MB of
    # int8 weights (383 MB as float32), grows about 0.5 MB a frame of a decoder call (its
    # storage planned for the call: kokoro_ext.build.passes.memory), so 2048 frames (82 s
    # of audio) stay near 1.3 GB.  Longer chunks are halved by the page (tts.js).
    max_frames=2048,
)  # fmt: skip
