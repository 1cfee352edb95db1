"""GPUs: TVM's GPU kernels through the GPU pipeline (kokoro_ext.build.backend.gpu.pipeline),
the LSTM as GPU kernels (kokoro_ext.build.kernels.lstm_gpu), float32 weights.  The weight
transform still runs on the build machine, compiled for it; the libraries keep none.
The kinds: WebGPU (kokoro_ext.build.backend.browser) and CUDA
(kokoro_ext.build.backend.cuda)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import tvm

from kokoro_ext.build.backend.base import BuildTarget
from kokoro_ext.build.backend.cpu.pipeline import PipelineOptions
from kokoro_ext.build.backend.gpu.pipeline import GpuPipelineOptions, get_gpu_pipeline


@dataclass(frozen=True)
class GpuTarget(BuildTarget):
    """A GPU: what a build for one differs in from a CPU's."""

    #: what it takes of the GPU pipeline
    gpu_pipeline: GpuPipelineOptions = GpuPipelineOptions()

    options: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "lstm_backend": ("gpu",),
        "dense": ("tvm",),
        "weight_dtype": ("float32",),
        "precision": ("auto", "fp32"),
    }
    limited_because: ClassVar[str] = (
        "its kernels are TVM's, in float32, the LSTM's too: the native kernels are CPU code"
    )
    transform_apart: ClassVar[bool] = True
    polyphase: ClassVar[bool] = True

    def pipeline(self, options: PipelineOptions) -> tvm.transform.Pass:
        return get_gpu_pipeline(tvm.target.Target(dict(self.target)), self.gpu_pipeline)

    def compile(self, mod: tvm.IRModule, options: PipelineOptions) -> tvm.runtime.Executable:
        # under the target: TVM's GPU codegen asks for it
        target = tvm.target.Target(dict(self.target))
        with self.codegen(), target:
            return tvm.compile(mod, target=target, relax_pipeline=self.pipeline(options))
