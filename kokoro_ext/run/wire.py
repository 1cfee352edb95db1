"""The browser builds' weights on the wire: large float32 arrays stored narrower, widened
to float32 by the page at load (kokoro_ext/web/static/kokoro.js, ``decodeWeights``).

``float16`` (what ``build --wire`` defaults to): the array rounded to float16, decoded
exactly.  ``int8``: each row (first axis) as ``round(x / scale)`` in [-127, 127],
``scale = max |row| / 127`` stored as float32 after the codes; decoded as the float32
product ``q * scale`` (exact in JavaScript too: an 8-bit integer times a 24-bit mantissa
fits a double, which rounds to the same float32).  It costs 0.03 word errors on the real
model, whose packed layouts' rows are not output channels (docs/browser.md).  An array
of fewer than ``MIN_ELEMENTS`` elements, or of one dimension (biases, norms), stays
float32: 0.7 MB of the real model's 383 MB, and the arrays a fixed error moves most.
An array of another dtype (the int8 codes of a wasm build's weights on an int8 grid,
``--weight-dtype auto``) is stored as it is, and so are their scales (one dimension).
CPU and CUDA builds store their arrays as they are.  Reading them back (``decode``, the
reference of the page's decoder) is kokoro_ext.run.weights's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from kokoro_ext.run.weights import WIRE_DTYPES, AlignedParts, WeightEntry, Wire, dequantize_int8

WireFormat = Literal["float32", "float16", "int8"]
FORMATS: tuple[str, ...] = ("float32", *WIRE_DTYPES)

#: arrays below this many elements stay float32 (biases, norms, small projections)
MIN_ELEMENTS = 4096


def wire_of(array: np.ndarray, fmt: WireFormat) -> str | None:
    """The wire dtype ``array`` is stored as in format ``fmt``; None: as it is."""
    if fmt == "float32" or array.dtype != np.float32:
        return None
    if array.ndim < 2 or array.size < MIN_ELEMENTS:
        return None
    return fmt


def quantize_int8(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float32 scale per row) of a float32 array, symmetric per first axis."""
    rows = np.asarray(array, np.float32).reshape(array.shape[0], -1)
    scales = (np.max(np.abs(rows), axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1))  # an all-zero row: codes 0
    codes = np.clip(np.rint(rows / safe[:, None]), -127, 127).astype(np.int8)
    return codes.reshape(array.shape), scales


def round_trip(array: np.ndarray, fmt: WireFormat) -> np.ndarray:
    """``array`` as the page gets it after the wire format ``fmt``."""
    match wire_of(array, fmt):
        case None:
            return array
        case "float16":
            return array.astype(np.float16).astype(np.float32)
        case _:
            return dequantize_int8(*quantize_int8(array))


def write_wire_weights(
    path: str | Path, arrays: Sequence[np.ndarray], fmt: WireFormat
) -> list[WeightEntry]:
    """Write ``arrays`` to ``path`` in wire format ``fmt``, each part at an ``ALIGN``-byte
    offset; their entries (what the library takes, and what is on the wire)."""
    entries = []
    with open(path, "wb") as f:
        put = AlignedParts(f).put
        for array in arrays:
            array = np.ascontiguousarray(array)
            shape, dtype = tuple(array.shape), str(array.dtype)
            match wire_of(array, fmt):
                case None:
                    entries.append(WeightEntry(shape, dtype, put(array)))
                case "float16":
                    at = put(array.astype(np.float16))
                    entries.append(WeightEntry(shape, dtype, at, Wire("float16")))
                case _:
                    codes, scales = quantize_int8(array)
                    at = put(codes)
                    entries.append(WeightEntry(shape, dtype, at, Wire("int8", put(scales))))
    return entries


__all__ = [
    "FORMATS",
    "MIN_ELEMENTS",
    "WireFormat",
    "quantize_int8",
    "round_trip",
    "wire_of",
    "write_wire_weights",
]
