"""The patch series: well-formed patches, and each regression test fails before, passes after.

Each forward patch carries its own test in TVM's layout (tests/python/...).  It is taken
out of the patch and run against a copy of the installed wheel, once with the series
reverted and once with it applied by upstream/apply.sh.

Every patch is a git format-patch file with DEP-3 headers: the Subject and the commit
message body are its Description; the DEP-3 fields (Origin, Bug, Forwarded,
Applied-Upstream, Last-Update) are the last paragraph of the message, before "---".
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tvm_trees import PATCH_DIR, forward_patches, patch_files, series_patches

ALL_SERIES = [PATCH_DIR / "series", *sorted(PATCH_DIR.glob("backports/*/series"))]
ALL_PATCHES = sorted({p for s in ALL_SERIES for p in series_patches(s)})
FORWARD = forward_patches()  # the patches the pinned release needs

DEP3_FIELDS = {"Origin", "Bug", "Forwarded", "Applied-Upstream", "Last-Update", "Author", "Reviewed-by"}
ORIGIN = re.compile(r"^(upstream|backport|vendor|other), \S+")
TVM_URL = r"https://github\.com/apache/tvm/(issues|pull|commit)/[0-9a-f]+"


def _message(patch: Path) -> tuple[str, list[str]]:
    """(subject, message body lines) of a git format-patch file, up to the "---" line."""
    lines = patch.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Subject: "))
    end = lines.index("---")
    subject = [lines[start]]
    i = start + 1
    while lines[i].startswith(" "):  # folded Subject
        subject.append(lines[i])
        i += 1
    return " ".join(x.strip() for x in subject), lines[i + 1 : end]


def _dep3_fields(body: list[str]) -> dict[str, str]:
    """The DEP-3 fields: the last paragraph of the message, every line a "Field: value"."""
    paragraph = "\n".join(body).strip().split("\n\n")[-1].splitlines()
    fields = {}
    for line in paragraph:
        match = re.match(r"^([A-Za-z-]+): (.+)$", line)
        assert match, f"not a DEP-3 field in the last paragraph of the message: {line!r}"
        assert match[1] not in fields, f"{match[1]} given twice"
        fields[match[1]] = match[2]
    return fields


def test_every_patch_file_is_in_a_series():
    on_disk = set(PATCH_DIR.rglob("*.patch"))
    assert on_disk == set(ALL_PATCHES)


@pytest.mark.parametrize("series", ALL_SERIES, ids=lambda s: str(s.relative_to(PATCH_DIR)))
def test_series_names_its_versions(series):
    assert re.search(r"^# versions: \d+\.\d+\.\d+", series.read_text(), re.M)


@pytest.mark.parametrize("patch", ALL_PATCHES, ids=lambda p: str(p.relative_to(PATCH_DIR)))
def test_patch_is_git_format_patch_with_dep3_headers(patch):
    text = patch.read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert re.search(r"^From: .+ <.+@.+>$", text, re.M), "From: (the DEP-3 Author) missing"
    subject, body = _message(patch)
    assert re.match(r"^Subject: \[PATCH\] \[\w", subject), "subject needs a TVM [Area] tag"

    fields = _dep3_fields(body)
    assert set(fields) <= DEP3_FIELDS, f"not DEP-3 fields: {set(fields) - DEP3_FIELDS}"
    description = "\n".join(body).strip().split("\n\n")[:-1]
    assert description, "the commit message body (the DEP-3 long description) is empty"
    assert ORIGIN.match(fields.get("Origin", "")), "Origin: <category>, <where> missing"
    if "Bug" in fields:
        assert re.fullmatch(TVM_URL, fields["Bug"]), "Bug: must be the upstream issue's URL"
    assert re.fullmatch(r"no|not-needed|https://\S+", fields.get("Forwarded", "")), "Forwarded:"
    datetime.date.fromisoformat(fields.get("Last-Update", "missing"))
    if "Applied-Upstream" in fields:
        assert re.fullmatch(rf"v\d+\.\d+\.\d+, {TVM_URL}", fields["Applied-Upstream"])
        assert fields["Forwarded"] != "no", "a fix that is upstream needs no forwarding"

    files = patch_files(patch)
    assert any(f.startswith("tests/python/") for f in files), "no regression test in the patch"
    assert any(not f.startswith("tests/") for f in files), "no fix in the patch"


@pytest.mark.parametrize("patch", FORWARD, ids=lambda p: p.name)
def test_forward_patch_says_which_tvm_tests_it_passes(patch):
    """upstream/check_upstream_tests.sh was run: the description lists its counts."""
    _, body = _message(patch)
    text = "\n".join(body)
    tested = re.search(r"^Tested: .*?(?=\n\n)", text, re.M | re.S)
    assert tested, "no 'Tested:' paragraph in the description"
    assert re.search(r"tests/python/\S+\.py: \d+ passed", tested[0])
    assert "before and after" in tested[0]


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


CHECK_SH = PATCH_DIR.parent / "upstream" / "check_upstream_tests.sh"

FAKE_TVM_TEST = '''
import inspect

from tvm import te


def test_unchanged():
    assert te.create_prim_func is not None


def test_signature_of_create_prim_func():
    # passes without 0001, fails with it: a stand-in for a test a patch breaks
    assert "global_symbol" not in inspect.signature(te.create_prim_func).parameters
'''


def test_check_upstream_tests_reports_a_test_a_patch_breaks(tmp_path):
    """check_upstream_tests.sh runs a checkout's tests before/after a patch and flags regressions."""
    checkout = tmp_path / "tvm"
    (checkout / "tests" / "python" / "te").mkdir(parents=True)
    (checkout / "tests" / "python" / "te" / "test_fake.py").write_text(FAKE_TVM_TEST)
    first = FORWARD[0]
    assert any(f.startswith("python/tvm/te/") for f in patch_files(first))
    result = subprocess.run(
        [
            *(str(CHECK_SH), "--source", str(checkout), "--python", sys.executable),
            *("--patch", first.name, "--work", str(tmp_path / "work")),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"tests/python/te/test_fake\.py +2/0/0/0 -> 1/1/0/0", out), out
    assert re.search(r"passed -> failed +tests\.python\.te\.test_fake::test_signature_of", out)
    assert "test_fake::test_unchanged" not in out  # unchanged tests are not listed
    # the patch's own regression test, from the patch, fails before and passes after
    new_test = r"test_te_create_primfunc_global_symbol\.py \(added by the patch\)"
    assert re.search(new_test + r" +\d+/[1-9]\d*/0/0 -> \d+/0/0/0", out), out
    assert "FAILED: tests went from passed to failed" in out
