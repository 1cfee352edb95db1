"""``python -m kokoro_ext.web --artifacts DIR``: the demo page of a browser build, served
on 127.0.0.1 (kokoro_ext.web.server: the headers WebAssembly threads need).  DIR is a
``--target webgpu`` or ``--target wasm`` build, or a site holding both as ``webgpu/`` and
``wasm/``, whose page tries WebGPU first and falls back to the CPU."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kokoro_ext.web.server import StaticServer


#: A site's build folders, in the page's order of preference.
SITE_BUILDS = ("webgpu", "wasm")
_HOW = "build one with `python -m kokoro_ext.build --target webgpu (or wasm) --out DIR`"


def check_build(directory: Path) -> str:
    """The page's path in ``directory``: a browser build, or a site holding such builds
    in ``webgpu/`` and ``wasm/`` (the page of the first, trying them in that order).
    ValueError saying what is wrong otherwise."""
    present = [name for name in SITE_BUILDS if (directory / name / "manifest.json").is_file()]
    if present:
        for name in present:
            _browser_build(directory / name)
        others = ",".join(["./", *(f"../{name}/" for name in present[1:])])
        return f"{present[0]}/index.html" + (f"?builds={others}" if len(present) > 1 else "")
    _browser_build(directory)
    return "index.html"


def _browser_build(directory: Path) -> None:
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        raise ValueError(f"{directory} has no manifest.json (nor webgpu/ or wasm/ builds): {_HOW}")
    target = json.loads(manifest.read_text()).get("target", {})
    if target.get("kind") != "webgpu" and not str(target.get("mtriple", "")).startswith("wasm32"):
        raise ValueError(f"{directory} is a build for {target.get('kind')}, not for a browser: {_HOW}")
    if not (directory / "index.html").is_file():
        raise ValueError(f"{directory} has no index.html: rebuild it with this version")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kokoro_ext.web", description=__doc__)
    parser.add_argument("--artifacts", type=Path, required=True,
                        help="a --target webgpu or wasm build, or a folder with both as webgpu/ and wasm/")  # fmt: skip
    parser.add_argument("--port", type=int, default=8000, help="default 8000; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args(argv)
    try:
        page = check_build(options.artifacts)
        server = StaticServer(options.artifacts, options.host, options.port, index=page)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"Kokoro's page: {server.url} ({server.url}{page}; Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
