"""torch.export -> Relax (our converters) -> tvm.compile, for one stage or module.

A build compiles each stage once with its batch and time axes symbolic and its weights
as parameters (``compile_stage``): the library holds code only, ``main`` (the inputs,
then the weights in the layout it computes with) and ``main_transform_params``
(LiftTransformParams: the checkpoint's parameters -> that layout: transposes, weight
norm, Winograd filters).  The build runs the exported library's transform once
(``transform_weights``) and stores its outputs apart (kokoro_ext.run.weights), so the runtime maps them and
passes them to ``main`` as they are; ``build --weights-only`` runs a built library's
transform on another checkpoint.  A stage for another architecture (a cross build) cannot
run here, so its transform is compiled a second time, alone, for this machine
(``CompiledStage.transform``); the library keeps its own for ``--weights-only`` there.
``compile_module`` compiles a module with its weights bound as constants, for tests and
comparisons.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import tvm
from torch import Tensor, nn
from tvm.relax.frontend import detach_params
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.build.backend import BuildTarget, Choices, CpuTarget, this_machine
from kokoro_ext.build.backend.cpu.pipeline import PipelineOptions
from kokoro_ext.build.frontend import LstmBackend, custom_convert_map
from kokoro_ext.build.precision import LayerProducts, int8_weights
from kokoro_ext.build.stages import StageSpec
from kokoro_ext.run.manifest import StageSignature
from kokoro_ext.run.runner import TRANSFORM_PARAMS, load_vm, to_tensor


@dataclass
class CompiledModule:
    """A compiled stage with what it took to build it."""

    executable: tvm.runtime.Executable
    ir_lines: int  # lines of the imported Relax module (TVMScript)
    seconds: dict[str, float] = field(default_factory=dict)  # export / import / compile


@dataclass(frozen=True)
class Parameter:
    """A checkpoint parameter a stage library's weight transform takes."""

    name: str  # the stage module's parameter name
    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, name: str, array: np.ndarray) -> Parameter:
        return cls(name, tuple(int(d) for d in array.shape), str(array.dtype))

    def to_json(self) -> list:
        return [self.name, list(self.shape), self.dtype]

    @classmethod
    def from_json(cls, value: Sequence) -> Parameter:
        name, shape, dtype = value
        return cls(str(name), tuple(int(d) for d in shape), str(dtype))


@dataclass
class CompiledStage(CompiledModule):
    """A stage compiled with its weights as parameters, and the checkpoint's parameters its
    weight transform takes (``transform_weights`` makes what ``main`` takes of them)."""

    weights: list[np.ndarray] = field(default_factory=list)  # the transform's inputs
    parameters: list[Parameter] = field(default_factory=list)  # their names, in that order
    signature: StageSignature | None = None  # what main takes and returns, by name
    #: for a cross build: the weight transform alone, compiled for this machine
    transform: tvm.runtime.Executable | None = None


def compile_module(
    module: nn.Module,
    example: Sequence[Tensor],
    target: BuildTarget = CpuTarget("llvm", "TVM's generic llvm", {"kind": "llvm"}),
    lstm_backend: LstmBackend = "native",
    native_dense: bool = True,
    dynamic_shapes: tuple | None = None,
) -> CompiledModule:
    """Export ``module`` on ``example``, import it into Relax and compile it for ``target``
    (default: TVM's llvm, no CPU named), its weights bound as constants.

    ``dynamic_shapes`` as torch.export takes it (None: static shapes); ``lstm_backend``
    chooses the LSTM's lowering (kokoro_ext.build.frontend), ``native_dense`` whether the
    pipeline dispatches the GEMM-shaped ops to the native kernels
    (kokoro_ext.build.backend.cpu.pipeline).
    """
    mod, ir_lines, seconds, _ = _import(module, example, dynamic_shapes, lstm_backend, False)
    executable = _compile(target, mod, PipelineOptions(native_dense=native_dense), seconds)
    return CompiledModule(executable, ir_lines, seconds)


def compile_stage(
    spec: StageSpec,
    model: nn.Module,
    target: BuildTarget,
    choices: Choices | None = None,
    products: LayerProducts = LayerProducts(),
) -> CompiledStage:
    """Compile ``spec``'s stage of ``model`` for ``target`` once for every batch and length
    (its symbolic axes), with the weights as parameters: the module's, in the order
    ``parameters`` records, for the library's transform (``transform_weights``, on the
    exported library: running a VM on the executable before its export would add a memory
    scope entry per constant to what it saves, and a warning per entry to every load).
    ``choices``: the build's options as the target takes them (None: its defaults);
    ``products``: what its layers on int8 weights multiply in
    (kokoro_ext.build.precision)."""
    choices = choices or target.choose()
    module = spec.module(model)
    example = spec.batched_example(model, 16)
    dynamic = spec.dynamic(model)
    mod, ir_lines, seconds, program = _import(module, example, dynamic, choices.lstm_backend, True)
    names = [name for name, _ in program.named_parameters()]
    # the weight parameters' Relax names, in the checkpoint's order
    relax_names = [v.name for v in mod["main"].params[-len(names):]] if names else []
    mod, params = detach_params(mod)
    weights = [w.numpy() for w in params["main"]]
    chosen = int8_weights(zip(names, weights, strict=True), choices.weight_dtype)
    int8 = frozenset(r for n, r in zip(names, relax_names) if n in chosen)
    options = PipelineOptions(
        native_dense=choices.dense == "native",
        int8_weights=int8,
        products=products,
        polyphase=target.polyphase,  # the GPU pipeline's weight transform
    )
    executable = _compile(target, target.name_stage(mod, spec.name), options, seconds)
    target.check(executable, spec.name)
    # the weight transform runs here: where the libraries do not, compiled for here
    transform = None
    if target.transform_apart and names:
        here = {}
        host_options = dataclasses.replace(options, transform_only=True)
        transform = _compile(this_machine(), mod, host_options, here)
        seconds["compile_transform"] = here["compile"]
    parameters = [Parameter.of(n, w) for n, w in zip(names, weights, strict=True)]
    signature = target.signature(spec.signature(program, dynamic))
    return CompiledStage(
        executable, ir_lines, seconds, weights, parameters, signature, transform
    )


def compile_host_transform(
    spec: StageSpec, model: nn.Module, target: BuildTarget, native_storage: bool = False
) -> tuple[tvm.runtime.Executable | None, list[Parameter]]:
    """The weight transform of ``spec``'s stage in a ``target`` build, compiled alone for
    this machine as ``compile_stage`` compiles ``CompiledStage.transform`` (the same
    import and pipeline options, ``main`` left out), and the checkpoint's parameters it
    takes, in order; (None, []) for a stage without weights.  A GPU build's libraries do
    not keep their transform (--weights-only cannot run on them): bench/gpu.py carries
    this one to make a build's weights where the build runs.  Without ``native_storage``
    its storage comes from the VM's allocator, not the native kernels' pool: it then
    needs TVM's runtime library alone."""
    if not target.polyphase:
        raise ValueError(f"{target.name} is not a GPU target: its libraries keep their transform")
    choices = target.choose()
    module = spec.module(model)
    example = spec.batched_example(model, 16)
    mod, _, seconds, program = _import(
        module, example, spec.dynamic(model), choices.lstm_backend, True
    )
    names = [name for name, _ in program.named_parameters()]
    if not names:
        return None, []
    mod, params = detach_params(mod)
    weights = [w.numpy() for w in params["main"]]
    # compile_stage's options for a GPU target (float32 weights: nothing is int8)
    options = PipelineOptions(
        native_dense=choices.dense == "native",
        polyphase=True,
        transform_only=True,
        native_storage=native_storage,
    )
    executable = _compile(this_machine(), mod, options, seconds)
    return executable, [Parameter.of(n, w) for n, w in zip(names, weights, strict=True)]


def transform_weights(library: Any, parameters: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A stage library's ``main_transform_params`` on the checkpoint's ``parameters``
    (in the library's order): the weights its ``main`` takes after the inputs.

    ``library``: the exported library, loaded (kokoro_ext.run.runner.load_library), or a
    cross build's ``CompiledStage.transform``.
    """
    if not parameters:
        return []
    vm = load_vm(library)  # the transform calls native kernels (kokoro_ext.winograd_filter)
    outputs = vm[TRANSFORM_PARAMS]([to_tensor(p) for p in parameters])
    return [np.from_dlpack(w) for w in outputs]  # views of the VM's buffers: no second copy


def _import(module, example, dynamic_shapes, lstm_backend, keep_weights):
    seconds = {}
    start = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(
            module.eval(), tuple(example), dynamic_shapes=dynamic_shapes
        )
    seconds["export"] = time.perf_counter() - start
    start = time.perf_counter()
    converters = custom_convert_map(lstm_backend)
    mod = from_exported_program(
        program, custom_convert_map=converters, keep_params_as_input=keep_weights
    )
    seconds["import"] = time.perf_counter() - start
    return mod, len(mod.script().splitlines()), seconds, program


def _compile(target: BuildTarget, mod, options: PipelineOptions, seconds):
    """``mod`` compiled by ``target`` (its pipeline and codegen), timed into ``seconds``."""
    start = time.perf_counter()
    executable = target.compile(mod, options)
    seconds["compile"] = time.perf_counter() - start
    return executable
