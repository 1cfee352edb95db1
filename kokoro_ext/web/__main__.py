"""``python -m kokoro_ext.web --artifacts DIR``: the demo page of a browser build, served
on 127.0.0.1 (kokoro_ext.web.server: the headers WebAssembly threads need)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kokoro_ext.web.server import StaticServer


def check_build(directory: Path) -> None:
    """ValueError saying what is wrong if ``directory`` is no browser build with its page."""
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        raise ValueError(f"{directory} has no manifest.json: build one with "
                         "`python -m kokoro_ext.build --target webgpu --out DIR`")  # fmt: skip
    kind = json.loads(manifest.read_text()).get("target", {}).get("kind")
    if kind != "webgpu":
        raise ValueError(f"{directory} is a build for {kind}, not for a browser: build one with "
                         "`python -m kokoro_ext.build --target webgpu --out DIR`")  # fmt: skip
    if not (directory / "index.html").is_file():
        raise ValueError(f"{directory} has no index.html: rebuild it with this version")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kokoro_ext.web", description=__doc__)
    parser.add_argument("--artifacts", type=Path, required=True, help="a --target webgpu build")
    parser.add_argument("--port", type=int, default=8000, help="default 8000; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args(argv)
    try:
        check_build(options.artifacts)
        server = StaticServer(options.artifacts, options.host, options.port)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"Kokoro's page: {server.url}index.html (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
