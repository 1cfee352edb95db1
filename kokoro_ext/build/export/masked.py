"""Length-aware versions of kokoro's AdaIN residual blocks, for a padded frame bucket.

A bucket is longer than the real input.  Unchanged, the blocks would let the padding in
through the InstanceNorm statistics (taken over the whole time axis) and through the
convolutions at the boundary.  Here the statistics are taken over the valid frames only
and the padding is zeroed before every convolution, which is what the unpadded model's
zero padding shows a convolution, so the valid frames come out as in the unpadded model.

The functions take kokoro's own modules (``AdaIN1d``, ``AdainResBlk1d``) and use their
weights; ``mask`` is [B, 1, T] float, 1 on valid frames.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def frame_mask(lengths: Tensor, frames: int) -> Tensor:
    """[B] valid lengths -> [B, 1, frames] float mask."""
    index = torch.arange(frames, device=lengths.device)
    return (index[None, :] < lengths[:, None]).to(torch.float32)[:, None, :]


def masked_instance_norm(
    norm: nn.InstanceNorm1d, x: Tensor, mask: Tensor, gain: Tensor | None = None,
    shift: Tensor | None = None,
) -> Tensor:
    """``gain * norm(x) + shift`` with mean and variance taken over the valid frames only.

    Written as ``x * a + b`` with per-channel a and b, not as ``(x - mean) * a + ...``:
    the centred x is then used only inside the variance's sum, where the compiler fuses it,
    and is never written out (a shared ``x - mean`` was a tensor of x's size, written by
    one kernel and read by two, at every AdaIN of the generator).
    """
    count = mask.sum(dim=-1, keepdim=True)
    mean = (x * mask).sum(dim=-1, keepdim=True) / count
    var = (((x - mean) * mask) ** 2).sum(dim=-1, keepdim=True) / count
    a = torch.rsqrt(var + norm.eps)
    b = -mean * a
    if norm.affine:
        a, b = a * norm.weight[None, :, None], b * norm.weight[None, :, None] + norm.bias[None, :, None]
    if gain is not None:
        a, b = a * gain, b * gain
    if shift is not None:
        b = b + shift
    return x * a + b


def adain(block: nn.Module, x: Tensor, style: Tensor, mask: Tensor) -> Tensor:
    """kokoro ``AdaIN1d.forward`` with masked statistics."""
    h = block.fc(style)[:, :, None]
    gamma, beta = torch.chunk(h, chunks=2, dim=1)
    return masked_instance_norm(block.norm, x, mask, 1 + gamma, beta)


def upsample_mask(mask: Tensor) -> Tensor:
    """The mask of a block output that has twice the frames of its input."""
    return mask.repeat_interleave(2, dim=-1)


def adain_resblock(block: nn.Module, x: Tensor, style: Tensor, mask: Tensor) -> Tensor:
    """kokoro ``AdainResBlk1d.forward`` over a padded bucket; returns zeros past the length.

    With ``upsample`` the output has twice the frames; its mask is ``upsample_mask(mask)``.
    """
    upsampled = block.upsample_type != "none"
    out_mask = upsample_mask(mask) if upsampled else mask
    # Residual branch (dropout is the identity at inference).
    h = block.actv(adain(block.norm1, x * mask, style, mask))
    h = block.pool(h * mask) if upsampled else h
    h = block.conv1(h * out_mask)
    h = block.actv(adain(block.norm2, h, style, out_mask))
    h = block.conv2(h * out_mask)
    # Shortcut: nearest-neighbour x2 is repeat_interleave, which keeps the shape static.
    sc = x.repeat_interleave(2, dim=-1) if upsampled else x
    if block.learned_sc:
        sc = block.conv1x1(sc)
    return (h + sc) * (2.0**-0.5) * out_mask
