"""Other engines for the stages, each a StageProvider for kokoro_ext.run.pipeline (see bench/e2e.py).

Every engine runs the same four stage modules (kokoro_ext.build.stages) on the same host
pipeline (durations, alignment, noise), each stage called by the names of its inputs and
returning its outputs by name (kokoro_ext.run.runner.NamedStage), so they differ only in
what computes a stage: PyTorch eager, torch.compile (inductor), ONNX Runtime, or our TVM
build.  kokoro's own ``forward_with_tokens`` is the baseline and runs outside this
interface.
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from kokoro_ext.build.stages import STAGES
from kokoro_ext.run.pipeline import StageFn, StageProvider
from kokoro_ext.run.runner import NamedStage


def _as_numpy(out) -> list[np.ndarray]:
    return [o.cpu().numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


def torch_provider(
    model: nn.Module,
    compile: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> StageProvider:
    """Stage modules in PyTorch, eager or through ``torch.compile`` (one per stage).

    ``dtype=torch.float64`` runs copies of the stages and their floating inputs in
    float64 (kokoro_ext.tools.validate's exact reference); outputs come back in float64.
    ``device``: where they run (``cuda``: copies on the GPU, inputs copied there and
    outputs back, as a CUDA build's runner does).
    """
    modules = {name: spec.module(model).eval() for name, spec in STAGES.items()}
    if dtype != torch.float32 or device != "cpu":
        modules = {name: copy.deepcopy(m).to(dtype=dtype, device=device)
                   for name, m in modules.items()}  # fmt: skip
    if compile:
        # each length is a new static shape: allow a recompile for each one
        torch._dynamo.config.cache_size_limit = 64
        modules = {name: torch.compile(m, dynamic=False) for name, m in modules.items()}

    def provider(name: str) -> StageFn:
        def run(*args):
            tensors = [torch.from_numpy(np.asarray(a)).to(device) for a in args]
            tensors = [t.to(dtype) if t.is_floating_point() else t for t in tensors]
            with torch.no_grad():
                return _as_numpy(modules[name](*tensors))

        return NamedStage(run, STAGES[name].inputs, STAGES[name].outputs)

    return provider


def onnx_provider(model: nn.Module, directory: Path, threads: int) -> StageProvider:
    """Stage modules exported to ONNX with static shapes (one file per stage and length),
    run by ONNX Runtime."""
    import onnxruntime as ort

    from kokoro_ext.build.export.onnx import export_onnx

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions: dict[tuple[str, int], ort.InferenceSession] = {}
    directory.mkdir(parents=True, exist_ok=True)

    def session(name: str, length: int) -> ort.InferenceSession:
        spec = STAGES[name]
        if (name, length) not in sessions:
            path = directory / f"{name}-{length}.onnx"
            if not path.exists():
                export_onnx(
                    spec.module(model), spec.example(model, length), path, spec.inputs,
                    spec.outputs,
                )
            sessions[name, length] = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        return sessions[name, length]

    def provider(name: str) -> StageFn:
        spec = STAGES[name]

        def run(*args):
            inputs = {k: np.asarray(a) for k, a in zip(spec.inputs, args)}
            # one row at its own length: the stage's tokens or frames
            length = int(inputs["lengths"].max())
            return session(name, length).run(None, inputs)

        return NamedStage(run, spec.inputs, spec.outputs)

    return provider


class StageTimer:
    """Wraps a StageProvider and records the seconds spent in each stage."""

    def __init__(self, provider: StageProvider):
        self._provider = provider
        self.seconds: dict[str, list[float]] = defaultdict(list)

    def __call__(self, name: str) -> StageFn:
        run = self._provider(name)

        def timed(**inputs):
            start = time.perf_counter()
            out = run(**inputs)
            self.seconds[name].append(time.perf_counter() - start)
            return out

        return timed
