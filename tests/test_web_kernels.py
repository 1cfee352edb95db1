"""The native kernels as the wasm target compiles them (kokoro_ext.build.web.kernels): the
SIMD128 sgemm that stands in for OpenBLAS, run in node.  The kernels themselves are
checked in the browser, in the wasm build's stages against the CPU build
(tests/test_browser_wasm.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kokoro_ext.build.web import kernels, runtime

if (shutil.which("emcc") is None or shutil.which("node") is None) and not os.environ.get("CI"):
    pytest.skip("needs emscripten and node (Debian: emscripten, nodejs)", allow_module_level=True)

CHECK = Path(__file__).parent / "data" / "sgemm_check.cc"


def test_wasm_sgemm_matches_float64(tmp_path):
    out = runtime.run_emcc(
        ["-O3", "-msimd128", "-s", "ENVIRONMENT=node", "-s", "ALLOW_MEMORY_GROWTH=1",
         f"-I{kernels.CPP / 'blas'}", str(CHECK), str(kernels.CPP / "blas" / "sgemm.cc"),
         "-o", str(tmp_path / "check.js")]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    # emscripten 3.1.6's loader predates node's fetch, which cannot read a file path
    run = subprocess.run(["node", "--no-experimental-fetch", str(tmp_path / "check.js")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, "sgemm wrote past the N columns of C"
    # float32 sums of up to 700 products of values in [-0.5, 0.5]
    assert float(run.stdout.strip()) < 1e-4


def test_kernel_objects_are_cached_per_source(monkeypatch, tmp_path):
    """A changed kernel source gets objects of its own, not the stale ones."""
    first = kernels.kernels_dir()
    edited = tmp_path / "sgemm.cc"
    edited.write_text((kernels.CPP / "blas" / "sgemm.cc").read_text() + "\n// edited\n")
    monkeypatch.setattr(kernels, "SOURCES", (*kernels.SOURCES[:-1], edited))
    assert kernels.kernels_dir() != first
