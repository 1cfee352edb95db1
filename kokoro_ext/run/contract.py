"""What the runtime expects of each compiled stage: its inputs and outputs, named and typed.

The host pipeline (kokoro_ext.run.pipeline) calls the stages by these names.  A build
records what its libraries take and return (``StageSignature`` in its manifest); loading
compares the two and refuses a build that disagrees, naming the stage and what differs,
rather than feeding a library arrays in an order it does not take.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kokoro_ext.run.manifest import REBUILD, Manifest, StageSignature

F32, I64 = "float32", "int64"
#: Target kinds whose devices have no 64-bit integers: their builds take and return int32
#: where the others have int64 (token ids, lengths).
INT32_KINDS = frozenset({"webgpu"})


@dataclass(frozen=True)
class Expected:
    """A stage's inputs and outputs as (name, dtype), in the order its ``main`` has them."""

    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]


#: The stages, in the order the pipeline runs them.
STAGES: Mapping[str, Expected] = {
    "text": Expected(
        inputs=(("input_ids", I64), ("lengths", I64), ("style", F32)),
        outputs=(("d", F32), ("duration", F32), ("t_en", F32)),
    ),
    "prosody": Expected(
        inputs=(("en", F32), ("lengths", I64), ("style", F32)),
        outputs=(("F0", F32), ("N", F32)),
    ),
    "source": Expected(
        inputs=(("F0", F32), ("lengths", I64), ("noise", F32)),
        outputs=(("spectrum", F32),),
    ),
    "decoder": Expected(
        inputs=(
            ("asr", F32),
            ("F0", F32),
            ("N", F32),
            ("lengths", I64),
            ("style", F32),
            ("spectrum", F32),
        ),
        outputs=(("audio", F32),),
    ),
}


def check_signature(stage: str, signature: StageSignature, integers: str = I64) -> None:
    """ValueError naming ``stage`` and the first of its inputs or outputs that differs
    from what the runtime expects (its integers of dtype ``integers``)."""
    expected = STAGES[stage]
    for kind, got, want in (
        ("inputs", signature.inputs, expected.inputs),
        ("outputs", signature.outputs, expected.outputs),
    ):
        names, want_names = tuple(t.name for t in got), tuple(n for n, _ in want)
        if names != want_names:
            raise ValueError(
                f"stage {stage!r}: {kind} are {names}, this runtime expects {want_names}; "
                f"{REBUILD}"
            )
        for tensor, (name, dtype) in zip(got, want):
            dtype = integers if dtype == I64 else dtype
            if tensor.dtype != dtype:
                raise ValueError(
                    f"stage {stage!r}: {kind[:-1]} {name!r} is {tensor.dtype}, this runtime "
                    f"expects {dtype}; {REBUILD}"
                )


def check(manifest: Manifest) -> None:
    """ValueError unless the build has exactly the expected stages, each with the expected
    signature."""
    if set(manifest.stages) != set(STAGES):
        raise ValueError(
            f"the build has stages {tuple(sorted(manifest.stages))}, this runtime expects "
            f"{tuple(STAGES)}; {REBUILD}"
        )
    integers = "int32" if manifest.target.get("kind") in INT32_KINDS else I64
    for name in STAGES:
        check_signature(name, manifest.stages[name].signature, integers)
