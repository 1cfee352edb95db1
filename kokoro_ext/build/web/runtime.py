"""TVM's web runtime, compiled with emscripten from the pinned TVM's sources, and the link
of a stage into one WebAssembly module that tvmjs loads.

The runtime is TVM's ``web/`` (``wasm_runtime``, ``tvmjs_support``, ``webgpu_runtime``,
as ``web/Makefile`` makes them, but as wasm objects, not bitcode: bitcode is compiled
again at every link, which doubled a stage's link time), compiled from what the wheels
ship (``tvm/web/emcc``, ``tvm/src/runtime``, ``tvm/include``, tvm_ffi's ``src`` and
``include``) and the few TVM headers they lack (``SUPPORT``: kokoro_ext/third_party/tvm,
package data).  It is compiled once per TVM version and emscripten and kept in the cache
(``$KOKORO_TVM_EXT_CACHE/web``).

``link`` is what ``export_library`` takes as ``fcompile``: the model's host code as a
wasm *object* file (``object_format = "o"``; emscripten's ``wasm-ld`` cannot read the
bitcode of TVM's newer LLVM), linked with the runtime by ``emcc`` with the options of
``tvm.support.emcc.create_tvmjs_wasm``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tvm
import tvm_ffi

from kokoro_ext.run import cache

#: The runtime's parts, compiled from ``web/emcc/<name>.cc``.
PARTS = ("wasm_runtime", "tvmjs_support", "webgpu_runtime")
#: emscripten's driver.  Debian's emcc needs NODE_PATH to find its node modules.
EMCC = "emcc"
_NODE_PATH = "/usr/share/nodejs"
#: TVM's headers the wheels lack (the one copy, which the native kernels' CMake build uses too).
SUPPORT = Path(__file__).resolve().parents[2] / "third_party" / "tvm"
#: Optimized for size: the runtime is most of a stage's module (its static initializers
#: register all of TVM's runtime functions, which keeps them all), and none of the model's
#: arithmetic runs in it (the stages' code and the kernels, compiled -O3, do that), so
#: -Oz makes each stage ~0.7 MB smaller for no time a stage spends.
_CFLAGS = ["-Oz", "-std=c++17", "-Wno-ignored-attributes"]
#: Code that runs on a stage's threads (kokoro_ext.build.web.kernels, cpp/web/threads.cc):
#: atomics, and thread-local storage of its own per thread.
THREADS_CFLAGS = ["-matomics", "-mbulk-memory"]
#: A stage's memory: its initial size and the most it grows to (wasm32's 2 GB), as the
#: wasm target's manifest records them for the page, which creates it (in 64 kB pages).
INITIAL_MEMORY = 2560 * 2**16
MAXIMUM_MEMORY = 32768 * 2**16
#: What cpp/web/threads.cc replaces: the web runtime's serial TVMBackendParallelLaunch,
#: and the allocator's entries, which it puts behind a lock.
_WRAPPED = ("TVMBackendParallelLaunch", "malloc", "free", "calloc", "realloc",
            "posix_memalign", "aligned_alloc", "memalign")  # fmt: skip
#: The system libraries emcc links into a STANDALONE_WASM module, as their thread-safe
#: (-mt) builds: shared memory takes no object compiled without atomics, and emcc picks
#: the -mt ones only with -pthread, which needs its JavaScript glue.
_THREADS_LIBS = ["-lstandalonewasm-memgrow", "-lstubs", "-lnoexit", "-lc-mt", "-ldlmalloc-mt",
                 "-lcompiler_rt-mt", "-lc++-mt-noexcept", "-lc++abi-mt-noexcept", "-lsockets-mt"]
#: A stage whose memory its threads share: the page creates it (shared) and passes it
#: to every instance of the module.
_THREADS_LDFLAGS = [
    "-sIMPORTED_MEMORY=1", "-Wl,--shared-memory", f"-sMAXIMUM_MEMORY={MAXIMUM_MEMORY}",
    "-Wl," + ",".join(f"--wrap={name}" for name in _WRAPPED), "-nodefaultlibs", *_THREADS_LIBS,
]  # fmt: skip
#: -O3: the link's binaryen passes also optimize the stage's code and the kernels.
_LDFLAGS = [
    "-O3", "--no-entry", "-s", "WASM_BIGINT=1", "-s", "ERROR_ON_UNDEFINED_SYMBOLS=0",
    "-s", "STANDALONE_WASM=1", "-s", "ALLOW_MEMORY_GROWTH=1", "-s", f"TOTAL_MEMORY={INITIAL_MEMORY}",
]  # fmt: skip


class ToolchainError(ValueError):
    """emscripten is missing or failed."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if Path(_NODE_PATH).is_dir():
        env["NODE_PATH"] = os.pathsep.join(p for p in (env.get("NODE_PATH"), _NODE_PATH) if p)
    return env


def run_emcc(args: list[str]) -> subprocess.CompletedProcess:
    """emcc with ``args``, its output captured."""
    return subprocess.run([emcc(), *args], capture_output=True, text=True, env=_env())


def emcc() -> str:
    """The path of emcc; ToolchainError saying how to get it."""
    path = shutil.which(EMCC)
    if path is None:
        raise ToolchainError(
            "emcc (emscripten) is not on PATH: WebAssembly builds compile TVM's web runtime "
            "and link with it (Debian/Ubuntu: apt-get install emscripten)"
        )
    return path


@functools.cache
def emcc_version() -> str:
    """emcc's first line of ``--version``."""
    out = subprocess.run([emcc(), "--version"], capture_output=True, text=True, env=_env())
    if out.returncode != 0:
        raise ToolchainError(f"emcc --version failed: {out.stderr.strip()[-500:]}")
    return out.stdout.splitlines()[0].strip()


def _source_root(root: Path) -> None:
    """Lay out a TVM source tree in ``root`` as web/Makefile expects it (copies: the
    sources include each other by relative paths, which links would break)."""
    tvm_dir = Path(tvm.__file__).parent
    ffi_dir = Path(tvm_ffi.__file__).parent
    shutil.copytree(SUPPORT, root, ignore=shutil.ignore_patterns("README.md"), dirs_exist_ok=True)
    shutil.copytree(tvm_dir / "include" / "tvm", root / "include" / "tvm", dirs_exist_ok=True)
    shutil.copytree(tvm_dir / "src" / "runtime", root / "src" / "runtime")
    shutil.copytree(tvm_dir / "web" / "emcc", root / "web" / "emcc")
    shutil.copytree(ffi_dir / "include", root / "3rdparty" / "tvm-ffi" / "include")
    shutil.copytree(ffi_dir / "src", root / "3rdparty" / "tvm-ffi" / "src")
    shutil.copytree(
        ffi_dir / "3rdparty" / "dlpack", root / "3rdparty" / "tvm-ffi" / "3rdparty" / "dlpack"
    )


def runtime_dir(threads: bool = False) -> Path:
    """The cached folder of the runtime's parts for this TVM and emcc (compiled for
    threads or not)."""
    flags = [*_CFLAGS, *(THREADS_CFLAGS if threads else [])]
    key = hashlib.sha256(f"{tvm.__version__}|{emcc_version()}|o|{flags}".encode()).hexdigest()
    return cache.cache_dir() / "web" / f"tvm-{tvm.__version__}-{key[:12]}"


def compile_objects(sources: list[Path], flags: list[str], folder: Path) -> list[Path]:
    """``folder/<stem>.o`` for each of ``sources``, compiled by emcc with ``flags`` in
    parallel where the cache lacks them; the folder appears whole or not at all."""
    parts = [folder / f"{source.stem}.o" for source in sources]
    if all(p.is_file() for p in parts):
        return parts
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".objects-", dir=folder.parent))

    def compile_one(source: Path) -> None:
        out = run_emcc([*flags, "-c", "-o", str(staging / f"{source.stem}.o"), str(source)])
        if out.returncode != 0:
            raise ToolchainError(f"emcc failed on {source}:\n{out.stderr[-3000:]}")

    try:
        with ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1)) as pool:
            list(pool.map(compile_one, sources))
        os.replace(staging, folder)  # a racing build's is as good
    except OSError:
        pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return parts


def runtime_parts(threads: bool = False) -> list[Path]:
    """The runtime's object files (for a stage with threads or not), compiled first if
    the cache lacks them."""
    folder = runtime_dir(threads)
    if all((folder / f"{name}.o").is_file() for name in PARTS):
        return [folder / f"{name}.o" for name in PARTS]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tvm-web-", dir=folder.parent) as scratch:
        sources, flags = runtime_sources(Path(scratch))
        return compile_objects(sources, [*flags, *(THREADS_CFLAGS if threads else [])], folder)


def runtime_sources(root: Path) -> tuple[list[Path], list[str]]:
    """The runtime's sources laid out in ``root`` (empty), and emcc's flags for them."""
    _source_root(root)
    includes = [
        f"-I{root}", f"-I{root / 'include'}", f"-I{root / '3rdparty/tvm-ffi/include'}",
        f"-I{root / '3rdparty/tvm-ffi/3rdparty/dlpack/include'}",
        f"-I{root / '3rdparty/compiler-rt'}",
    ]  # fmt: skip
    return [root / "web" / "emcc" / f"{name}.cc" for name in PARTS], [*includes, *_CFLAGS]


def link_flags(threads: bool = False) -> list[str]:
    """emcc's flags for a stage's link (with shared memory for threads or not)."""
    return [*_LDFLAGS, *(_THREADS_LDFLAGS if threads else [])]


def link(
    output: str, objects: list[str], options: list[str] | None = None, threads: bool = False
) -> None:
    """``export_library``'s ``fcompile``: ``objects`` linked with the web runtime into the
    WebAssembly module ``output``; ``threads``: with shared, imported memory, for the
    thread pool of cpp/web/threads.cc, which ``objects`` must hold."""
    parts = map(str, runtime_parts(threads))
    out = run_emcc([*link_flags(threads), "-o", output, *parts, *objects, *(options or [])])
    if out.returncode != 0:
        raise ToolchainError(f"emcc could not link {output}:\n{out.stderr[-3000:]}")


link.object_format = "o"  # type: ignore[attr-defined]


#: tvmjs, TVM's JavaScript runtime, as npm publishes it (the version of the pinned TVM),
#: and its tarball's SHA-256.
TVMJS_PACKAGE = "@mlc-ai/web-runtime@0.27.0-dev0"
TVMJS_SHA256 = "a934c7ae5f2e9b57cada58b409855ef549f3f5e623ee375a617123a6011dccbb"
#: The file a build ships it as, beside the stages.
TVMJS_FILE = "tvmjs.js"


def tvmjs_script() -> Path:
    """tvmjs's script (its ``lib/index.js``, a UMD bundle that defines ``tvmjs``), from
    npm into the cache once."""
    return npm_file(TVMJS_PACKAGE, TVMJS_SHA256, "lib/index.js", "tvmjs")


def npm_file(package: str, sha256: str, member: str, name: str) -> Path:
    """The file ``member`` of npm's tarball of ``package`` (name@version), checked
    against the tarball's ``sha256``, copied into the cache once as ``name-<sha>.js``."""
    target = cache.cache_dir() / "web" / f"{name}-{sha256[:12]}.js"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        with tarfile.open(npm_tarball(package, sha256, Path(tmp))) as tar:
            file = tar.extractfile(f"package/{member}")
            if file is None:
                raise ToolchainError(f"{package} has no {member}")
            partial = target.with_suffix(".part")
            partial.write_bytes(file.read())
            partial.replace(target)
    return target


def npm_tarball(package: str, sha256: str, folder: Path) -> Path:
    """npm's tarball of ``package`` (name@version) in ``folder``, checked against its
    ``sha256``; ToolchainError if npm is missing, fails or the bytes differ."""
    if shutil.which("npm") is None:
        raise ToolchainError(f"npm is not on PATH: {package} comes from npm")
    out = subprocess.run(["npm", "pack", package, "--silent"], cwd=folder,
                         capture_output=True, text=True)  # fmt: skip
    tarballs = sorted(folder.glob("*.tgz"))
    if out.returncode != 0 or len(tarballs) != 1:
        raise ToolchainError(f"npm pack {package} failed: {out.stderr.strip()[-500:]}")
    digest = hashlib.sha256(tarballs[0].read_bytes()).hexdigest()
    if digest != sha256:
        raise ToolchainError(f"{package}'s tarball has SHA-256 {digest}, expected {sha256}")
    return tarballs[0]
