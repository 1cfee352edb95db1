"""The browser's JavaScript as an npm package: ``kokoro_ext/web/static`` is its folder
(``package.json``, ``index.d.ts``, the ES modules), the one copy that builds copy beside
their stages and that ``npm pack`` packs.  Its version is the Python package's.

``typescript()`` is npm's TypeScript (pinned by version and SHA-256, unpacked into the
cache once), whose ``tsc --noEmit`` checks ``index.d.ts`` and code written against it
(tests/test_web_package.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from kokoro_ext.build.web import runtime
from kokoro_ext.run import cache

#: The package's folder in this source tree.
FOLDER = Path(__file__).resolve().parents[2] / "web" / "static"
#: The type checker, as npm publishes it, and its tarball's SHA-256.
TYPESCRIPT_PACKAGE = "typescript@5.9.3"
TYPESCRIPT_SHA256 = "10e108c9cf7d5f2879053dff18515fb405abf2ccef63eaaf017d9c571687a1d3"


def manifest() -> dict:
    """The package's ``package.json``."""
    return json.loads((FOLDER / "package.json").read_text())


def typescript() -> Path:
    """The unpacked TypeScript package (its ``bin/tsc`` runs in node), from npm into the
    cache once."""
    target = cache.cache_dir() / "web" / f"typescript-{TYPESCRIPT_SHA256[:12]}"
    if (target / "bin" / "tsc").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="typescript-", dir=target.parent) as tmp:
        tarball = runtime.npm_tarball(TYPESCRIPT_PACKAGE, TYPESCRIPT_SHA256, Path(tmp))
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        try:
            (Path(tmp) / "package").replace(target)
        except OSError:  # a racing test's is as good
            if not (target / "bin" / "tsc").is_file():
                raise
    return target


def tsc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``tsc args`` in node, run in ``cwd``."""
    if shutil.which("node") is None:
        raise runtime.ToolchainError("node is not on PATH: tsc runs in node")
    return subprocess.run(["node", str(typescript() / "bin" / "tsc"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def pack(out: Path) -> Path:
    """``npm pack`` of the package into ``out``; the tarball's path."""
    if shutil.which("npm") is None:
        raise runtime.ToolchainError("npm is not on PATH: it packs the package")
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["npm", "pack", str(FOLDER), "--pack-destination", str(out), "--silent"],
                          capture_output=True, text=True, cwd=out, timeout=120)  # fmt: skip
    tarballs = sorted(out.glob("*.tgz"))
    if done.returncode != 0 or len(tarballs) != 1:
        raise runtime.ToolchainError(f"npm pack {FOLDER} failed: {done.stderr.strip()[-500:]}")
    return tarballs[0]


#: What files.json leaves out: the manifest (which names it) and itself.
_UNLISTED = {"manifest.json", "files.json"}


def write_file_list(directory: Path) -> dict[str, str]:
    """Write ``directory/files.json``: ``{path: sha256}`` of every file of a browser build
    but the manifest, paths relative to the folder with ``/``.  The page's service worker
    (``sw.js``) holds what it caches to these, as it holds the stages to the manifest's."""
    import hashlib

    listed = {
        path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.relative_to(directory).as_posix() not in _UNLISTED
    }
    (directory / "files.json").write_text(json.dumps(listed, indent=0, sort_keys=True))
    return listed
