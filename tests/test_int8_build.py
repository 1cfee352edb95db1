"""A build of a checkpoint whose weights lie on int8 grids (as Kokoro-82M v1.0 int8's do)
stores them as int8 (``--weight-dtype auto``) and, with float32 products
(``--precision fp32``), computes exactly what its float32 build computes: every stage's
outputs equal, bit for bit, in a quarter of the weight bytes.  With the default precision
it multiplies in what this host has (kokoro_ext.build.precision), close to that."""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_ext import Synthesizer
from kokoro_ext.build.precision import products
from kokoro_ext.run import artifacts, cpu
from kokoro_ext.run.synthesizer import join
from small_build import build_grid


@pytest.fixture(scope="module")
def builds(int8_grid, int8_grid_cpu, tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    out = {"auto": int8_grid_cpu}  # --weight-dtype auto (the default), --precision fp32
    for name, flags in (("float32", ["--weight-dtype", "float32"]), ("default", [])):
        out[name] = build_grid(int8_grid, root / name, *flags, log=lambda line: None)
    return out


def _weight_dtypes(directory) -> dict[str, int]:
    manifest = artifacts.read_manifest(directory)
    counts: dict[str, int] = {}
    for entry in manifest.stages.values():
        for tensor in entry.weights.tensors:
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.nbytes
    return counts


def test_the_weights_on_a_grid_are_stored_as_int8(builds):
    assert artifacts.read_manifest(builds["auto"]).weight_dtype == "auto"
    assert artifacts.read_manifest(builds["float32"]).weight_dtype == "float32"
    auto, f32 = _weight_dtypes(builds["auto"]), _weight_dtypes(builds["float32"])
    assert "int8" not in f32
    assert auto["int8"] > 0.75 * sum(auto.values())
    assert sum(auto.values()) < 0.4 * sum(f32.values())


def test_the_int8_build_computes_what_the_float32_build_computes(builds):
    text = "The quick brown fox jumps over the lazy dog."
    chunks = {d: list(Synthesizer(builds[d]).stream(text, seed=0)) for d in ("auto", "float32")}
    assert len(chunks["auto"]) == len(chunks["float32"]) >= 1
    for a, b in zip(chunks["auto"], chunks["float32"]):
        for stage, outputs in b.trace.stages.items():
            for name, value in outputs.items():
                np.testing.assert_array_equal(a.trace.stages[stage][name], value, err_msg=f"{stage}.{name}")


def test_the_default_precision_is_what_the_host_multiplies_in_and_stays_close(builds):
    """The default build's products are the host's best (int8 on VNNI, bf16 on BF16, else
    float32), recorded in the manifest; its audio stays within 20 dB of the float32 build's
    (the real model's figures, per sentence, are bench/quality.py's)."""
    host = cpu.HostCPU.detect().enabled
    expected = products("auto", host, True)
    assert artifacts.read_manifest(builds["default"]).precision == expected
    assert artifacts.read_manifest(builds["auto"]).precision == "fp32"
    assert artifacts.read_manifest(builds["float32"]).precision == "fp32"
    text = "The quick brown fox jumps over the lazy dog."
    low = join(Synthesizer(builds["default"]).stream(text, seed=0))
    ref = join(Synthesizer(builds["float32"]).stream(text, seed=0))
    assert low.shape == ref.shape
    snr = 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((low - ref).astype(np.float64) ** 2))
    if expected == "fp32":
        assert snr > 100
    else:
        assert 20 < snr < 100, snr  # close, and not the float32 arithmetic
