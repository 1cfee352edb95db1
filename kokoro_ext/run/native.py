"""Loading the native kernel library (cpp/, built by CMake or setup.py).

The library registers its kernels as tvm-ffi global functions (their names:
kokoro_ext.run.kernels) when it is loaded; compiled Relax code reaches them by name
through ``call_dps_packed``.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import tvm_ffi

from kokoro_ext.run.cpu import HostCPU, instruction_features, missing_instructions

LIBRARY_NAME = "libkokoro_ext_kernels.so"
#: kokoro_ext/lib/: where setup.py (extension kokoro_ext.lib.libkokoro_ext_kernels) and
#: CMakeLists.txt put the library, beside the package rather than in run/.
LIBRARY_DIR = Path(__file__).resolve().parents[1] / "lib"
# Written by CMakeLists.txt beside the library: the -march it was built with and the
# compiler's predefined macros for it (__AVX2__, __AVX512F__, ...).
CPU_RECORD = "libkokoro_ext_kernels.cpu.json"
_ENV_OVERRIDE = "KOKORO_EXT_LIBRARY"
_loaded: Path | None = None


def library_path() -> Path:
    """Return the path of the native library, or raise FileNotFoundError saying how to build it.

    ``$KOKORO_EXT_LIBRARY`` overrides the default location, ``kokoro_ext/lib/``.
    """
    override = os.environ.get(_ENV_OVERRIDE)
    path = Path(override) if override else LIBRARY_DIR / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"native kernel library not found at {path}; build it with "
            "`cmake -S . -B build && cmake --build build` (or `pip install -e .`) "
            f"from the repository root, or set ${_ENV_OVERRIDE} to its path"
        )
    return path


@dataclass(frozen=True)
class CPURecord:
    """What the native library was compiled for."""

    march: str
    compiler: str
    features: frozenset[str]  # LLVM feature names of the instruction sets it may use

    @staticmethod
    def read(library: Path, host: HostCPU | None = None) -> CPURecord:
        """The record beside ``library``; ValueError if there is none or it is unreadable."""
        path = library.with_name(CPU_RECORD)
        try:
            record = json.loads(path.read_text())
            macros, march, compiler = record["macros"], record["march"], record["compiler"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"the native kernel library {library} has no readable CPU record {path.name} "
                f"({err}), so it cannot be checked against this CPU; rebuild it here with "
                "`pip install --no-build-isolation -e .` (or ./bootstrap.sh)"
            ) from err
        return CPURecord(march, compiler, features_from_macros(macros, host))


#: ACLE feature macros (AArch64) -> LLVM features; x86's spell their feature's name.
ARM_MACROS = {
    "__ARM_NEON": "neon",
    "__ARM_FEATURE_AES": "aes",
    "__ARM_FEATURE_SHA2": "sha2",
    "__ARM_FEATURE_SHA3": "sha3",
    "__ARM_FEATURE_SM4": "sm4",
    "__ARM_FEATURE_CRC32": "crc",
    "__ARM_FEATURE_ATOMICS": "lse",
    "__ARM_FEATURE_QRDMX": "rdm",
    "__ARM_FEATURE_COMPLEX": "complxnum",
    "__ARM_FEATURE_JCVT": "jsconv",
    "__ARM_FEATURE_FRINT": "fptoint",
    "__ARM_FEATURE_FP16_SCALAR_ARITHMETIC": "fullfp16",
    "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC": "fullfp16",
    "__ARM_FEATURE_FP16_FML": "fp16fml",
    "__ARM_FEATURE_DOTPROD": "dotprod",
    "__ARM_FEATURE_MATMUL_INT8": "i8mm",
    "__ARM_FEATURE_BF16_SCALAR_ARITHMETIC": "bf16",
    "__ARM_FEATURE_BF16_VECTOR_ARITHMETIC": "bf16",
    "__ARM_FEATURE_SVE": "sve",
    "__ARM_FEATURE_SVE2": "sve2",
    "__ARM_FEATURE_SME": "sme",
}


def features_from_macros(macros: list[str], host: HostCPU | None = None) -> frozenset[str]:
    """GCC/Clang feature macros -> LLVM instruction features (``__SSE4_1__`` -> ``sse4.1``,
    ``__AMX_TILE__`` -> ``amx-tile``, ``__ARM_FEATURE_DOTPROD`` -> ``dotprod``); macros
    that name no CPU feature ``host`` can tell are dropped."""
    names = set()
    for macro in macros:
        if macro.startswith("__ARM_"):
            names.add(ARM_MACROS.get(macro, ""))
            continue
        name = macro.strip("_").lower()
        name = re.sub(r"^(sse4|avx10)_(\d)$", r"\1.\2", name).replace("_", "-")
        names.add(name)
    return instruction_features(names, host)


def check_runs_here(library: Path, host: HostCPU | None = None) -> CPURecord:
    """ValueError, before loading, if ``library`` uses instructions ``host`` lacks."""
    record = CPURecord.read(library, host)
    missing = missing_instructions(record.features, host)
    if missing:
        built = f"-march={record.march}" if record.march else "the compiler's default -march"
        host = host or HostCPU.detect()
        portable = (
            "armv8-a` (any AArch64 CPU" if host.arch == "aarch64"
            else "x86-64-v3` (any AVX2 machine"
        )
        raise ValueError(
            f"the native kernel library {library} was built with {built} and uses "
            f"instructions this CPU ({host.name}) lacks: {', '.join(missing)}. Rebuild it on "
            "this machine (`pip install --no-build-isolation -e .` or ./bootstrap.sh), or build "
            f"a portable one with `cmake -S . -B build -DKOKORO_EXT_MARCH={portable}; empty "
            "for the compiler's baseline)"
        )
    return record


#: OpenBLAS's AVX-512 kernels and the instructions they use.  Its run-time CPU detection
#: gives CPUs it does not know (AMD Zen 5, or a KVM guest with masked CPUID) its AVX2
#: "Haswell" kernels, and so does an inherited OPENBLAS_CORETYPE=Haswell set for such
#: guests: the decoder's GEMMs then run at half the vector width (0.37 s vs 0.25 s for
#: "Hello world." on a Zen 5 guest).
_OPENBLAS_AVX512 = ("SkylakeX", frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"}))


def openblas_coretype(host: HostCPU | None = None) -> str | None:
    """The OpenBLAS core type to ask for on ``host``: the AVX-512 kernels where the host has
    their instructions, else None (OpenBLAS's own detection)."""
    name, needs = _OPENBLAS_AVX512
    enabled = (host or HostCPU.detect()).enabled
    return name if needs <= enabled else None


def load() -> Path:
    """Load the native library once per process so its global functions are registered.

    Returns the path that was loaded.  Refuses (ValueError) a library built for
    instructions this CPU lacks, instead of letting it die on SIGILL.
    """
    global _loaded
    if _loaded is None:
        path = library_path()
        check_runs_here(path)
        # The kernels link a private OpenBLAS (scipy-openblas32; numpy has its own), which
        # reads its settings once, when it is loaded with them: set them for that load only.
        # OPENBLAS_CORETYPE from the host's verified features (KOKORO_EXT_OPENBLAS_CORETYPE
        # overrides); one thread, as the kernels call BLAS from TVM's pool and set it so
        # themselves, but only after OpenBLAS started its own pool, whose threads spin
        # for a tenth of a second at every start, on a core the stages need.
        coretype = os.environ.get("KOKORO_EXT_OPENBLAS_CORETYPE") or openblas_coretype()
        settings = {"OPENBLAS_NUM_THREADS": "1"}
        if coretype:
            settings["OPENBLAS_CORETYPE"] = coretype
        inherited = {name: os.environ.get(name) for name in settings}
        os.environ.update(settings)
        try:
            # RTLD_GLOBAL is not needed: registration happens in the library's static
            # initializers, into the libtvm_ffi.so that Python already has loaded.
            ctypes.CDLL(str(path))
        finally:
            for name, value in inherited.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        _loaded = path
    return _loaded


def has_function(name: str) -> bool:
    """Whether a tvm-ffi global function of this name is registered (after ``load()``)."""
    return tvm_ffi.get_global_func(name, allow_missing=True) is not None
