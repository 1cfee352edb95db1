"""upstream/apply.sh: state per patch, idempotency, --check, --revert, refusals, atomicity."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tvm_trees import (
    APPLY_SH,
    PATCH_DIR,
    REPO,
    forward_patches,
    patch_files,
    patch_header,
    run_apply,
    series_patches,
    write_dist_info,
    write_interpreter,
)

SERIES = series_patches(PATCH_DIR / "series")
FORWARD = forward_patches()
# Fixed upstream at or below the pin ("Applied-Upstream: v0.24.0, <url>"): reported, skipped.
BACKPORTS = [p for p in SERIES if p not in FORWARD]


def pinned_wheel_version() -> str:
    for line in (REPO / "upstream" / "tvm.pin").read_text().splitlines():
        if line.startswith("TVM_WHEEL_VERSION="):
            return line.split("=", 1)[1]
    raise AssertionError("upstream/tvm.pin has no TVM_WHEEL_VERSION")


def series_name(patch: Path) -> str:
    return str(patch.relative_to(PATCH_DIR))


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Content and mtime of every regular file below root."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def contents(snap):
    return {k: v[0] for k, v in snap.items()}


def state_of(output: str, patch: Path) -> str:
    for line in output.splitlines():
        if line.rstrip().endswith(series_name(patch)):
            return line.rsplit(series_name(patch), 1)[0].strip()
    raise AssertionError(f"{series_name(patch)} missing from apply.sh output:\n{output}")


@pytest.fixture
def small_wheel(tmp_path, pristine_wheel):
    """A wheel tree holding just the files the forward patches touch, unpatched."""
    pristine_site, _ = pristine_wheel
    site = tmp_path / "site"
    (site / "tvm").mkdir(parents=True)
    (site / "tvm" / "__init__.py").write_text("")
    for patch in FORWARD:
        for name in patch_files(patch):
            rel = name[len("python/") :]
            if name.startswith("python/tvm/") and (pristine_site / rel).exists():
                (site / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(pristine_site / rel, site / rel)
    write_dist_info(site, pinned_wheel_version())
    return site, write_interpreter(tmp_path / "python", site)


def test_check_reports_pending_patches_and_writes_nothing(small_wheel):
    site, python = small_wheel
    before = snapshot(site)
    result = run_apply("--check", python=python)
    assert result.returncode == 1, result.stdout + result.stderr
    for patch in FORWARD:
        assert state_of(result.stdout, patch) == "not applied"
    assert snapshot(site) == before


def test_apply_twice_changes_nothing_the_second_time(small_wheel):
    site, python = small_wheel
    original = snapshot(site)
    first = run_apply(python=python)
    assert first.returncode == 0, first.stdout + first.stderr
    for patch in FORWARD:
        assert state_of(first.stdout, patch) == "applied"
    applied = snapshot(site)
    assert contents(applied) != contents(original)

    second = run_apply(python=python)
    assert second.returncode == 0, second.stdout + second.stderr
    for patch in FORWARD:
        assert state_of(second.stdout, patch) == "already applied"
    assert "nothing to do" in second.stdout
    assert snapshot(site) == applied  # same bytes, files not even rewritten

    check = run_apply("--check", python=python)
    assert check.returncode == 0, check.stdout + check.stderr


def test_backports_are_reported_fixed_upstream(small_wheel):
    _, python = small_wheel
    result = run_apply("--check", python=python)
    assert BACKPORTS, "the series should list the backports it carries"
    for patch in BACKPORTS:
        fixed_in = patch_header(patch, "Applied-Upstream").split(",")[0].lstrip("v")
        assert state_of(result.stdout, patch) == f"fixed upstream in {fixed_in}"


def test_revert_restores_the_original_files(small_wheel):
    site, python = small_wheel
    original = contents(snapshot(site))
    assert run_apply(python=python).returncode == 0
    revert = run_apply("--revert", python=python)
    assert revert.returncode == 0, revert.stdout + revert.stderr
    for patch in FORWARD:
        assert state_of(revert.stdout, patch) == "reverted"
    assert contents(snapshot(site)) == original

    again = run_apply("--revert", python=python)
    assert again.returncode == 0
    assert "nothing to do" in again.stdout


def test_a_failing_patch_leaves_the_tree_untouched(small_wheel):
    site, python = small_wheel
    # Break a file that only one patch edits (the latest such patch); the others still apply.
    def own_files(patch):
        others = {f for p in FORWARD if p != patch for f in patch_files(p)}
        mine = [f for f in patch_files(patch) if f.startswith("python/") and f not in others]
        paths = [site / f[len("python/") :] for f in mine]
        return [path for path in paths if path.exists()]

    last = next(p for p in reversed(FORWARD) if own_files(p))
    victim = own_files(last)[0]
    victim.write_text("# not the file the patch expects\n")
    before = snapshot(site)
    result = run_apply(python=python)
    assert result.returncode == 1
    assert state_of(result.stdout, last) == "DOES NOT APPLY"
    assert "nothing was written" in result.stderr
    assert snapshot(site) == before


def test_unknown_tvm_version_is_refused_with_the_supported_list(small_wheel):
    site, python = small_wheel
    for dist in site.glob("apache_tvm-*.dist-info"):
        shutil.rmtree(dist)
    write_dist_info(site, "0.19.0")
    before = snapshot(site)
    result = run_apply(python=python)
    assert result.returncode == 2
    assert "TVM 0.19.0 is not supported" in result.stderr
    assert pinned_wheel_version() in result.stderr and "0.23.0" in result.stderr
    assert snapshot(site) == before


def test_missing_wheel_is_a_clear_error(tmp_path):
    # -S: no site-packages, so this interpreter has no TVM at all.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    result = run_apply(python=python)
    assert result.returncode == 2
    assert "no apache-tvm wheel" in result.stderr


CXX_PATCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] [Test] A native change

A change to TVM's C++ sources.

Origin: vendor, kokoro-tvm-ext
Forwarded: no
Last-Update: 2026-11-23
---
diff --git a/src/kokoro_test.cc b/src/kokoro_test.cc
new file mode 100644
--- /dev/null
+++ b/src/kokoro_test.cc
@@ -0,0 +1 @@
+int kokoro_test() { return 1; }
"""


def test_cxx_patch_is_reported_as_needing_a_source_build(tmp_path, small_wheel):
    site, python = small_wheel
    project = tmp_path / "project"
    (project / "upstream").mkdir(parents=True)
    shutil.copy2(APPLY_SH, project / "upstream" / "apply.sh")
    (project / "tvm_patches").mkdir()
    shutil.copy2(FORWARD[0], project / "tvm_patches" / FORWARD[0].name)
    (project / "tvm_patches" / "0099-native.patch").write_text(CXX_PATCH)
    (project / "tvm_patches" / "series").write_text(
        f"# versions: {pinned_wheel_version()}\n{FORWARD[0].name}\n0099-native.patch\n"
    )
    result = run_apply(python=python, apply_sh=project / "upstream" / "apply.sh")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0099-native.patch" in result.stdout
    native_line = next(ln for ln in result.stdout.splitlines() if "0099-native" in ln)
    assert "needs a source build" in native_line
    assert state_of(result.stdout, FORWARD[0]) == "applied"
    assert not (site / "src").exists()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def _source_tree(root: Path, pristine_site: Path, tag: str) -> Path:
    """A git checkout laid out like TVM's, with the files the forward series touches."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "README").write_text("native sources\n")
    for patch in FORWARD:
        for name in patch_files(patch):
            source = pristine_site / name[len("python/") :]
            if name.startswith("python/tvm/") and source.exists():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, root / name)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "tree")
    _git(root, "tag", tag)
    return root


def test_source_checkout_gets_every_patch_including_its_tests(tmp_path, pristine_wheel):
    src = _source_tree(tmp_path / "tvm", pristine_wheel[0], "v0.27.0")
    first = run_apply("--source", str(src))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "TVM 0.27.0 (source:" in first.stdout
    added_tests = [f for p in FORWARD for f in patch_files(p) if f.startswith("tests/")]
    assert added_tests and all((src / f).is_file() for f in added_tests)

    second = run_apply("--source", str(src))
    assert second.returncode == 0 and "nothing to do" in second.stdout

    revert = run_apply("--source", str(src), "--revert")
    assert revert.returncode == 0, revert.stdout + revert.stderr
    assert not any((src / f).exists() for f in added_tests)
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=src, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""


def test_source_version_selects_the_backport_series(tmp_path, pristine_wheel):
    src = _source_tree(tmp_path / "tvm", pristine_wheel[0], "v0.23.0")
    result = run_apply("--source", str(src), "--check")
    assert "series tvm_patches/backports/v0.23/series" in result.stdout


def test_source_without_a_tag_needs_an_explicit_version(tmp_path, pristine_wheel):
    src = _source_tree(tmp_path / "tvm", pristine_wheel[0], "v0.27.0")
    _git(src, "tag", "-d", "v0.27.0")
    result = run_apply("--source", str(src))
    assert result.returncode == 2
    assert "pass --tvm-version" in result.stderr
    explicit = run_apply("--source", str(src), "--tvm-version", "0.27.0", "--check")
    assert explicit.returncode == 1 and "not applied" in explicit.stdout


def test_not_a_tvm_checkout_is_refused(tmp_path):
    result = run_apply("--source", str(tmp_path))
    assert result.returncode == 2
    assert "is not a TVM source checkout" in result.stderr


def _demo_patch(old: str, new: str) -> str:
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "Subject: [PATCH] [Test] Demo\n\nA demo change.\n---\n"
        "diff --git a/python/tvm/kokoro_demo.py b/python/tvm/kokoro_demo.py\n"
        "--- a/python/tvm/kokoro_demo.py\n+++ b/python/tvm/kokoro_demo.py\n"
        f"@@ -1 +1 @@\n-{old}\n+{new}\n"
    )


def test_a_tree_with_an_older_version_of_a_patch_is_updated_and_reverted(tmp_path, small_wheel):
    """A wheel patched before a patch was changed: apply.sh finds that version in git history."""
    site, python = small_wheel
    demo = site / "tvm" / "kokoro_demo.py"
    demo.write_text("a = 1\n")
    original = contents(snapshot(site))
    project = tmp_path / "project"
    (project / "upstream").mkdir(parents=True)
    shutil.copy2(APPLY_SH, project / "upstream" / "apply.sh")
    (project / "tvm_patches").mkdir()
    (project / "tvm_patches" / "series").write_text(
        f"# versions: {pinned_wheel_version()}\n0001-demo.patch\n"
    )
    patch = project / "tvm_patches" / "0001-demo.patch"
    patch.write_text(_demo_patch("a = 1", "a = 2"))
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "first version of the patch")
    apply_sh = project / "upstream" / "apply.sh"
    assert run_apply(python=python, apply_sh=apply_sh).returncode == 0
    assert demo.read_text() == "a = 2\n"

    patch.write_text(_demo_patch("a = 1", "a = 3"))  # the patch changes, not yet committed
    check = run_apply("--check", python=python, apply_sh=apply_sh)
    assert check.returncode == 1
    assert "older version applied" in check.stdout
    assert demo.read_text() == "a = 2\n"

    update = run_apply(python=python, apply_sh=apply_sh)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "updated from" in update.stdout
    assert demo.read_text() == "a = 3\n"
    again = run_apply(python=python, apply_sh=apply_sh)
    assert "nothing to do" in again.stdout

    # Committed, and the tree back at the first version: revert still finds it.
    _git(project, "commit", "-qam", "second version")
    demo.write_text("a = 2\n")
    revert = run_apply("--revert", python=python, apply_sh=apply_sh)
    assert revert.returncode == 0, revert.stdout + revert.stderr
    assert "reverted (version" in revert.stdout
    assert contents(snapshot(site)) == original


def test_a_foreign_change_is_still_refused(tmp_path, small_wheel):
    """Only versions from the history count: any other edit still DOES NOT APPLY."""
    site, python = small_wheel
    demo = site / "tvm" / "kokoro_demo.py"
    demo.write_text("a = 5\n")
    project = tmp_path / "project"
    (project / "upstream").mkdir(parents=True)
    shutil.copy2(APPLY_SH, project / "upstream" / "apply.sh")
    (project / "tvm_patches").mkdir()
    (project / "tvm_patches" / "series").write_text(
        f"# versions: {pinned_wheel_version()}\n0001-demo.patch\n"
    )
    (project / "tvm_patches" / "0001-demo.patch").write_text(_demo_patch("a = 1", "a = 2"))
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "the patch")
    (project / "tvm_patches" / "0001-demo.patch").write_text(_demo_patch("a = 1", "a = 3"))
    result = run_apply(python=python, apply_sh=project / "upstream" / "apply.sh")
    assert result.returncode == 1
    assert "DOES NOT APPLY" in result.stdout
    assert demo.read_text() == "a = 5\n"
