"""The token-to-frame alignment from integer durations, in numpy.

kokoro builds it with ``repeat_interleave`` and index assignment.  Here token n covers
frames [start_n, end_n) with end = cumsum(durations), compared against the frame index
0 .. ``frames`` - 1; ``frames`` may exceed the total (a row padded to the longest of a
batch), and frames past the total belong to no token (all-zero columns).
"""

from __future__ import annotations

import numpy as np


def _checked(durations: np.ndarray, frames: int) -> np.ndarray:
    """``durations`` as int64; ValueError if one is negative or they need more than ``frames``."""
    durations = np.asarray(durations, dtype=np.int64)
    if (durations < 0).any():
        raise ValueError(f"durations must be >= 0, got {durations.tolist()}")
    total = int(durations.sum(axis=-1).max(initial=0))
    if total > frames:
        raise ValueError(
            f"durations add up to {total} frames, more than the {frames} frames asked for"
        )
    return durations


def alignment_matrix(durations: np.ndarray, frames: int) -> np.ndarray:
    """[..., N] integer durations -> [..., N, frames] float32 one-hot alignment.

    Raises ValueError if the durations add up to more than ``frames`` or are negative.
    """
    durations = _checked(durations, frames)
    end = np.cumsum(durations, axis=-1)
    start = end - durations
    frame = np.arange(frames)
    inside = (frame >= start[..., None]) & (frame < end[..., None])
    return inside.astype(np.float32)


def align(values: np.ndarray, durations: np.ndarray, frames: int) -> np.ndarray:
    """``values @ alignment_matrix(durations, frames)`` for [C, N] values: each token's
    column repeated for its frames, zero past the total.

    The same numbers as the product (one term per output is nonzero), without the
    matmul: it reads each value once, and numpy's BLAS threads, which keep spinning for a
    while after a call, do not compete with the stages' thread pool.
    """
    durations = _checked(durations, frames)
    total = int(durations.sum())
    out = np.zeros((values.shape[0], frames), dtype=values.dtype)
    out[:, :total] = np.repeat(values, durations, axis=1)
    return out
