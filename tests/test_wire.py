"""The browser builds' weights on the wire (kokoro_ext.run.wire): the writer and the Python
decoder, and that CPU builds store their arrays as they are."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kokoro_ext.build.backend import CUDA, WASM, WEBGPU, resolve
from kokoro_ext.run import artifacts
from kokoro_ext.run.manifest import Manifest
from kokoro_ext.run.weights import ALIGN, WeightEntry, Wire, load_weights, write_weights
from kokoro_ext.run.wire import MIN_ELEMENTS, quantize_int8, round_trip, write_wire_weights


def _arrays():
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 32, 3)).astype(np.float32)
    big[5] = 0  # a row of zeros: scale 0, decoded 0
    big[7] *= 1000  # rows of other magnitudes each get their own scale
    return [
        big,
        rng.standard_normal((4, MIN_ELEMENTS // 4 - 1)).astype(np.float32),  # small: float32
        rng.standard_normal(MIN_ELEMENTS * 2).astype(np.float32),  # one dimension: float32
        np.arange(MIN_ELEMENTS * 2, dtype=np.int32).reshape(2, -1),  # not float32
        rng.standard_normal((3, MIN_ELEMENTS)).astype(np.float32),
    ]


@pytest.mark.parametrize("wire", ["int8", "float16"])
def test_round_trip(tmp_path, wire):
    arrays = _arrays()
    entries = write_wire_weights(tmp_path / "w", arrays, wire)
    assert [e.wire is not None for e in entries] == [True, False, False, False, True]
    assert [(e.shape, e.dtype) for e in entries] == [(a.shape, str(a.dtype)) for a in arrays]
    assert all(e.offset % ALIGN == 0 for e in entries)
    assert all(e.wire.scales % ALIGN == 0 for e in entries if e.wire and e.wire.scales)
    loaded = load_weights(tmp_path / "w", entries)
    for array, entry, got in zip(arrays, entries, loaded):
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, round_trip(array, wire))
        if entry.wire is None:
            np.testing.assert_array_equal(got, array)  # stored as it is, bit for bit
        elif wire == "float16":
            np.testing.assert_array_equal(got, array.astype(np.float16).astype(np.float32))
        else:
            # each element within half a step of its row's scale (max |row| / 127)
            rows = array.reshape(array.shape[0], -1)
            step = np.max(np.abs(rows), axis=1, keepdims=True) / 127
            error = np.abs(got.reshape(rows.shape) - rows)
            assert np.all(error <= step * 0.5 * (1 + 1e-5) + 1e-30)
            if array.shape[0] > 5:
                assert np.all(got[5] == 0)
    # a byte (int8, and a float32 scale a row) or two (float16) an element on the wire
    wired = sum(
        a.size * (1 if wire == "int8" else 2) + 4 * a.shape[0] * (wire == "int8") if e.wire
        else a.nbytes
        for a, e in zip(arrays, entries)
    )  # fmt: skip
    assert wired <= (tmp_path / "w").stat().st_size <= wired + 2 * ALIGN * len(arrays)


def test_int8_arithmetic():
    """Decoded as the float32 product q * scale: what the page computes (kokoro.js)."""
    array = np.array([[0.5, -1.0, 0.25], [3.0, 0.0, -1.5]], np.float32)
    codes, scales = quantize_int8(array)
    assert codes.dtype == np.int8 and scales.dtype == np.float32
    np.testing.assert_array_equal(codes, [[64, -127, 32], [127, 0, -64]])
    np.testing.assert_array_equal(scales, np.float32([1 / 127, 3 / 127]))
    np.testing.assert_array_equal(round_trip(np.tile(array, (1, 2000)), "int8")[:, :3],
                                  codes.astype(np.float32) * scales[:, None])  # fmt: skip


def test_float32_wire_is_the_plain_file(tmp_path):
    arrays = _arrays()
    entries = write_wire_weights(tmp_path / "a", arrays, "float32")
    assert entries == write_weights(tmp_path / "b", arrays)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_entry_json():
    plain = WeightEntry((2, 3), "float32", 64)
    assert plain.to_json() == [[2, 3], "float32", 64]  # a CPU build's manifest as before
    wired = WeightEntry((2, 4096), "float32", 64, Wire("int8", 8256))
    assert wired.to_json() == [[2, 4096], "float32", 64, {"dtype": "int8", "scales": 8256}]
    assert WeightEntry.from_json(json.loads(json.dumps(wired.to_json()))) == wired
    with pytest.raises(ValueError):
        WeightEntry.from_json([[2], "float32", 0, {"dtype": "float16"}, 1])


def test_wire_format_is_for_browsers_only():
    assert WASM.choose().wire == WEBGPU.choose().wire == "float16"
    assert WASM.choose(wire="int8").wire == "int8"
    assert resolve("llvm").choose().wire is None and CUDA.choose().wire is None
    for target in (resolve("llvm"), CUDA):
        with pytest.raises(ValueError, match=f"--wire int8: a build for {target.name} has no use"):
            target.choose(wire="int8")


def test_cpu_build_stores_its_arrays_as_they_are(build_dir, tmp_path):
    """The CPU build's weights files: no wire format, the bytes the plain writer writes."""
    directory = build_dir[0]
    manifest: Manifest = artifacts.read_manifest(directory)
    for name, entry in manifest.stages.items():
        assert all(t.wire is None for t in entry.weights.tensors), name
        assert all(len(t.to_json()) == 3 for t in entry.weights.tensors)
        file = directory / entry.weights.file
        arrays = [np.array(a) for a in load_weights(file, entry.weights.tensors)]
        write_weights(tmp_path / name, arrays)
        assert (tmp_path / name).read_bytes() == file.read_bytes(), name
