""".ci/setup on simulated machines: which Debian packages it asks for, by which commands
the machine lacks (CI_SETUP_DRY_RUN prints the apt-get command instead of running it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[1] / ".ci" / "setup"
TOOLS = ("qemu-aarch64-static", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "chromium", "emcc")


def _setup(
    tmp_path: Path, present: tuple[str, ...], vulkan: bool = True
) -> subprocess.CompletedProcess:
    """.ci/setup with PATH holding only ``present`` (stub commands) and ``id``, and the
    library folder holding the Vulkan loader or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    if vulkan:
        (lib_dir / "libvulkan.so.1").write_bytes(b"")
    for name in present:
        stub = bin_dir / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    os.symlink(shutil.which("id"), bin_dir / "id")
    env = {"PATH": str(bin_dir), "CI_SETUP_DRY_RUN": "1", "CI_SETUP_LIBDIRS": str(lib_dir)}
    return subprocess.run([shutil.which("bash"), str(SETUP)], env=env, capture_output=True, text=True)


def _packages(result: subprocess.CompletedProcess) -> set[str]:
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    return set(words[words.index("-qq") + 1 :]) if words else set()


def test_nodesource_node_without_browser_tools_gets_no_debian_node(tmp_path):
    # NodeSource's nodejs brings node and npm; Debian's npm conflicts with it
    packages = _packages(_setup(tmp_path, ("node", "npm")))
    assert {"chromium", "emscripten", "qemu-user-static", "gcc-aarch64-linux-gnu",
            "g++-aarch64-linux-gnu"} <= packages  # fmt: skip
    assert not packages & {"nodejs", "npm"}


def test_machine_without_node_gets_debian_node_and_npm(tmp_path):
    packages = _packages(_setup(tmp_path, ("chromium",) + TOOLS[:3]))
    assert packages == {"nodejs", "npm", "emscripten", "debian-archive-keyring"}


def test_complete_machine_installs_nothing(tmp_path):
    assert _setup(tmp_path, TOOLS + ("node", "npm")).stdout == ""


def test_machine_without_the_vulkan_loader_gets_it(tmp_path):
    # node on Dawn (tests/test_browser.py) loads libvulkan.so.1, a library, not a command
    packages = _packages(_setup(tmp_path, TOOLS + ("node", "npm"), vulkan=False))
    assert packages == {"libvulkan1", "debian-archive-keyring"}


@pytest.mark.parametrize("present", [("node",) + TOOLS])
def test_node_without_npm_is_refused_saying_why(tmp_path, present):
    result = _setup(tmp_path, present)
    assert result.returncode != 0
    assert "npm" in result.stderr and "conflicts" in result.stderr
