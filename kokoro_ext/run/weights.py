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

A browser build stores its large float32 arrays in a smaller wire format (``Wire``,
written by kokoro_ext.run.wire), which the page widens to float32 at load;
``load_weights`` decodes them the same way (``decode``, the reference of the page's
decoder).  The reading lives here and the writing there, so that wire imports this
module and not the other way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO
from pathlib import Path

import numpy as np

#: TVM's allocation alignment (kAllocAlignment): what its kernels may assume of a tensor.
ALIGN = 64
#: The dtypes an array is stored as on the wire (``Wire.dtype``).
WIRE_DTYPES: tuple[str, ...] = ("float16", "int8")


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
    path = Path(path)
    size = path.stat().st_size
    end = max((stored_end(e) for e in entries), default=0)
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
        if e.wire is None else decode(data, e)
        for e in entries
    ]  # fmt: skip


def dequantize_int8(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The float32 array of int8 ``codes`` and their row ``scales``: q * scale in float32."""
    rows = codes.reshape(codes.shape[0], -1).astype(np.float32)
    return (rows * scales.astype(np.float32)[:, None]).reshape(codes.shape)


def stored_end(entry: WeightEntry) -> int:
    """The byte after the last one ``entry`` occupies in its file."""
    count = int(np.prod(entry.shape, dtype=np.int64))
    match entry.wire:
        case None:
            return entry.offset + entry.nbytes
        case Wire("float16"):
            return entry.offset + 2 * count
        case Wire("int8", scales) if scales is not None:
            return max(entry.offset + count, scales + 4 * entry.shape[0])
    raise ValueError(f"a weight stored as {entry.wire}: not a wire format of {WIRE_DTYPES}")


def decode(data: np.ndarray, entry: WeightEntry) -> np.ndarray:
    """The float32 array of ``entry`` from the bytes ``data`` of its file (the reference
    of the page's decoder)."""
    count = int(np.prod(entry.shape, dtype=np.int64))
    match entry.wire:
        case Wire("float16"):
            half = data[entry.offset : entry.offset + 2 * count].view(np.float16)
            return half.astype(np.float32).reshape(entry.shape)
        case Wire("int8", scales) if scales is not None:
            codes = data[entry.offset : entry.offset + count].view(np.int8).reshape(entry.shape)
            rows = data[scales : scales + 4 * entry.shape[0]].view(np.float32)
            return dequantize_int8(codes, rows)
    raise ValueError(f"a weight stored as {entry.wire}: not a wire format of {WIRE_DTYPES}")


def entries_from_json(values: Sequence) -> list[WeightEntry]:
    return [WeightEntry.from_json(v) for v in values]


__all__ = [
    "ALIGN",
    "WIRE_DTYPES",
    "AlignedParts",
    "WeightEntry",
    "Wire",
    "decode",
    "dequantize_int8",
    "entries_from_json",
    "load_weights",
    "stored_end",
    "write_weights",
]
