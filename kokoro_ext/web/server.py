"""A folder over HTTP on 127.0.0.1, with the headers a browser build's page needs.

``StaticServer`` serves a ``--target webgpu`` build (its stages, tvmjs, the page) with
cross-origin isolation (COOP/COEP: SharedArrayBuffer, which WebAssembly threads need)
and the WebAssembly MIME type (``WebAssembly.instantiateStreaming`` refuses others).  Any
static host serving these headers works as well.

Like the CDNs a build is published on (Cloudflare's default compressed types include
``application/wasm``, JavaScript, JSON and HTML), it sends the text-like files
(``COMPRESSED``: the stages' code, the scripts, the lexicons) gzip-encoded to a client
that accepts gzip, each compressed once and kept in memory; the weights, ``voice.npy``
and the voices (binary types, which those hosts send as they are) go as they are.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import gzip
import http.server
import io
import os
import threading
from pathlib import Path

#: The headers a page of a browser build needs, for other hosts too (docs/browser.md).
HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
}
#: The suffixes served gzip-encoded to a client that accepts it.
COMPRESSED = frozenset({".wasm", ".js", ".mjs", ".json", ".html"})


def accepts_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (``gzip`` or ``*``, not at q=0)."""
    for part in (header or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "x-gzip", "*"):
            q = params.strip().lower()
            if q.startswith("q="):
                try:
                    return float(q[2:]) > 0
                except ValueError:
                    return False
            return True
    return False


class _Gzipped:
    """Files' gzip encodings, made once per file and modification (path, mtime, size)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.files: dict[str, tuple[tuple[int, int], bytes]] = {}

    def get(self, path: str, stat: os.stat_result) -> bytes:
        version = (stat.st_mtime_ns, stat.st_size)
        with self.lock:  # one compression of a file at a time, however many ask
            known = self.files.get(path)
            if known is None or known[0] != version:
                with open(path, "rb") as f:
                    known = version, gzip.compress(f.read(), compresslevel=6, mtime=0)
                self.files[path] = known
            return known[1]


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".js": "text/javascript"}  # fmt: skip

    def end_headers(self) -> None:
        if self.server.isolated:
            for name, value in HEADERS.items():
                self.send_header(name, value)
        self.send_header("Cache-Control", "no-cache")
        if Path(self.path.split("?", 1)[0]).suffix in COMPRESSED:
            self.send_header("Vary", "Accept-Encoding")  # caches keep each encoding apart
        super().end_headers()

    def send_head(self):
        """The base's, but a COMPRESSED file goes gzip-encoded where the client accepts it."""
        path = self.translate_path(self.path)
        if (Path(path).suffix not in COMPRESSED or path.endswith("/")
                or not accepts_gzip(self.headers.get("Accept-Encoding"))):
            return super().send_head()
        try:
            stat = os.stat(path)
            body = self.server.gzipped.get(path, stat) if os.path.isfile(path) else None
        except OSError:
            body = None
        if body is None:
            return super().send_head()  # its 404 or folder
        if self._not_modified(stat.st_mtime):
            self.send_response(304)
            self.end_headers()
            return None
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", self.date_time_string(stat.st_mtime))
        self.end_headers()
        return io.BytesIO(body)

    def _not_modified(self, mtime: float) -> bool:
        """Whether the request's If-Modified-Since is at or after ``mtime`` (the base's rule)."""
        since = self.headers.get("If-Modified-Since")
        if since is None or "If-None-Match" in self.headers:
            return False
        try:
            when = email.utils.parsedate_to_datetime(since)
        except (TypeError, IndexError, OverflowError, ValueError):
            return False
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        modified = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc)
        return modified.replace(microsecond=0) <= when

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
        self.httpd.gzipped = _Gzipped()
        #: the paths of the GET requests served so far, in order (what a page downloaded)
        self.requests: list[str] = []
        self.httpd.requests = self.requests
        self.url = f"http://{host}:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
