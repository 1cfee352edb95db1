"""A stage's weights on disk: one flat file of aligned arrays, memory-mapped at load.

The build stores the weights once, apart from the compiled code (kokoro_ext.build.compiler),
as ``<stage>.weights``: the arrays the library's ``main`` takes after its inputs, in
order, each starting at a multiple of ``ALIGN`` bytes.  They are what the library's
``main_transform_params`` (LiftTransformParams: transposes, weight norm, Winograd
filters) makes of the checkpoint's parameters; the build runs that transform once, so a
load computes nothing.  The layout (shape, dtype, offset of each array) is recorded in
the manifest as ``WeightEntry`` records.  Loading maps the file copy-on-write: pages are
read from the file when a stage first touches them and shared with the page cache (an
array a call never reads, such as the Winograd filter of a layer that runs direct at
short lengths, never becomes resident), and the arrays reach TVM through DLPack without
a copy.

A browser build stores its large float32 arrays in a smaller wire format (``Wire``:
kokoro_ext.run.wire), which the page widens to float32 at load; ``load_weights`` decodes
them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO
from pathlib import Path

import numpy as np

#: TVM's allocation alignment (kAllocAlignment): what its kernels may assume of a tensor.
ALIGN = 64


@dataclass(frozen=True)
class Wire:
    """How an array is stored that is widened to its entry's dtype at load."""

    dtype: str  # "float16", or "int8" with one float32 scale per row (first axis)
    scales: int | None = None  # int8: byte offset of the float32 scales

    def to_json(self) -> dict:
        return {"dtype": self.dtype} | ({} if self.scales is None else {"scales": self.scales})

    @classmethod
    def from_json(cls, value: dict) -> Wire:
        if not isinstance(value, dict):
            raise ValueError(f"a wire format is an object, not {value!r}")
        scales = value.get("scales")
        return cls(str(value["dtype"]), None if scales is None else int(scales))


@dataclass(frozen=True)
class WeightEntry:
    """Where one array lies in a weights file."""

    shape: tuple[int, ...]
    dtype: str  # what the library takes
    offset: int  # bytes from the start of the file
    wire: Wire | None = None  # None: stored as ``dtype``

    @property
    def nbytes(self) -> int:
        """Bytes of the array as the library takes it."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> list:
        plain = [list(self.shape), self.dtype, self.offset]
        return plain if self.wire is None else [*plain, self.wire.to_json()]

    @classmethod
    def from_json(cls, value: Sequence) -> WeightEntry:
        shape, dtype, offset, *wire = value
        if len(wire) > 1:
            raise ValueError(f"a weight entry has 3 or 4 fields, not {len(value)}")
        return cls(
            tuple(int(d) for d in shape), str(dtype), int(offset),
            Wire.from_json(wire[0]) if wire else None,
        )  # fmt: skip


class AlignedParts:
    """An open file written part by part, each part at an ``ALIGN``-byte offset."""

    def __init__(self, file: BinaryIO):
        self.file = file
        self.offset = 0

    def put(self, part: np.ndarray) -> int:
        """Write ``part`` (C-contiguous) at the next aligned offset; that offset."""
        pad = -self.offset % ALIGN
        self.file.write(b"\0" * pad)
        start = self.offset + pad
        self.file.write(part.data)  # the buffer itself: no copy of a 100 MB array
        self.offset = start + part.nbytes
        return start


def write_weights(path: str | Path, arrays: Sequence[np.ndarray]) -> list[WeightEntry]:
    """Write ``arrays`` to ``path``, each at an ``ALIGN``-byte offset; their entries."""
    entries = []
    with open(path, "wb") as f:
        parts = AlignedParts(f)
        for array in arrays:
            array = np.ascontiguousarray(array)
            entries.append(WeightEntry(tuple(array.shape), str(array.dtype), parts.put(array)))
    return entries


def load_weights(path: str | Path, entries: Sequence[WeightEntry]) -> list[np.ndarray]:
    """The arrays of a weights file as copy-on-write memory maps, those of a wire format
    decoded (ValueError if the file is shorter than its entries say)."""
    from kokoro_ext.run import wire  # which imports this module's records

    path = Path(path)
    size = path.stat().st_size
    end = max((wire.stored_end(e) for e in entries), default=0)
    if end > size:
        raise ValueError(
            f"{path} holds {size} bytes but its manifest entries need {end}: the file is "
            "truncated or from another build; rebuild the artifacts"
        )
    if size == 0:
        return [np.zeros(e.shape, e.dtype) for e in entries]
    data = np.memmap(path, dtype=np.uint8, mode="c")
    return [
        data[e.offset : e.offset + e.nbytes].view(e.dtype).reshape(e.shape)
        if e.wire is None else wire.decode(data, e)
        for e in entries
    ]  # fmt: skip


def entries_from_json(values: Sequence) -> list[WeightEntry]:
    return [WeightEntry.from_json(v) for v in values]


__all__ = [
    "ALIGN",
    "AlignedParts",
    "WeightEntry",
    "Wire",
    "entries_from_json",
    "load_weights",
    "write_weights",
]
