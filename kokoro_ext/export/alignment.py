"""The token-to-frame alignment from integer durations, over a static frame bucket.

kokoro builds it with ``repeat_interleave`` and index assignment, which need the total
frame count at trace time.  Here token n covers frames [start_n, end_n) with
end = cumsum(durations), compared against the frame index of a fixed-size bucket, so the
shape is static and frames past the total belong to no token (all-zero columns).
"""

from __future__ import annotations

import torch
from torch import Tensor


def alignment_matrix(durations: Tensor, frames: int) -> Tensor:
    """[..., N] integer durations -> [..., N, frames] float32 one-hot alignment.

    Raises ValueError if the durations add up to more than ``frames`` (pick a larger
    frame bucket) or are negative.
    """
    if (durations < 0).any():
        raise ValueError(f"durations must be >= 0, got {durations.tolist()}")
    total = int(durations.sum(dim=-1).max())
    if total > frames:
        raise ValueError(
            f"durations add up to {total} frames, more than the frame bucket of {frames}; "
            "use a larger frame bucket"
        )
    end = torch.cumsum(durations, dim=-1)
    start = end - durations
    frame = torch.arange(frames, device=durations.device)
    inside = (frame >= start[..., None]) & (frame < end[..., None])
    return inside.to(torch.float32)
