"""What every kind of target tells the build: the base class of kokoro_ext.build.backend's
targets, and the build's choices checked against it (``Choices``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import tvm

from kokoro_ext.build.precision import LayerProducts, Products
from kokoro_ext.run.manifest import StageEntry, StageSignature


#: The build options a target decides about: the flag each comes from.
FLAGS = {
    "lstm_backend": "--lstm-backend",
    "dense": "--dense",
    "weight_dtype": "--weight-dtype",
    "precision": "--precision",
    "wire": "--wire",
}


@dataclass(frozen=True)
class PipelineOptions:
    """What a build may choose about the CPU pipeline (kokoro_ext.build.backend.cpu.pipeline):
    what the build's choices make of it, for every target's ``pipeline`` to take."""

    #: Whether the GEMM-shaped ops go to the native kernels or keep TVM's lowering.
    native_dense: bool = True
    #: The weight parameters (Relax names) stored as int8 (kokoro_ext.build.precision).
    int8_weights: frozenset[str] = frozenset()
    #: What the layers on int8 weights multiply in (kokoro_ext.build.precision).
    products: LayerProducts = LayerProducts()
    #: Compile ``main_transform_params`` alone, without ``main``.
    transform_only: bool = False
    #: Whether the storage comes from the native pool (``pooled_storage``) or the VM's
    #: own allocator.
    native_storage: bool = True
    #: Whether tensors of bounded dimensions alone get one storage planned at the bounds
    #: (natively a buffer's untouched pages cost nothing) or every storage is sized by
    #: the call (kokoro_ext.build.passes.memory.call_sized_storage: a WebAssembly memory).
    bounded_storage: bool = True
    #: The most bindings apart an elementwise producer and its first use may be fused
    #: (kokoro_ext.build.passes.fusion.near_fusion: a fusion across a longer stretch
    #: keeps the producer's inputs alive through it); None: FuseOps as it is.
    fusion_reach: int | None = None
    #: Rewrite strided transposed convolutions by phases first, as the GPU pipeline does
    #: (kokoro_ext.build.passes.polyphase): for a GPU build's weight transform, which this
    #: pipeline compiles for the build machine and which must lift what the GPU's lifts.
    polyphase: bool = False


@dataclass(frozen=True)
class Choices:
    """What a build compiles and stores with: its options as its target takes them, each
    left out (None) filled with the target's default (``BuildTarget.choose``)."""

    lstm_backend: str  # the LSTM's lowering (kokoro_ext.build.frontend.lstm)
    dense: str  # "native": the GEMM-shaped ops on the native kernels; "tvm": TVM's own
    weight_dtype: str  # which weights are stored as int8 (kokoro_ext.build.precision)
    precision: str  # what layers on int8 weights multiply in, as asked (auto, ...)
    #: a browser build's weights on the wire (kokoro_ext.run.wire); None: as they are
    wire: str | None


@dataclass(frozen=True)
class BuildTarget:
    """A target a build can be for: its TVM target and everything the build does
    differently for it.  One subclass per kind; a subclass registered with
    kokoro_ext.build.backend.register is found by ``--target``."""

    name: str  # the --target text that named it (a word, a CLI string, a JSON dict)
    what: str  # for messages and --help
    target: Mapping[str, Any]  # the TVM target, as JSON
    #: what the manifest tells the loader of the device it needs
    requires: Mapping[str, Any] = field(default_factory=dict)
    #: the most frames a call takes (the manifest's limit), where the device's memory
    #: holds fewer than kokoro_ext.build.stages.MAX_FRAMES; None: that
    max_frames: int | None = None

    #: The suffix of the stage libraries.
    library_suffix: ClassVar[str] = ".so"
    #: Whether the kernels are CUDA's (bench/gpu.py bundles those builds).
    is_cuda: ClassVar[bool] = False
    #: Per option of ``FLAGS``, the values this kind takes, its default first; () for an
    #: option it has no use for (given, it is refused).
    options: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: Why it takes only those, for the refusal's message.
    limited_because: ClassVar[str] = ""

    # -- the --target it answers -------------------------------------------------------

    @classmethod
    def named(cls) -> Mapping[str, BuildTarget]:
        """The targets of this kind that a --target word names (presets)."""
        return {}

    @classmethod
    def claim(cls, target: Mapping[str, Any], text: str, host=None) -> BuildTarget | None:
        """This kind's target for the TVM target ``target`` (``text`` named it; ``host``:
        the machine a CPU target without ``mcpu`` means, None for this one), or None when
        it is another kind's; ValueError for one of this kind it cannot build."""
        return None

    # -- the build's options -----------------------------------------------------------

    def choose(self, **given: str | None) -> Choices:
        """The build's options (``FLAGS``' names; None: not given) as this target takes
        them; ValueError naming the option and the target for one it cannot honour."""
        if unknown := set(given) - set(FLAGS):
            raise TypeError(f"no build option {', '.join(sorted(unknown))}")
        chosen = {}
        for option, flag in FLAGS.items():
            value, allowed = given.get(option), self.options.get(option, ())
            if value is not None and value not in allowed:
                takes = (
                    f"takes {flag} {' or '.join(allowed)}" if allowed else f"has no use for {flag}"
                )
                why = f" ({self.limited_because})" if self.limited_because else ""
                raise ValueError(
                    f"{flag} {value}: a build for {self.name} {takes}{why}; leave it out "
                    "for the target's default"
                )
            chosen[option] = value if value is not None else (allowed[0] if allowed else None)
        return Choices(**chosen)

    def products(self, choices: Choices) -> Products:
        """What the convolutions multiply in (kokoro_ext.build.precision): float32 unless
        a kind says otherwise."""
        return "fp32"

    def layer_products(self, products: Products, stage: str) -> LayerProducts:
        """``products`` per layer of ``stage``."""
        return LayerProducts()

    # -- compiling ---------------------------------------------------------------------

    #: Whether the stage libraries keep no weight transform that runs on the build
    #: machine, so that it is compiled a second time, alone, for it.
    transform_apart: ClassVar[bool] = False
    #: Whether the strided transposed convolutions are rewritten by phases (the GPU
    #: pipeline does; the weight transform compiled for the build machine must follow).
    polyphase: ClassVar[bool] = False

    def pipeline(self, options: PipelineOptions) -> tvm.transform.Pass:
        """The Relax pipeline of the stages (``tvm.compile``'s ``relax_pipeline``), given
        the CPU pipeline's options the build's choices make."""
        raise NotImplementedError

    def compile(self, mod: tvm.IRModule, options: PipelineOptions) -> tvm.runtime.Executable:
        """``mod`` through ``pipeline`` and TVM's codegen for this target."""
        target = tvm.target.Target(dict(self.target))
        return tvm.compile(mod, target=target, relax_pipeline=self.pipeline(options))

    def check(self, executable: tvm.runtime.Executable, stage: str) -> None:
        """ValueError naming what of ``executable``'s kernels the device would refuse."""

    def signature(self, signature: StageSignature) -> StageSignature:
        """The signature of a stage's library from that of its module."""
        return signature

    # -- linking and shipping ----------------------------------------------------------

    def prepare(self) -> None:
        """ValueError where this target's toolchain is missing: before any compiling."""
        self.fcompile()

    def fcompile(self) -> Callable | None:
        """``export_library``'s ``fcompile`` for the stage libraries (None: TVM's)."""
        return None

    def fpack_imports(self) -> Callable | None:
        """``export_library``'s ``fpack_imports`` (None: TVM's)."""
        return None

    def name_stage(self, mod: tvm.IRModule, stage: str) -> tvm.IRModule:
        """``mod``, the stage ``stage``, as its library is compiled (``link_stages`` may
        need its symbols apart from the other stages')."""
        return mod

    def link_stages(self, directory: Path, stages: Mapping[str, StageEntry]) -> dict[str, StageEntry]:
        """The stages' entries once their libraries in ``directory`` are linked as the
        build ships them: each library on its own unless a kind links them."""
        return dict(stages)

    def add_files(self, directory: Path) -> None:
        """Write what loads the build beside its stages in ``directory``."""

    def add_libraries(self, directory: Path) -> Mapping[str, Any]:
        """Write the libraries of its own the stages call beside them in ``directory``;
        the manifest's ``requires`` (with what it says of them)."""
        return dict(self.requires)

    def cpu_features(self) -> tuple[str, ...]:
        """The instruction features the host running the stages needs (the manifest's
        ``cpu_features``)."""
        return ()

    def refuse_weights_only(self, out: Path) -> None:
        """ValueError if ``--weights-only`` cannot run the weight transform of the stage
        libraries in ``out``, a build for this target: where it was compiled apart."""
        if self.transform_apart:
            raise ValueError(
                f"--weights-only runs the weight transform of the stage libraries in {out}; "
                f"a {self.name} build ships none (its transform ran on the build machine "
                "at build time): build from scratch with the new --weights"
            )

    def codegen(self) -> contextlib.AbstractContextManager:
        """What TVM's codegen for this target runs in."""
        return contextlib.nullcontext()
