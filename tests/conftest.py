"""Shared fixtures: scratch copies of the TVM wheel (see tvm_trees.py)."""

from __future__ import annotations

import pytest

from tvm_trees import copy_wheel, run_apply


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
