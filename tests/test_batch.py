"""Batches on the small build's libraries: two rows of unequal lengths, padded to the
longer, give each row what it gives alone, unpadded (the length-aware stages)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kokoro_ext.build.model import build_model, small_config
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.build.stages import STAGES

LONG, SHORT = {"tokens": 23, "frames": 29}, {"tokens": 14, "frames": 17}


@pytest.fixture(scope="module")
def synth(build_dir):
    return Synthesizer(build_dir[0])


@pytest.fixture(scope="module")
def model():
    return build_model(small_config(), seed=0)


def _inputs(model, name: str, length: int, seed: int) -> list[np.ndarray]:
    """Random inputs of ``name`` at ``length`` (lengths = the length: a whole row)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for t in STAGES[name].example(model, length):
        if t.dtype == torch.int64 and t.ndim == 1:
            out.append(np.array([length]))
        elif t.dtype == torch.int64:
            out.append(torch.randint(1, 100, t.shape, generator=generator).numpy())
        else:
            out.append(torch.randn(t.shape, generator=generator).numpy().astype(np.float32))
    return out


def _pad_to(short: np.ndarray, long: np.ndarray) -> np.ndarray:
    return np.pad(short, [(0, b - a) for a, b in zip(short.shape, long.shape)])


def _valid(long_row: np.ndarray, short: np.ndarray) -> np.ndarray:
    """The part of a padded row's output that the unpadded run produced."""
    return long_row[tuple(slice(0, n) for n in short.shape)]


@pytest.mark.parametrize("name", list(STAGES))
def test_two_rows_of_unequal_length_equal_two_single_runs(synth, model, name):
    axis = STAGES[name].axis
    long = _inputs(model, name, LONG[axis], seed=1)
    short = _inputs(model, name, SHORT[axis], seed=2)
    run = synth._stage(name)
    batch = {k: np.concatenate([a, _pad_to(b, a)]) for k, a, b in zip(run.inputs, long, short)}
    batch["lengths"] = np.array([LONG[axis], SHORT[axis]])
    together = run(batch)
    alone = [run(dict(zip(run.inputs, long))), run(dict(zip(run.inputs, short)))]
    for output, got in together.items():
        assert got.shape[0] == 2
        np.testing.assert_allclose(got[:1], alone[0][output], atol=1e-4,
                                   err_msg=f"{name}.{output}, row 0")
        want = alone[1][output]
        np.testing.assert_allclose(_valid(got[1:], want), want, atol=1e-4,
                                   err_msg=f"{name}.{output}, row 1")
