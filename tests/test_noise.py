"""The run side's native noise (kokoro_ext.source_noise) equals kokoro's torch draws bit for bit."""

import numpy as np
import pytest
import torch

from kokoro_ext.run.noise import source_noise
from kokoro_ext.tools.reference import source_noise as torch_source_noise


@pytest.mark.parametrize(
    "seed, batch, samples, harmonics",
    [(0, 1, 600 * 37, 9), (7, 2, 1201, 9), (2**40 + 3, 1, 5, 9), (1, 3, 11, 4)],
)
def test_equals_torchs_draws(seed, batch, samples, harmonics):
    got = source_noise(seed, batch, samples, harmonics)
    want = torch_source_noise(seed, batch, samples, harmonics).numpy()
    assert got.dtype == np.float32 and got.shape == (batch, samples, harmonics)
    assert np.array_equal(got, want)


def test_equals_what_kokoros_sinegen_draws_after_manual_seed():
    # SineGen: torch.rand(B, H) for the phases, then randn_like of a [B, H, L] transposed view
    torch.manual_seed(5)
    torch.rand(1, 9)
    sines = torch.empty(1, 9, 240).transpose(1, 2)
    want = torch.randn_like(sines)
    assert np.array_equal(source_noise(5, 1, 240), want.numpy())


def test_seeds_differ():
    assert not np.array_equal(source_noise(0, 1, 64), source_noise(1, 1, 64))
