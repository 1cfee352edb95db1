"""products.h has one register blocking per instruction set (8 x 48 sums on AVX-512,
4 x 24 on AVX2), chosen when the library is compiled for its host.  The test suite's own
library is built for the machine it runs on, so the blocking that machine does not
take is built too, for x86-64-v3 (AVX2, what an AMD Zen 3 takes: the runtime wheel's AVX2
variant), and must give what the host's library gives and what float64 gives."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import products_probe
import pytest

from kokoro_ext.run import native

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(products_probe.__file__).resolve()

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="x86-64-v3 is an x86 target"
)


@pytest.fixture(scope="module")
def avx2_library(x86_kernels) -> Path:
    """The kernel library compiled with -march=x86-64-v3: the runtime wheel's AVX2 variant."""
    (avx2,) = [v for v in native.VARIANTS["x86_64"] if v.march == "x86-64-v3"]
    library = x86_kernels / avx2.file_name
    try:
        native.check_runs_here(library)
    except ValueError as error:
        pytest.skip(f"this host cannot run x86-64-v3 code: {error}")
    return library


def _probe(library: Path | None, out: Path) -> list[np.ndarray]:
    env = dict(os.environ)
    if library is not None:
        env["KOKORO_EXT_LIBRARY"] = str(library)
    subprocess.run([sys.executable, str(PROBE), str(out)], check=True, env=env, cwd=ROOT)
    saved = np.load(out)
    return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def _references() -> list[np.ndarray]:
    """The probe's outputs in float64, in its order."""
    convs, addmms = products_probe.inputs()
    refs = []
    for x, w, b, k, d in convs:
        x, w = x.astype(np.float64), w.astype(np.float64)
        pad, t = d * (k - 1) // 2, x.shape[2]
        xp = np.pad(x[0], ((0, 0), (pad, pad)))
        y = b[:, None] + sum(w[:, :, j] @ xp[:, j * d : j * d + t] for j in range(k))
        refs += [y[None]] * (2 if w.shape[0] >= 48 else 1)
    refs += [b + x.astype(np.float64) @ w for x, w, b in addmms]
    return refs


def test_avx2_blocking_gives_what_the_hosts_blocking_and_float64_give(avx2_library, tmp_path):
    host = _probe(None, tmp_path / "host.npz")
    avx2 = _probe(avx2_library, tmp_path / "avx2.npz")
    refs = _references()
    assert len(refs) == products_probe.FLOAT_OUTPUTS
    for i, (h, a, r) in enumerate(zip(host, avx2, refs)):
        scale = float(np.abs(r).max())
        assert np.abs(a - r).max() <= 1e-5 * scale, (i, np.abs(a - r).max(), scale)
        assert np.abs(h - r).max() <= 1e-5 * scale, (i, np.abs(h - r).max(), scale)
        if i < 5:  # the convolutions: products.h alone, the same sums in the same order
            np.testing.assert_array_equal(a, h, err_msg=f"output {i}")


def test_int8_weight_kernels_give_the_float_kernels_outputs_on_both_blockings(avx2_library, tmp_path):
    """conv1d_winograd_q8_if_pays, conv1d_taps_q8 (through it), addmm_q8 and lstm_q8
    dequantize in registers (quantized.h: AVX-512's and AVX2's int8 loads): the same sums
    as the float32 kernels on the dequantized weights, bit for bit, on either instruction
    set."""
    for library, name in ((None, "host"), (avx2_library, "avx2")):
        outputs = _probe(library, tmp_path / f"{name}-q8.npz")
        pairs = outputs[products_probe.FLOAT_OUTPUTS:][: products_probe.PAIR_OUTPUTS]
        assert len(pairs) == products_probe.PAIR_OUTPUTS
        for i in range(0, len(pairs), 2):
            np.testing.assert_array_equal(pairs[i], pairs[i + 1], err_msg=f"{name} pair {i // 2}")


def test_low_precision_kernels_compute_alike_in_an_avx2_library(avx2_library, tmp_path):
    """The int8 and bf16 products are compiled for AVX512_VNNI and AVX512_BF16 whatever the
    library's -march: an AVX2 library on this host runs them (the same products, the
    epilogue in its own instructions) where the host has them."""
    start = products_probe.FLOAT_OUTPUTS + products_probe.PAIR_OUTPUTS
    host = _probe(None, tmp_path / "host-low.npz")[start:]
    avx2 = _probe(avx2_library, tmp_path / "avx2-low.npz")[start:]
    if not host:
        pytest.skip("this CPU has neither AVX512_VNNI nor AVX512_BF16")
    assert len(host) == len(avx2) > 0
    for i, (h, a) in enumerate(zip(host, avx2)):
        np.testing.assert_allclose(a, h, rtol=0, atol=1e-6 * float(np.abs(h).max()), err_msg=f"{i}")
