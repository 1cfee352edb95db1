"""Loading the native libraries of the run side: TVM's runtime library and the kernels.

The kernel library (cpp/, built by CMake or setup.py) registers its kernels as tvm-ffi
global functions (their names: kokoro_ext.run.kernels) when it is loaded; compiled Relax
code reaches them by name through ``call_dps_packed``.  ``kokoro_ext/lib/`` holds either
the library built for this machine (``libkokoro_ext_kernels.so``: a source or editable
install) or a runtime wheel's variants (``VARIANTS``: one per instruction set, the best
one this CPU runs is loaded), each with the CPU record CMake wrote beside it.

TVM's runtime library (the Relax VM, the thread pool) comes from the apache-tvm wheel
when it is installed, else from ``kokoro_ext/lib/`` (a runtime wheel carries it):
``runtime_library``.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm_ffi

from kokoro_ext.run.cpu import HostCPU, instruction_features, missing_instructions

#: The kernel library built for this machine (setup.py's extension
#: kokoro_ext.lib.libkokoro_ext_kernels, or CMake by hand).
LIBRARY_NAME = "libkokoro_ext_kernels.so"
#: kokoro_ext/lib/: where setup.py and CMakeLists.txt put the libraries, beside the
#: package rather than in run/.
LIBRARY_DIR = Path(__file__).resolve().parents[1] / "lib"
#: $KOKORO_EXT_LIBRARY: a kernel library, or a folder of them, in place of kokoro_ext/lib.
LIBRARY_ENV = "KOKORO_EXT_LIBRARY"
#: $KOKORO_EXT_ISA: the variant to load (e.g. avx2), instead of the best this CPU runs.
ISA_ENV = "KOKORO_EXT_ISA"
RUNTIME_NAME = "libtvm_runtime.so"
OPENBLAS_NAME = "libscipy_openblas.so"
#: Beside a runtime wheel's copy of libtvm_runtime.so: {"version": the apache-tvm release}.
RUNTIME_RECORD = "libtvm_runtime.json"
_loaded: Path | None = None
_runtime_loaded: Path | None = None


def record_path(library: Path) -> Path:
    """The CPU record CMakeLists.txt writes beside ``library``: the -march it was built
    with and the compiler's predefined macros for it (__AVX2__, __AVX512F__, ...)."""
    return library.with_name(library.name.removesuffix(".so") + ".cpu.json")


CPU_RECORD = record_path(Path(LIBRARY_NAME)).name


@dataclass(frozen=True)
class Variant:
    """One kernel library of a runtime wheel: the sources compiled with ``-march``."""

    name: str  # what $KOKORO_EXT_ISA takes
    march: str

    @property
    def file_name(self) -> str:
        return f"libkokoro_ext_kernels.{self.name}.so"  # CMake: -DKOKORO_EXT_VARIANT=name


#: The kernel libraries a runtime wheel ships for each architecture, best first.  On
#: x86-64 the kernels have an AVX-512 path, an AVX2 path and a plain one (products.h,
#: quantized.h); the microarchitecture levels are the portable -march for each, and
#: x86-64 (SSE2) runs on every x86-64 CPU.  Every AArch64 CPU has NEON.
VARIANTS: dict[str, tuple[Variant, ...]] = {
    "x86_64": (
        Variant("avx512", "x86-64-v4"),
        Variant("avx2", "x86-64-v3"),
        Variant("baseline", "x86-64"),
    ),
    "aarch64": (Variant("neon", "armv8-a"),),
}


@dataclass(frozen=True)
class KernelLibrary:
    """A kernel library on disk and which variant it is (None: built for one machine)."""

    path: Path
    variant: str | None = None


def installed(where: Path) -> list[KernelLibrary]:
    """The kernel libraries at ``where`` (a library, or a folder), in order of preference:
    the one built for this machine, then the variants best first."""
    if where.is_file():
        return [KernelLibrary(where)]
    found = [KernelLibrary(where / LIBRARY_NAME)]
    found += [
        KernelLibrary(where / v.file_name, v.name) for arch in VARIANTS.values() for v in arch
    ]
    return [library for library in found if library.path.is_file()]


def select(
    libraries: Sequence[KernelLibrary], isa: str | None = None, host: HostCPU | None = None
) -> KernelLibrary:
    """The first of ``libraries`` that ``host`` runs, or with ``isa`` the variant of that
    name; ValueError naming the missing instructions if ``host`` cannot run it."""
    if isa:
        named = [library for library in libraries if library.variant == isa]
        if not named:
            names = ", ".join(lib.variant for lib in libraries if lib.variant) or "none"
            raise ValueError(f"${ISA_ENV}={isa}: no such kernel library here (variants: {names})")
        record = CPURecord.read(named[0].path, host)
        missing = missing_instructions(record.features, host)
        if missing:
            host = host or HostCPU.detect()
            raise ValueError(
                f"${ISA_ENV}={isa} asks for the kernels compiled with -march={record.march}, "
                f"which use instructions this CPU ({host.name}) lacks: {', '.join(missing)}; "
                f"unset ${ISA_ENV} to load the best variant this CPU runs"
            )
        return named[0]
    refusals = []
    for library in libraries:
        try:
            check_runs_here(library.path, host)
            return library
        except ValueError as err:
            refusals.append(err)
    raise refusals[0]  # the preferred library's refusal says how to get one that runs


def library_path(host: HostCPU | None = None) -> Path:
    """The kernel library to load on ``host``, or FileNotFoundError saying how to build
    one; ValueError if none of them runs there (or not the one $KOKORO_EXT_ISA names).

    ``$KOKORO_EXT_LIBRARY`` overrides the default location, ``kokoro_ext/lib/``.
    """
    override = os.environ.get(LIBRARY_ENV)
    where = Path(override) if override else LIBRARY_DIR
    libraries = installed(where)
    if not libraries:
        raise FileNotFoundError(
            f"native kernel library not found at {where}; build it with "
            "`cmake -S . -B build && cmake --build build` (or `pip install -e .`) "
            f"from the repository root, or set ${LIBRARY_ENV} to its path"
        )
    return select(libraries, os.environ.get(ISA_ENV) or None, host).path


@dataclass(frozen=True)
class CPURecord:
    """What the native library was compiled for."""

    march: str
    compiler: str
    features: frozenset[str]  # LLVM feature names of the instruction sets it may use

    @staticmethod
    def read(library: Path, host: HostCPU | None = None) -> CPURecord:
        """The record beside ``library``; ValueError if there is none or it is unreadable."""
        path = record_path(library)
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


@dataclass(frozen=True)
class RuntimeLibrary:
    """TVM's runtime library and the apache-tvm release it comes from."""

    path: Path
    version: str


def runtime_library() -> RuntimeLibrary:
    """The TVM runtime library this process uses (ValueError if there is none).

    The apache-tvm wheel's when it is installed: ``import tvm`` loads that copy, and one
    process must not load two (both would register the same global functions).  Else
    the copy in kokoro_ext/lib/ (a runtime wheel's, taken from the pinned apache-tvm
    wheel, whose 259 MB compiler library the run side never loads).
    """
    spec = importlib.util.find_spec("tvm")  # finds the package without importing it
    for location in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "lib" / RUNTIME_NAME
        if path.is_file():
            return RuntimeLibrary(path, importlib.metadata.version("apache-tvm"))
    path = LIBRARY_DIR / RUNTIME_NAME
    try:
        version = json.loads((LIBRARY_DIR / RUNTIME_RECORD).read_text())["version"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(
            "the TVM runtime library was found neither in the apache-tvm wheel "
            f"(tvm/lib/{RUNTIME_NAME}) nor with its version record in {LIBRARY_DIR}: install "
            "the runtime wheel, or apache-tvm (README.md, Deploy)"
        ) from None
    return RuntimeLibrary(path, version)


def load_runtime() -> Path:
    """Load TVM's runtime library once (``runtime_library``); returns its path.

    Global, as TVM itself loads it, so that stage libraries and the kernels resolve its
    symbols; its global functions (the VM loader) register with tvm-ffi.
    """
    global _runtime_loaded
    if _runtime_loaded is None:
        path = runtime_library().path
        ctypes.CDLL(str(path), ctypes.RTLD_GLOBAL)
        _runtime_loaded = path
    return _runtime_loaded


def openblas_library() -> Path:
    """The scipy-openblas32 wheel's OpenBLAS, which the kernels link (ValueError if missing)."""
    spec = importlib.util.find_spec("scipy_openblas32")  # its import reads its metadata
    for location in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "lib" / OPENBLAS_NAME
        if path.is_file():
            return path
    raise ValueError(
        f"OpenBLAS ({OPENBLAS_NAME} of the scipy-openblas32 wheel), which the native kernels "
        "link, is not installed: pip install scipy-openblas32"
    )


def load() -> Path:
    """Load the kernel library once per process so its global functions are registered.

    Returns the path that was loaded.  Refuses (ValueError) a library built for
    instructions this CPU lacks, instead of letting it die on SIGILL.
    """
    global _loaded
    if _loaded is None:
        path = library_path()
        # The kernels link the runtime (its thread pool) and OpenBLAS: loaded first, each
        # from where the run side finds it, so that the library needs no search path of
        # its own to them wherever it is (a wheel installed with --target, a test's copy)
        # and uses the runtime's one copy.
        load_runtime()
        openblas = openblas_library()
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
            ctypes.CDLL(str(openblas))
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
