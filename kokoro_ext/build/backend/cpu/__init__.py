"""CPUs (TVM's llvm kind): this host, another x86-64 CPU, or another architecture (a
cross build), the native kernels (cpp/) compiled for it.  The ARM boards and servers
``--target`` names (rpi5, graviton3, ...) are data: kokoro_ext.build.target.PRESETS."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import tvm
from tvm.support.cc import cross_compiler

from kokoro_ext.build.backend.base import BuildTarget, Choices
from kokoro_ext.build.backend.cpu.pipeline import PipelineOptions, get_default_pipeline
from kokoro_ext.build.frontend import LSTM_BACKENDS
from kokoro_ext.build.precision import (
    PRECISIONS,
    WEIGHT_DTYPES,
    LayerProducts,
    Products,
    layer_products,
    products,
)
from kokoro_ext.build.target import (
    is_cross,
    linker,
    parse_target,
    target_features,
    target_instruction_features,
)


def checked_linker(cc: str) -> str:
    """``cc`` if it is on PATH, else ValueError saying where it comes from."""
    if shutil.which(cc) is None:
        raise ValueError(
            f"{cc} is not on PATH: a cross build links its libraries with it "
            f"(Debian/Ubuntu: apt-get install gcc-{cc.removesuffix('-gcc')})"
        )
    return cc


@dataclass(frozen=True)
class CpuTarget(BuildTarget):
    """A CPU: the CPU pipeline (kokoro_ext.build.backend.cpu.pipeline) with the native
    kernels, float32 or int8 weights, products as precise as the CPU multiplies fast."""

    options: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "lstm_backend": LSTM_BACKENDS,
        "dense": ("native", "tvm"),
        "weight_dtype": WEIGHT_DTYPES,
        "precision": PRECISIONS,
    }

    @classmethod
    def claim(cls, target: Mapping[str, Any], text: str, host=None) -> CpuTarget | None:
        if target.get("kind") != "llvm":
            return None
        parsed = parse_target(dict(target), host)
        return cls(name=text, what=f"the CPU {parsed['mcpu']}", target=parsed)

    @property
    def cross(self) -> bool:
        """Whether the stages are for another architecture than this machine's."""
        return is_cross(dict(self.target))

    @property
    def transform_apart(self) -> bool:  # type: ignore[override]
        # a cross build's libraries do not run here: its transform is compiled for here
        return self.cross

    def features(self) -> frozenset[str]:
        return target_features(dict(self.target))

    def products(self, choices: Choices) -> Products:
        return products(choices.precision, self.features(), choices.weight_dtype != "float32")

    def layer_products(self, chosen: Products, stage: str) -> LayerProducts:
        return layer_products(chosen, self.features(), stage)

    def pipeline(self, options: PipelineOptions) -> tvm.transform.Pass:
        return get_default_pipeline(tvm.target.Target(dict(self.target)), options)

    def prepare(self) -> None:
        if (cc := linker(dict(self.target))) is not None:
            checked_linker(cc)

    def fcompile(self) -> Callable | None:
        # another architecture's: that triple's GCC links it
        cc = linker(dict(self.target))
        return None if cc is None else cross_compiler(checked_linker(cc))

    def cpu_features(self) -> tuple[str, ...]:
        return tuple(sorted(target_instruction_features(dict(self.target))))

    def refuse_weights_only(self, out: Path) -> None:
        if self.cross:
            raise ValueError(
                f"--weights-only runs the weight transform of the stage libraries in {out}, "
                f"which are for {self.target.get('mtriple')} and do not run here: run it on "
                "such a machine, or build from scratch with the new --weights"
            )


def this_machine() -> CpuTarget:
    """This machine as a target: what a build's weight transform is compiled for where
    its stage libraries do not run here (``BuildTarget.transform_apart``)."""
    return CpuTarget(name="llvm", what="this machine", target=parse_target("llvm"))
