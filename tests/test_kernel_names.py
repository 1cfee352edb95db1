"""The native library's global function names and kokoro_ext.run.kernels agree: a kernel
registered in C++ without a registry entry, or an entry without a kernel, fails here
instead of where compiled code first calls it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tvm_ffi

from kokoro_ext.run import kernels, native

ROOT = Path(__file__).resolve().parents[1]
# A quoted name in the C++ sources: what .def registers, the kName in messages, lookups.
_CPP_NAME = re.compile(r'"(kokoro_ext\.[A-Za-z0-9_]+)"')


def test_the_loaded_library_registers_exactly_the_registry():
    native.load()
    # (a CUDA build's cuDNN library registers its own, where a test loaded it)
    registered = {
        name for name in tvm_ffi.registry.list_global_func_names()
        if name.startswith(kernels.PREFIX) and name not in kernels.CUDA_LIBRARIES
    }
    unlisted, unregistered = sorted(registered - kernels.ALL), sorted(kernels.ALL - registered)
    assert not unlisted, f"registered, missing from kokoro_ext.run.kernels: {unlisted}"
    assert not unregistered, f"in kokoro_ext.run.kernels, not registered: {unregistered}"


def test_the_cpp_sources_name_exactly_the_registry():
    # Also catches a registration added to the sources before the library is rebuilt.
    sources = [*ROOT.glob("cpp/src/**/*.cc"), *ROOT.glob("cpp/include/**/*.h")]
    named = {m for path in sources for m in _CPP_NAME.findall(path.read_text())}
    unlisted, unnamed = sorted(named - kernels.ALL), sorted(kernels.ALL - named)
    assert not unlisted, f"named in cpp/, missing from kokoro_ext.run.kernels: {unlisted}"
    assert not unnamed, f"in kokoro_ext.run.kernels, named nowhere in cpp/: {unnamed}"


def test_the_package_spells_no_kernel_name_itself():
    """Outside the registry, kokoro_ext refers to each kernel by its constant."""
    registry = ROOT / "kokoro_ext" / "run" / "kernels.py"
    spelled = []
    for path in sorted((ROOT / "kokoro_ext").rglob("*.py")):
        if path == registry:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in kernels.ALL:
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert spelled == []


def test_every_registry_name_is_used():
    """Each constant is referred to somewhere in the package or the tests."""
    constants = {
        key for key, value in vars(kernels).items()
        if key.isupper() and isinstance(value, str) and value in kernels.ALL
    }
    assert {getattr(kernels, key) for key in constants} == kernels.ALL
    text = "\n".join(
        p.read_text() for d in ("kokoro_ext", "tests") for p in (ROOT / d).rglob("*.py")
        if p.name != "kernels.py"
    )
    unused = sorted(key for key in constants if not re.search(rf"\bkernels\.{key}\b", text))
    assert unused == []
