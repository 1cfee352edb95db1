"""Shared fixtures: scratch copies of the TVM wheel (see tvm_trees.py), the small build,
the runtime wheel's x86-64 kernel libraries."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from small_build import build_grid, build_small, grid_sources
from tvm_trees import copy_wheel, run_apply


@pytest.fixture(scope="session")
def _stamps_file(tmp_path_factory):
    return tmp_path_factory.mktemp("stamps") / "verified.json"


@pytest.fixture(autouse=True)
def _private_stamps(_stamps_file, monkeypatch):
    """Verified-file stamps (kokoro_ext.run.stamps) of this session's builds go to a file
    of the session, not to the user's cache."""
    from kokoro_ext.run import stamps

    monkeypatch.setattr(stamps, "stamps_path", lambda: _stamps_file)


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    """(artifacts dir, build log lines) of the small-config build (small_build.py).

    Built once per session (a minute or two) and shared by every test that synthesizes;
    tests must not modify it: copy it (shutil.copytree) to corrupt or rebuild it.
    """
    log: list[str] = []
    out = build_small(tmp_path_factory.mktemp("build"), log=log.append)
    return out, log


@pytest.fixture(scope="session")
def int8_grid(tmp_path_factory):
    """The small config's checkpoint on int8 grids (small_build.grid_sources)."""
    return grid_sources(tmp_path_factory.mktemp("int8-grid"))


@pytest.fixture(scope="session")
def int8_grid_cpu(int8_grid, tmp_path_factory):
    """The CPU build of ``int8_grid`` with its weights as int8 (``--weight-dtype auto``)
    and float32 products (``--precision fp32``): what its float32 build computes, bit for
    bit (tests/test_int8_build.py), and what a wasm build of it computes."""
    out = tmp_path_factory.mktemp("int8-grid-cpu") / "artifacts"
    return build_grid(int8_grid, out, "--precision", "fp32", log=lambda line: None)


@pytest.fixture(scope="session")
def x86_kernels(tmp_path_factory) -> Path:
    """A folder with the runtime wheel's x86-64 kernel libraries, one per instruction set
    (kokoro_ext.run.native.VARIANTS: x86-64-v4, -v3 and x86-64), each with its CPU record,
    as kokoro_ext.tools.wheel builds them (about a minute on two cores)."""
    if platform.machine() != "x86_64":
        pytest.skip("the x86-64 variants are built on x86-64")
    from kokoro_ext.tools import wheel

    out = tmp_path_factory.mktemp("x86-kernels")
    wheel.build_kernels("x86_64", out)
    return out


@pytest.fixture(scope="session")
def pristine_wheel(tmp_path_factory):
    """(site dir, interpreter) for a copy of the installed wheel with every patch reverted."""
    site = tmp_path_factory.mktemp("pristine") / "site"
    python = copy_wheel(site)
    result = run_apply("--revert", python=python)
    assert result.returncode == 0, result.stdout + result.stderr
    return site, python


@pytest.fixture(scope="session")
def patched_wheel(tmp_path_factory):
    """(site dir, interpreter) for a copy of the installed wheel with the series applied."""
    site = tmp_path_factory.mktemp("patched") / "site"
    python = copy_wheel(site)
    result = run_apply(python=python)
    assert result.returncode == 0, result.stdout + result.stderr
    return site, python


# Figures the parity tests measure (errors, SNR, branch-cut flips), printed after the run
# so that they are visible even when every test passes.
_PARITY_REPORT: list[str] = []


@pytest.fixture
def parity_report():
    """Append a line to the parity report printed at the end of the test session."""
    return _PARITY_REPORT.append


def pytest_terminal_summary(terminalreporter):
    if _PARITY_REPORT:
        terminalreporter.section("kokoro_ext parity report")
        for line in _PARITY_REPORT:
            terminalreporter.write_line(line)
