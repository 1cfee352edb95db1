"""This checkout's native kernel library built with CMake for an architecture: what the
runtime wheel (kokoro_ext.tools.wheel) and the AArch64 emulation (kokoro_ext.tools.emulation)
both build, cross-compiled with the toolchain file of ``TOOLCHAINS`` where the target is
not this machine."""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kokoro_ext.build.environment import REPO_ROOT
from kokoro_ext.run import native
from kokoro_ext.run.cpu import architecture

#: CMake toolchain files of the architectures the kernels are cross-built for.
TOOLCHAINS = {"aarch64": REPO_ROOT / "cpp" / "cmake" / "aarch64-linux-gnu.cmake"}
#: What the library is built from: CMakeLists.txt, the pin of the wheels it links, the
#: sources (cpp/: its toolchain files too) and the TVM headers it vendors.
SOURCES = (
    REPO_ROOT / "CMakeLists.txt",
    REPO_ROOT / "upstream" / "tvm.pin",
    REPO_ROOT / "cpp",
    REPO_ROOT / "kokoro_ext" / "third_party" / "tvm" / "include",
)


def run_command(command: Sequence[str | Path], **kwargs) -> None:
    """``command``, its output kept for the error it raises if it fails."""
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, command))} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )


def kernel_sources_digest() -> str:
    """SHA-256 over the files of ``SOURCES``, each with its path."""
    digest = hashlib.sha256()
    files = [p for s in SOURCES for p in ([s] if s.is_file() else sorted(s.rglob("*")))]
    for path in (p for p in files if p.is_file()):
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cmake_kernels(
    out: Path, site: Path, march: str, arch: str, variant: str | None = None, jobs: int = 2
) -> Path:
    """The kernel library of this checkout built with ``-march`` for ``arch`` into ``out``,
    linked against ``site``'s wheels (cross-compiled where ``arch`` is not this machine's);
    ``variant`` names it as a runtime wheel's (libkokoro_ext_kernels.<variant>.so)."""
    toolchain = [] if arch == architecture(platform.machine()) else [f"--toolchain={TOOLCHAINS[arch]}"]
    with tempfile.TemporaryDirectory(prefix="kokoro-ext-kernels-") as build:
        run_command(["cmake", "-S", REPO_ROOT, "-B", build, *toolchain,
              f"-DPython_EXECUTABLE={sys.executable}", f"-DKOKORO_EXT_TARGET_SITE={site}",
              f"-DKOKORO_EXT_LIBRARY_DIR={out}", f"-DKOKORO_EXT_MARCH={march}",
              f"-DKOKORO_EXT_VARIANT={variant or ''}", "-DCMAKE_BUILD_TYPE=Release"])  # fmt: skip
        run_command(["cmake", "--build", build, f"-j{jobs}"])
    return out / (native.Variant(variant, march).file_name if variant else native.LIBRARY_NAME)


__all__ = ["SOURCES", "TOOLCHAINS", "cmake_kernels", "kernel_sources_digest", "run_command"]
