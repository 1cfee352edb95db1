"""Scratch copies of the installed TVM wheel for testing upstream/apply.sh and the patches.

apply.sh finds the wheel through the interpreter it is given, so a copy on its own
PYTHONPATH, reached through a small wrapper interpreter, can be patched and reverted
without touching the environment the tests run in.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APPLY_SH = REPO / "upstream" / "apply.sh"
PATCH_DIR = REPO / "tvm_patches"


def installed_tvm_dir() -> Path:
    """The tvm package directory of the running interpreter."""
    spec = importlib.util.find_spec("tvm")
    return Path(list(spec.submodule_search_locations)[0])


def write_interpreter(path: Path, pythonpath: Path) -> Path:
    """A wrapper around this interpreter that puts ``pythonpath`` first on sys.path."""
    path.write_text(
        f'#!/bin/sh\nPYTHONPATH="{pythonpath}${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec "{sys.executable}" "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def write_dist_info(site: Path, version: str) -> None:
    """Metadata that makes importlib.metadata report apache-tvm at ``version``."""
    dist = site / f"apache_tvm-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: apache-tvm\nVersion: {version}\n")


def copy_wheel(site: Path) -> Path:
    """Copy the installed tvm package into ``site``: Python files copied, the rest linked.

    Returns an interpreter that imports this copy.
    """
    src = installed_tvm_dir()
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out = site / "tvm" / Path(root).relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in files:
            if name.endswith(".py"):
                shutil.copy2(Path(root) / name, out / name)
            else:
                (out / name).symlink_to(Path(root) / name)
    write_dist_info(site, importlib.metadata.version("apache-tvm"))
    return write_interpreter(site.parent / f"{site.name}-python", site)


def run_apply(*args: str, python: Path | None = None, apply_sh: Path = APPLY_SH):
    """Run apply.sh and return the CompletedProcess (text mode, output captured)."""
    cmd = [str(apply_sh), *args]
    if python is not None:
        cmd += ["--python", str(python)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def series_patches(series: Path) -> list[Path]:
    """The patch files a series file lists, in order."""
    lines = [ln.strip() for ln in series.read_text().splitlines()]
    return [series.parent / ln for ln in lines if ln and not ln.startswith("#")]


def patch_header(patch: Path, field: str) -> str | None:
    """The value of a DEP-3 field (``Origin:``, ``Applied-Upstream:`` ...) in a patch."""
    for line in patch.read_text().splitlines():
        if line.startswith(f"{field}: "):
            return line.split(": ", 1)[1]
    return None


def pinned_version() -> tuple[int, ...]:
    """The TVM release the series is for (TVM_SOURCE_TAG in upstream/tvm.pin)."""
    for line in (REPO / "upstream" / "tvm.pin").read_text().splitlines():
        if line.startswith("TVM_SOURCE_TAG="):
            return tuple(int(x) for x in line.split("=", 1)[1].lstrip("v").split("."))
    raise AssertionError("upstream/tvm.pin has no TVM_SOURCE_TAG")


def fixed_upstream_in(patch: Path) -> tuple[int, ...] | None:
    """The release of a DEP-3 ``Applied-Upstream: v0.24.0, <url>`` header, if any."""
    value = patch_header(patch, "Applied-Upstream")
    if value is None:
        return None
    return tuple(int(x) for x in value.split(",")[0].strip().lstrip("v").split("."))


def forward_patches() -> list[Path]:
    """The patches of tvm_patches/series that the pinned release still needs."""
    return [
        p
        for p in series_patches(PATCH_DIR / "series")
        if fixed_upstream_in(p) is None or fixed_upstream_in(p) > pinned_version()
    ]


def patch_files(patch: Path) -> list[str]:
    """Repository paths a git patch touches."""
    return [
        line.split(" b/", 1)[1]
        for line in patch.read_text().splitlines()
        if line.startswith("diff --git a/")
    ]
