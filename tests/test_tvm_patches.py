"""The patch series: well-formed patches, and each regression test fails before, passes after.

Each forward patch carries its own test in TVM's layout (tests/python/...).  It is taken
out of the patch and run against a copy of the installed wheel, once with the series
reverted and once with it applied by upstream/apply.sh.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tvm_trees import PATCH_DIR, patch_files, patch_header, series_patches

ALL_SERIES = [PATCH_DIR / "series", *sorted(PATCH_DIR.glob("backports/*/series"))]
ALL_PATCHES = sorted({p for s in ALL_SERIES for p in series_patches(s)})
FORWARD = [
    p
    for p in series_patches(PATCH_DIR / "series")
    if not patch_header(p, "Upstream-Status").startswith("Fixed-Upstream")
]
STATUS = re.compile(r"^(Pending|Submitted \S+|Fixed-Upstream v\d+\.\d+\.\d+, \S+)")


def test_every_patch_file_is_in_a_series():
    on_disk = set(PATCH_DIR.rglob("*.patch"))
    assert on_disk == set(ALL_PATCHES)


@pytest.mark.parametrize("series", ALL_SERIES, ids=lambda s: str(s.relative_to(PATCH_DIR)))
def test_series_names_its_versions(series):
    assert re.search(r"^# versions: \d+\.\d+\.\d+", series.read_text(), re.M)


@pytest.mark.parametrize("patch", ALL_PATCHES, ids=lambda p: p.name)
def test_patch_is_git_format_patch_with_dep3_headers(patch):
    text = patch.read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert re.search(r"^Subject: \[PATCH\] \[\w", text, re.M), "subject needs a TVM [Area] tag"
    assert patch_header(patch, "Bug"), "Bug: header missing"
    assert STATUS.match(patch_header(patch, "Upstream-Status") or ""), "bad Upstream-Status"
    assert patch_header(patch, "Applies-To"), "Applies-To: header missing"
    files = patch_files(patch)
    assert any(f.startswith("tests/python/") for f in files), "no regression test in the patch"
    assert any(not f.startswith("tests/") for f in files), "no fix in the patch"


def _extract_tests(patch: Path, dest: Path) -> list[Path]:
    """Write the test files the patch adds into dest and return them."""
    dest.mkdir(parents=True)
    subprocess.run(
        ["git", "apply", "--include=tests/*", str(patch)],
        cwd=dest,
        check=True,
        capture_output=True,
        env={"GIT_CEILING_DIRECTORIES": str(dest.parent), "PATH": "/usr/bin:/bin"},
    )
    return sorted(dest.rglob("test_*.py"))


def _pytest(python: Path, tests: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, tests)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("patch", FORWARD, ids=lambda p: p.name)
def test_regression_test_fails_before_and_passes_after_apply(
    patch, tmp_path, pristine_wheel, patched_wheel
):
    tests = _extract_tests(patch, tmp_path / "tests")
    assert tests, f"{patch.name} adds no test file"

    before = _pytest(pristine_wheel[1], tests, tmp_path)
    # Exit code 1 means tests ran and failed; collection errors (2+) would prove nothing.
    assert before.returncode == 1, before.stdout[-3000:] + before.stderr[-3000:]
    assert re.search(r"\d+ failed", before.stdout)

    after = _pytest(patched_wheel[1], tests, tmp_path)
    assert after.returncode == 0, after.stdout[-3000:] + after.stderr[-3000:]
    assert re.search(r"\d+ passed", after.stdout) and "failed" not in after.stdout
