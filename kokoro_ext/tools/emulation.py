"""Running AArch64 builds on an x86-64 machine, under qemu-user.

    python -m kokoro_ext.tools.emulation [--cpu cortex-a76] -- script.py args...

runs ``script.py`` with an aarch64 CPython under ``qemu-aarch64-static``, with this
checkout's ``kokoro_ext`` and its native kernel library cross-built for AArch64.  What
it needs is set up once and kept in the cache (kokoro_ext.run.cache), under ``aarch64/``:

    site/       the aarch64 wheels of apache-tvm, apache-tvm-ffi, numpy, scipy-openblas32
                and what they need, installed with ``pip install --target --platform``
    apt/        a private apt state (lists, downloaded .debs) for Debian's arm64 packages
    sysroot/    Debian's python3.11 for arm64 and the libraries it and the wheels need,
                unpacked with ``dpkg -x`` (qemu's ``-L``: the guest's / ); nothing is
                installed on the system, and the host's apt configuration is not touched
    lib-<hash>/ the native kernel library cross-built from cpp/ (CMake with
                cpp/cmake/aarch64-linux-gnu.cmake), one per source state and -march

The interpreter is Debian bookworm's python3.11 (its arm64 .debs, fetched by apt-get
from deb.debian.org), because the wheels are cp311 and Debian signs what apt fetches;
PyPI has no standalone CPython.  Needs qemu-user-static, g++-aarch64-linux-gnu, cmake,
apt-get and dpkg (Debian or Ubuntu with Debian's archive keyring).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kokoro_ext.build.environment import REPO_ROOT, read_pin
from kokoro_ext.run.cache import cache_dir
from kokoro_ext.tools.kernel_build import cmake_kernels, kernel_sources_digest, run_command

QEMU = "qemu-aarch64-static"
CROSS_CXX = "aarch64-linux-gnu-g++"
#: The tools and the Debian packages that bring them.
TOOLS = {
    QEMU: "qemu-user-static",
    CROSS_CXX: "g++-aarch64-linux-gnu",
    "cmake": "cmake",
    "apt-get": "apt",
    "dpkg": "dpkg",
}
DEBIAN_SUITE = "bookworm"  # its python3.11 runs the cp311 wheels
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: Debian arm64 packages of the guest: CPython 3.11 and the shared libraries it, the
#: TVM runtime (libstdc++, libgomp) and OpenBLAS load.
GUEST_PACKAGES = (
    "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6",
    "libgcc-s1", "libstdc++6", "libgomp1", "libexpat1", "zlib1g", "libffi8", "libbz2-1.0",
    "liblzma5", "libcrypt1", "libssl3", "libuuid1", "libncursesw6", "libtinfo6",
    "libreadline8", "libsqlite3-0", "libnsl2", "libtirpc3", "libgssapi-krb5-2",
    "libkrb5-3", "libk5crypto3", "libkrb5support0", "libkeyutils1", "libcom-err2",
    "libzstd1", "media-types",
)  # fmt: skip
#: manylinux tags an aarch64 Debian bookworm (glibc 2.36) runs.
PLATFORMS = ("manylinux_2_28_aarch64", "manylinux2014_aarch64")


def root() -> Path:
    """The cache folder of everything here: <cache>/aarch64."""
    return cache_dir() / "aarch64"


def missing_tools() -> list[str]:
    """What is not on PATH, as "tool (Debian package)"."""
    return [
        f"{tool} (apt-get install {pkg})" for tool, pkg in TOOLS.items() if not shutil.which(tool)
    ]


def guest_requirements() -> list[str]:
    """The run side's packages at this environment's versions: TVM at the pin."""
    tvm = read_pin("TVM_WHEEL_VERSION") or importlib.metadata.version("apache-tvm")
    ffi = read_pin("TVM_FFI_VERSION") or importlib.metadata.version("apache-tvm-ffi")
    mine = {n: importlib.metadata.version(n) for n in ("numpy", "scipy-openblas32")}
    return [f"apache-tvm=={tvm}", f"apache-tvm-ffi=={ffi}"] + [f"{n}=={v}" for n, v in mine.items()]


def _stamped(directory: Path, stamp: str) -> bool:
    return (directory / ".stamp").is_file() and (directory / ".stamp").read_text() == stamp


def _install(directory: Path, stamp: str, fill) -> Path:
    """``directory`` made by ``fill(temporary folder)`` unless it was made for ``stamp``
    already; replaced whole, so a killed setup leaves no half of it."""
    if _stamped(directory, stamp):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        fill(scratch)
        (scratch / ".stamp").write_text(stamp)
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(scratch, directory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def ensure_site() -> Path:
    """The aarch64 wheels of the run side, installed in <cache>/aarch64/site."""
    requirements = guest_requirements()

    def fill(target: Path) -> None:
        platforms = [f"--platform={p}" for p in PLATFORMS]
        run_command([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "--target", target, *platforms, "--only-binary=:all:", "--python-version=3.11",
              "--implementation=cp", *requirements])  # fmt: skip

    return _install(root() / "site", "\n".join(requirements), fill)


def _apt(state: Path) -> list[str]:
    """apt-get options for a private arm64 state in ``state``: the system's is not used."""
    sources = state / "sources.list"
    sources.write_text(
        f"deb [arch=arm64 signed-by={DEBIAN_KEYRING}] http://deb.debian.org/debian "
        f"{DEBIAN_SUITE} main\n"
        f"deb [arch=arm64 signed-by={DEBIAN_KEYRING}] http://deb.debian.org/debian-security "
        f"{DEBIAN_SUITE}-security main\n"
    )
    (state / "status").touch()
    for sub in ("lists/partial", "archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    options = {
        "Dir::Etc::SourceList": sources, "Dir::Etc::SourceParts": state / "none",
        "Dir::State::Lists": state / "lists", "Dir::State::status": state / "status",
        "Dir::Cache": state, "APT::Architecture": "arm64", "APT::Architectures::": "arm64",
        "Debug::NoLocking": "1",
    }  # fmt: skip
    if os.geteuid() == 0:  # apt's _apt user cannot write to this user's cache
        options["APT::Sandbox::User"] = "root"
    return [f"-o{key}={value}" for key, value in options.items()]


def ensure_sysroot() -> Path:
    """Debian's arm64 python3.11 and its libraries, unpacked in <cache>/aarch64/sysroot."""
    if not DEBIAN_KEYRING.is_file():
        raise RuntimeError(f"{DEBIAN_KEYRING} is missing: apt-get install debian-archive-keyring")
    state = root() / "apt"

    def fill(target: Path) -> None:
        debs = state / "debs"
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        options = _apt(state)
        run_command(["apt-get", *options, "update"])
        run_command(["apt-get", *options, "download", *GUEST_PACKAGES], cwd=debs)
        for deb in sorted(debs.glob("*.deb")):
            run_command(["dpkg", "-x", deb, target])
        shutil.rmtree(debs)

    return _install(root() / "sysroot", "\n".join((DEBIAN_SUITE, *GUEST_PACKAGES)), fill)


def _source_hash(march: str) -> str:
    # the toolchain file is under cpp/, which the sources' digest covers
    return hashlib.sha256(f"{march}\0{kernel_sources_digest()}".encode()).hexdigest()[:16]


def ensure_native_library(site: Path, march: str = "armv8-a", jobs: int = 2) -> Path:
    """This checkout's kernel library cross-built for AArch64 with ``-march`` (default
    every AArch64 CPU), linked against ``site``'s wheels; built once per source state."""
    if not (REPO_ROOT / "CMakeLists.txt").is_file():
        raise RuntimeError(f"{REPO_ROOT} is not a source checkout: the kernels' sources are needed")

    def fill(target: Path) -> None:
        cmake_kernels(target, site, march, "aarch64", jobs=jobs)

    stamp = _source_hash(march)
    return _install(root() / f"lib-{stamp}", stamp, fill) / "libkokoro_ext_kernels.so"


@dataclass(frozen=True)
class Emulator:
    """An aarch64 CPython under qemu-user with the run side (``prepare``)."""

    sysroot: Path
    site: Path
    library: Path  # the cross-built native kernel library
    cpu: str = "max"  # qemu's CPU model (qemu-aarch64-static -cpu help)

    def command(self, args: Sequence[str | Path]) -> list[str]:
        """``python3.11 args...`` under qemu."""
        python = self.sysroot / "usr" / "bin" / "python3.11"
        return [QEMU, "-cpu", self.cpu, "-L", str(self.sysroot), str(python), *map(str, args)]

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default os.environ) with the guest's module path and kernel library;
        the host's own Python settings are dropped."""
        env = {k: v for k, v in (os.environ if base is None else base).items()
               if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}  # fmt: skip
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(self.site)])
        env["KOKORO_EXT_LIBRARY"] = str(self.library)
        return env

    def run(self, args: Sequence[str | Path], **kwargs) -> subprocess.CompletedProcess:
        """``python3.11 args...`` under qemu (subprocess.run's keywords)."""
        env = self.environment(kwargs.pop("env", None))
        return subprocess.run(self.command(args), env=env, **kwargs)


def prepare(cpu: str = "max", march: str = "armv8-a") -> Emulator:
    """Everything an emulated run needs, from the cache or set up now (minutes, once);
    RuntimeError naming what is missing."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"emulating AArch64 needs {', '.join(missing)}")
    site = ensure_site()
    return Emulator(ensure_sysroot(), site, ensure_native_library(site, march), cpu)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.tools.emulation", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cpu", default="max", help="qemu CPU model (default max: every feature)")
    parser.add_argument("--march", default="armv8-a", help="-march of the native kernel library")
    parser.add_argument("args", nargs="*", help="the guest Python's arguments (after --)")
    options = parser.parse_args(argv)
    try:
        emulator = prepare(options.cpu, options.march)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not options.args:
        print(f"sysroot: {emulator.sysroot}\nsite: {emulator.site}\nlibrary: {emulator.library}")
        print("run:", " ".join(emulator.command(["..."])))
        return 0
    return emulator.run(options.args).returncode


if __name__ == "__main__":
    sys.exit(main())
