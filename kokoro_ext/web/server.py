"""A folder over HTTP on 127.0.0.1, with the headers a browser build's page needs.

``StaticServer`` serves a ``--target webgpu`` build (its stages, tvmjs, the page) with
cross-origin isolation (COOP/COEP: SharedArrayBuffer, which WebAssembly threads need)
and the WebAssembly MIME type (``WebAssembly.instantiateStreaming`` refuses others).  Any
static host serving these headers works as well.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

#: The headers a page of a browser build needs, for other hosts too (docs/browser.md).
HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
}


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".js": "text/javascript"}  # fmt: skip

    def end_headers(self) -> None:
        if self.server.isolated:
            for name, value in HEADERS.items():
                self.send_header(name, value)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the base's name
        self.server.requests.append(self.path)
        # a site's root is its page (a folder listing otherwise)
        if self.path == "/" and self.server.index is not None:
            self.send_response(302)
            self.send_header("Location", "/" + self.server.index)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


class StaticServer:
    """``directory`` over HTTP on ``host``:``port`` (0: an ephemeral one), in a thread;
    ``/`` redirects to ``index`` (a path in ``directory``) where one is given;
    ``isolated=False``: without the cross-origin isolation headers, as a host that
    does not send them (a wasm build's stages then run on one thread)."""

    def __init__(
        self, directory: Path, host: str = "127.0.0.1", port: int = 0, index: str | None = None,
        isolated: bool = True,
    ):  # fmt: skip
        handler = functools.partial(_Handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer((host, port), handler)
        self.httpd.index = index
        self.httpd.isolated = isolated
        #: the paths of the GET requests served so far, in order (what a page downloaded)
        self.requests: list[str] = []
        self.httpd.requests = self.requests
        self.url = f"http://{host}:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
