"""Weights files (kokoro_ext.run.weights): aligned arrays, memory-mapped."""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_ext.run.weights import ALIGN, load_weights, write_weights


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in [(3,), (5, 7), (2, 3, 11)]]


def test_arrays_come_back_aligned_and_equal(tmp_path, arrays):
    entries = write_weights(tmp_path / "w", arrays)
    assert all(e.offset % ALIGN == 0 for e in entries)
    loaded = load_weights(tmp_path / "w", entries)
    assert all(isinstance(a, np.memmap) for a in loaded)
    assert all(np.array_equal(a, b) for a, b in zip(loaded, arrays))


def test_a_truncated_file_is_refused(tmp_path, arrays):
    entries = write_weights(tmp_path / "w", arrays)
    data = (tmp_path / "w").read_bytes()
    (tmp_path / "w").write_bytes(data[:-4])
    with pytest.raises(ValueError, match="truncated or from another build"):
        load_weights(tmp_path / "w", entries)
