"""A small Manifest made by hand, for tests that need one without a build."""

from __future__ import annotations

import dataclasses

from kokoro_ext.run.geometry import Geometry
from kokoro_ext.run.manifest import (
    Limits,
    Manifest,
    Source,
    StageEntry,
    StageSignature,
    TensorSpec,
    WeightsFile,
)
from kokoro_ext.run.weights import WeightEntry


def stage_entry(name: str = "decoder", weights_sha256: str = "1" * 64) -> StageEntry:
    return StageEntry(
        file=f"{name}.so",
        sha256="0" * 64,
        weights=WeightsFile(
            f"{name}.weights", weights_sha256, 128, (WeightEntry((4, 8), "float32", 0),)
        ),
        parameters=(TensorSpec("decoder.w", "float32", (8, 4)),),
        signature=StageSignature(
            inputs=(TensorSpec("asr", "float32", ("batch", 512, "frames")),),
            outputs=(TensorSpec("audio", "float32", ("batch", "600*frames")),),
            axes={"batch": (1, 16), "frames": (2, None)},
        ),
        ir_lines=10,
        seconds={"compile": 1.5},
    )


def example_manifest(**changes) -> Manifest:
    manifest = Manifest(
        kokoro_ext="0.1.0",
        tvm="0.27.0",
        patches={"0001-a.patch": "already applied"},
        target={"kind": "llvm", "mcpu": "znver4"},
        cpu_features=("avx2", "fma"),
        lstm_backend="native",
        dense="native",
        weight_dtype="auto",
        precision="fp32",
        limits=Limits(tokens=512, frames=8192),
        geometry=Geometry(600, 120, 9),
        config_sha256="2" * 64,
        weights=Source(path="/w/kokoro.onnx", sha256="3" * 64),
        voice=Source(path="/w/af_heart.bin", sha256="4" * 64, name="af_heart"),
        voice_sha256="5" * 64,
        stages={"decoder": stage_entry()},
        build_seconds=51.4,
    )
    return dataclasses.replace(manifest, **changes)
