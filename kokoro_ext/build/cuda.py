"""CUDA kernels as machine code: nvcc at build time, on a machine with or without a GPU.

TVM 0.27's CUDA codegen writes CUDA C++ and hands it to the CUDA module factory of its
CUDA runtime library (``libtvm_runtime_cuda.so``), which compiles it through the
``tvm_callback_cuda_compile`` global function.  That library needs the driver's
``libcuda.so.1``: where it cannot load (no driver, the usual build machine), TVM keeps the
**source** (format ``cuda``) in a placeholder module, and loading such a library compiles
it at run time with TVM's compiler and NVRTC.  A build of ours never ships source:

* ``compiling``: during a CUDA build, ``tvm_callback_cuda_compile`` (TVM's documented
  extension point) is ours, so that where the factory exists its compile is ``compile``;
* ``pack_imports``: ``export_library``'s ``fpack_imports`` hook.  It serializes the
  module tree with TVM's own serializer (``runtime.ModulePackImportsToTensor``) and
  replaces the payload of every CUDA module still holding source with ``compile``'s
  fatbin, in the CUDA module's own layout (format, function table, code: TVM's
  ``CUDAModuleNode::SaveToBytes``), then writes the blob as the C array TVM's packer
  writes (``ModulePackImportsToC``).  The runtime loads it with ``cuModuleLoadData``.

``compile`` runs nvcc without ``--use_fast_math`` (TVM's default has it): the source
stage takes ``sin`` of phases of thousands of radians, where the fast ``__sinf`` is off
by far more than float32's rounding.

``images`` reads the CUDA payloads back out of an exported library (tests, tools).
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm_ffi

#: What ``tvm_callback_cuda_compile`` and the packer write in a CUDA module's format field.
SOURCE_FORMAT, FATBIN_FORMAT = "cuda", "fatbin"
_U64 = struct.Struct("<Q")
#: The symbol of a library's packed module tree (tvm-ffi's ``symbol::tvm_ffi_library_bin``).
BLOB_SYMBOL = "__tvm_ffi__library_bin"
#: TVM's headers' half/bfloat16 operator switches (tvm.support.nvcc passes the same).
_NVCC_FLAGS = (
    "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "--expt-relaxed-constexpr",
)


def nvcc() -> str:
    """nvcc's path, or ValueError saying where it comes from."""
    path = shutil.which("nvcc")
    if path is None:
        raise ValueError(
            "nvcc is not on PATH: a CUDA build compiles its kernels with it (the CUDA "
            "toolkit 13, e.g. /usr/local/cuda/bin, or pip install nvidia-cuda-nvcc); no "
            "GPU is needed to build"
        )
    return path


def gencode(architectures: Sequence[str], ptx: str | None) -> list[str]:
    """nvcc's ``-gencode`` flags: machine code (SASS) for each ``sm_XX`` of
    ``architectures`` and, with ``ptx`` (``compute_XX``), its PTX for later GPUs."""
    flags = []
    for arch in architectures:
        flags += ["-gencode", f"arch=compute_{arch.removeprefix('sm_')},code={arch}"]
    if ptx:
        flags += ["-gencode", f"arch={ptx},code={ptx}"]
    return flags


def nvcc_command(
    source: Path, out: Path, architectures: Sequence[str], ptx: str | None = None
) -> list[str]:
    """nvcc compiling the file ``source`` to the fatbin ``out``: optimized, IEEE ``sin``,
    division and square roots (no ``--use_fast_math``)."""
    return [nvcc(), "--fatbin", *_NVCC_FLAGS, *gencode(architectures, ptx),
            "-o", str(out), str(source)]  # fmt: skip


def compile(source: str, architectures: Sequence[str], ptx: str | None = None) -> bytes:
    """``source`` (TVM's CUDA C++) as a fatbin of ``architectures`` (and ``ptx``);
    RuntimeError with nvcc's message if it fails."""
    with tempfile.TemporaryDirectory(prefix="kokoro-cuda-") as tmp:
        cu, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.fatbin"
        cu.write_text(source)
        command = nvcc_command(cu, out, architectures, ptx)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
        return out.read_bytes()


@contextlib.contextmanager
def compiling(architectures: Sequence[str], ptx: str | None) -> Iterator[None]:
    """Meanwhile, TVM's CUDA compile callback is ``compile`` for ``architectures``; the
    previous callback (tvm.support.nvcc's) is put back after."""
    name = "tvm_callback_cuda_compile"
    previous = tvm_ffi.get_global_func(name, allow_missing=True)

    def callback(source, *_target):
        return bytearray(compile(str(source), architectures, ptx))

    tvm_ffi.register_global_func(name, callback, override=True)
    try:
        yield
    finally:
        if previous is not None:
            tvm_ffi.register_global_func(name, previous, override=True)
        else:
            tvm_ffi.remove_global_func(name)


# -- the serialized module tree ---------------------------------------------------------
# TVM's layout (src/target/codegen.cc ModuleSerializer, export_dso=true), little-endian:
#   u64 size of what follows | vector<u64> import tree rows | vector<u64> children |
#   per module group: string kind, then for a serializable one: bytes SaveToBytes()
# a vector and a string are a u64 count then the items.  A CUDA module's SaveToBytes:
#   string format | map<string, FunctionInfo> | bytes code


@dataclass(frozen=True)
class Image:
    """One CUDA module of a library: its format and its code."""

    format: str
    code: bytes


class _Reader:
    def __init__(self, data: bytes, at: int = 0):
        self.data, self.at = data, at

    def u64(self) -> int:
        (value,) = _U64.unpack_from(self.data, self.at)
        self.at += 8
        return value

    def bytes(self) -> bytes:
        size = self.u64()
        value = self.data[self.at : self.at + size]
        if len(value) != size:
            raise ValueError("truncated TVM module blob")
        self.at += size
        return value

    def vector(self) -> list[int]:
        return [self.u64() for _ in range(self.u64())]


def _string(value: bytes) -> bytes:
    return _U64.pack(len(value)) + value


def _modules(blob: bytes) -> Iterator[tuple[str, int, int]]:
    """(kind, start, end) of each serialized module's payload in ``blob`` (TVM's layout;
    ``_lib``, the host code, has none: start == end)."""
    read = _Reader(blob)
    if read.u64() != len(blob) - 8:
        raise ValueError("a TVM module blob whose size field disagrees with its length")
    rows = read.vector()
    read.vector()
    for _ in range(len(rows) - 1):
        kind = read.bytes().decode()
        start = read.at
        if kind != "_lib":
            read.bytes()
        yield kind, start, read.at


def _image(payload: bytes) -> tuple[Image, bytes]:
    """A CUDA module's SaveToBytes as its image and the function table's bytes."""
    read = _Reader(payload)
    fmt = read.bytes().decode()
    table_start = read.at
    # the function table (a few kB) is TVM's to lay out; the code is the last field,
    # a size then that many bytes to the end: the first offset where that holds
    for end in range(table_start, len(payload) - 7):
        (size,) = _U64.unpack_from(payload, end)
        if end + 8 + size == len(payload):
            return Image(fmt, payload[end + 8 :]), payload[table_start:end]
    raise ValueError("a CUDA module whose code field cannot be found")


def _with_code(fmt: str, table: bytes, code: bytes) -> bytes:
    return _string(fmt.encode()) + table + _string(code)


def _table_and_source(payload: bytes, source: str) -> bytes:
    """The function table of a CUDA module holding ``source`` (its last field, known)."""
    read = _Reader(payload)
    read.bytes()
    tail = _string(source.encode())
    if not payload.endswith(tail):
        raise ValueError(
            "TVM's serialized CUDA module does not end with its source: this TVM writes "
            "another layout than kokoro_ext.build.cuda reads; pin apache-tvm as setup.py does"
        )
    return payload[read.at : len(payload) - len(tail)]


def pack_imports(architectures: Sequence[str], ptx: str | None):
    """``export_library``'s ``fpack_imports``: the module tree as TVM packs it, each CUDA
    module that holds source compiled to a fatbin (``compile``)."""

    def pack(module, is_system_lib: bool, prefix: str, workspace: str) -> str:
        if is_system_lib or prefix:
            raise ValueError("a CUDA stage library is a shared library, not a system library")
        packed = tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(module)
        blob = _tensor_bytes(packed)
        sources = [m.inspect_source(SOURCE_FORMAT) for m in _cuda_imports(module)]
        out, at, cuda = bytearray(), 0, 0
        for kind, start, end in _modules(blob):
            if kind != "cuda":
                continue
            read = _Reader(blob, start)
            payload = read.bytes()
            fmt = _Reader(payload).bytes().decode()
            if fmt == SOURCE_FORMAT:
                table = _table_and_source(payload, sources[cuda])
                fatbin = compile(sources[cuda], architectures, ptx)
                payload = _with_code(FATBIN_FORMAT, table, fatbin)
            cuda += 1
            out += blob[at:start] + _string(payload)
            at = end
        out += blob[at:]
        out[:8] = _U64.pack(len(out) - 8)
        path = Path(workspace) / "devc.c"
        path.write_text(_c_array(bytes(out)))
        return str(path)

    return pack


def _cuda_imports(module) -> list:
    """The CUDA modules of ``module``'s import tree, in the serializer's order (depth
    first from the host module, as it numbers them)."""
    found, stack, seen = [], list(reversed(module.imports)), set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.kind == "cuda":
            found.append(m)
        stack.extend(reversed(m.imports))
    return found


def _tensor_bytes(tensor) -> bytes:
    import numpy as np

    return np.from_dlpack(tensor).tobytes()


def _c_array(blob: bytes) -> str:
    """``blob`` as TVM's packer writes it in C (ModulePackImportsToC): the exported
    symbol the library loader looks for."""
    name = tvm_ffi.get_global_func("runtime.ModuleImportsBlobName")()
    if name != BLOB_SYMBOL:
        raise ValueError(f"this TVM packs imports as {name}, kokoro_ext reads {BLOB_SYMBOL}")
    rows = (",".join(f"0x{b:02x}" for b in blob[i : i + 20]) for i in range(0, len(blob), 20))
    return (
        '#ifdef __cplusplus\nextern "C" {\n#endif\n'
        f"extern const unsigned char {name}[];\n"
        f"const unsigned char {name}[{len(blob)}] = {{\n  " + ",\n  ".join(rows) + "\n};\n"
        "#ifdef __cplusplus\n}\n#endif\n"
    )


def library_blob(path: str | Path) -> bytes:
    """The packed module tree of the exported library ``path`` (its
    ``__tvm_ffi__library_bin``), read by loading it without running it: the symbols of
    TVM's runtime it needs must be loaded (kokoro_ext.run.native.load_runtime)."""
    from kokoro_ext.run import native

    native.load_runtime()
    library = ctypes.CDLL(str(path), ctypes.RTLD_LOCAL)
    start = ctypes.addressof(ctypes.c_char.in_dll(library, BLOB_SYMBOL))
    size = ctypes.c_uint64.from_address(start).value
    return ctypes.string_at(start, size + 8)


def images(path: str | Path) -> list[Image]:
    """The CUDA modules of the exported library ``path``: format and code."""
    blob = library_blob(path)
    found = []
    for kind, start, _ in _modules(blob):
        if kind == "cuda":
            found.append(_image(_Reader(blob, start).bytes())[0])
    return found


def architectures_of(fatbin: bytes) -> tuple[list[str], list[str]]:
    """(SASS architectures, PTX architectures) of an nvcc fatbin (``sm_90``;
    ``compute_90``), read from its entries' headers: a u32 magic, u16 version, u16 header
    size, u64 size; per entry a u16 kind (1 PTX, 2 ELF), u16 version, u32 header size,
    u64 payload size, and at byte 28 the u32 architecture (90 for sm_90).  ValueError for
    what is not a fatbin (CUDA source, PTX text)."""
    magic, _, header, size = struct.unpack_from("<IHHQ", fatbin, 0)
    if magic != 0xBA55ED50:
        raise ValueError(f"not a fatbin (magic {magic:#x}): {fatbin[:40]!r}")
    sass, ptx, at = [], [], header
    while at < header + size:
        kind, _, entry_header = struct.unpack_from("<HHI", fatbin, at)
        (payload,) = _U64.unpack_from(fatbin, at + 8)
        (arch,) = struct.unpack_from("<I", fatbin, at + 28)
        if kind == 2 and fatbin[at + entry_header : at + entry_header + 4] == b"\x7fELF":
            sass.append(f"sm_{arch}")
        elif kind == 1:
            ptx.append(f"compute_{arch}")
        at += entry_header + payload
    return sorted(sass), sorted(ptx)
