"""Alignment from durations (numpy, run side): kokoro's construction, padded to more frames."""

import numpy as np
import pytest
import torch

from kokoro_ext.run.alignment import align, alignment_matrix


def kokoro_alignment(durations: torch.Tensor) -> torch.Tensor:
    # As in KModel.forward_with_tokens.
    n = durations.shape[0]
    indices = torch.repeat_interleave(torch.arange(n), durations)
    aln = torch.zeros((n, indices.shape[0]))
    aln[indices, torch.arange(indices.shape[0])] = 1
    return aln


@pytest.mark.parametrize("padding", [0, 7])
def test_matches_kokoro_and_pads_with_empty_frames(padding):
    durations = torch.tensor([1, 3, 1, 5, 2])
    total = int(durations.sum())
    aln = alignment_matrix(durations.numpy(), total + padding)
    assert aln.dtype == np.float32
    assert np.array_equal(aln[:, :total], kokoro_alignment(durations).numpy())
    assert not aln[:, total:].any()


def test_batched_durations():
    durations = torch.tensor([[2, 1], [1, 1]])
    aln = alignment_matrix(durations.numpy(), 4)
    assert aln.shape == (2, 2, 4)
    assert np.array_equal(aln[1], [[1.0, 0, 0, 0], [0, 1, 0, 0]])


def test_more_frames_than_asked_for_are_refused():
    with pytest.raises(ValueError, match="more than the 5 frames asked for"):
        alignment_matrix(np.array([3, 3]), 5)
    with pytest.raises(ValueError, match="must be >= 0"):
        alignment_matrix(np.array([3, -1]), 5)


@pytest.mark.parametrize("padding", [0, 7])
def test_align_is_the_product_with_the_alignment(padding):
    rng = np.random.default_rng(0)
    durations = np.array([1, 3, 1, 5, 2, 4])
    frames = int(durations.sum()) + padding
    values = rng.standard_normal((640, len(durations))).astype(np.float32)
    got = align(values, durations, frames)
    assert got.dtype == np.float32 and got.shape == (640, frames)
    assert np.array_equal(got, values @ alignment_matrix(durations, frames))
    with pytest.raises(ValueError, match="frames asked for"):
        align(values, durations, int(durations.sum()) - 1)
