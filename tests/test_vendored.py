"""TVM's headers the wheels omit, vendored once (kokoro_ext/third_party/tvm): the native
kernels' CMake build and the web runtime build both read that folder, and an installed
package carries it (package data)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kokoro_ext.build.web import runtime

ROOT = Path(__file__).resolve().parents[1]
HEADERS = sorted(p for p in runtime.SUPPORT.rglob("*") if p.is_file() and p.name != "README.md")
needs_emcc = pytest.mark.skipif(
    shutil.which("emcc") is None and not os.environ.get("CI"),
    reason="needs emscripten (Debian: emscripten)",
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_each_vendored_header_is_in_the_checkout_once():
    assert {"io.h", "serializer.h", "builtin_fp16.h"} <= {p.name for p in HEADERS}
    tracked = subprocess.run(["git", "ls-files", "-z", "*.h"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")  # fmt: skip
    copies: dict[str, list[str]] = {}
    for name in filter(None, tracked):
        copies.setdefault(_digest(ROOT / name), []).append(name)
    for header in HEADERS:
        assert copies[_digest(header)] == [str(header.relative_to(ROOT))], copies[_digest(header)]
    # the native kernels' CMake build takes the same folder (tvm/support after the wheel's)
    include = str((runtime.SUPPORT / "include").relative_to(ROOT))
    assert include in (ROOT / "CMakeLists.txt").read_text()


def test_an_installed_package_lays_out_the_web_runtime_with_them(tmp_path):
    # setup.py's build_py makes what an install copies: the package and its data
    lib, egg = tmp_path / "lib", tmp_path / "egg"
    egg.mkdir()
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(egg),
         "build_py", "--build-lib", str(lib)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    # that copy, not the checkout, lays out the runtime's sources
    code = """
import json, sys
from pathlib import Path
from kokoro_ext.build.web import runtime
sources, flags = runtime.runtime_sources(Path(sys.argv[1]))
print(json.dumps({"module": runtime.__file__, "sources": [str(s) for s in sources]}))
"""
    tree = tmp_path / "tree"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(lib)}
    result = subprocess.run([sys.executable, "-c", code, str(tree)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    laid = json.loads(result.stdout.splitlines()[-1])
    assert Path(laid["module"]).is_relative_to(lib), laid["module"]
    assert all(Path(s).is_file() for s in laid["sources"]), laid["sources"]
    for header in HEADERS:
        relative = header.relative_to(runtime.SUPPORT)
        assert (tree / relative).read_bytes() == header.read_bytes(), relative


@needs_emcc
def test_the_web_runtime_sources_find_every_header_they_include(tmp_path):
    sources, flags = runtime.runtime_sources(tmp_path / "tree")
    included = set()
    for source in sources:
        out = runtime.run_emcc([*flags, "-M", str(source)])
        assert out.returncode == 0, out.stderr[-3000:]
        included |= {Path(p).resolve() for p in out.stdout.replace("\\\n", " ").split()[1:]}
    support = tmp_path / "tree" / "include" / "tvm" / "support"
    assert {support / "io.h", support / "serializer.h"} <= included
    # and without the vendored io.h they would not: the check can fail
    (support / "io.h").unlink()
    out = runtime.run_emcc([*flags, "-M", str(sources[0])])
    assert out.returncode != 0 and "tvm/support/io.h" in out.stderr, out.stderr[-3000:]


def test_a_changed_vendored_header_changes_the_kernels_cache_key(tmp_path, monkeypatch):
    # kernel_build's digest keys the runtime wheel's cached kernels and the emulated
    # AArch64 library: it covers the one copy of the headers, as CMake reads them
    from kokoro_ext.tools import kernel_build

    root = tmp_path / "checkout"
    for source in kernel_build.SOURCES:
        target = root / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, target)
    monkeypatch.setattr(kernel_build, "REPO_ROOT", root)
    copies = tuple(root / s.relative_to(ROOT) for s in kernel_build.SOURCES)
    monkeypatch.setattr(kernel_build, "SOURCES", copies)
    before = kernel_build.kernel_sources_digest()
    header = root / runtime.SUPPORT.relative_to(ROOT) / "include" / "tvm" / "support" / "io.h"
    header.write_text(header.read_text() + "\n")
    assert kernel_build.kernel_sources_digest() != before
