"""``python -m kokoro_ext.web``: what it serves, with which headers, and what it refuses."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from kokoro_ext.web.__main__ import check_build
from kokoro_ext.web.server import HEADERS, StaticServer


@pytest.fixture
def page_dir(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"target": {"kind": "webgpu"}}))
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / "text.wasm").write_bytes(b"\0asm\1\0\0\0")
    return tmp_path


def test_serves_the_folder_cross_origin_isolated(page_dir):
    server = StaticServer(page_dir)
    try:
        with urllib.request.urlopen(server.url + "index.html") as response:
            assert response.read() == b"<!doctype html>"
            for name, value in HEADERS.items():
                assert response.headers[name] == value
        with urllib.request.urlopen(server.url + "text.wasm") as response:
            assert response.headers["Content-Type"] == "application/wasm"
    finally:
        server.close()


def test_the_root_of_a_site_is_its_page(page_dir):
    server = StaticServer(page_dir, index="index.html?builds=./")
    try:
        with urllib.request.urlopen(server.url) as response:  # follows the redirect
            assert response.url == server.url + "index.html?builds=./"
            assert response.read() == b"<!doctype html>"
    finally:
        server.close()


def test_check_build_accepts_a_browser_build(page_dir):
    assert check_build(page_dir) == "index.html"


def test_a_site_of_both_builds_tries_webgpu_then_wasm(page_dir, tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    page_dir.rename(site / "webgpu")
    (site / "wasm").mkdir()
    (site / "wasm" / "manifest.json").write_text(json.dumps(
        {"target": {"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm"}}))
    (site / "wasm" / "index.html").write_text("<!doctype html>")
    assert check_build(site) == "webgpu/index.html?builds=./,../wasm/"


def test_refuses_a_cpu_build(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"target": {"kind": "llvm"}}))
    with pytest.raises(ValueError, match="build for llvm, not for a browser.*--target webgpu"):
        check_build(tmp_path)


def test_cli_says_what_is_wrong(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "kokoro_ext.web", "--artifacts", str(tmp_path), "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "has no manifest.json" in result.stderr and "Traceback" not in result.stderr


def _get(url: str, encoding: str | None, method: str = "GET"):
    request = urllib.request.Request(url, method=method)
    if encoding is not None:
        request.add_header("Accept-Encoding", encoding)
    with urllib.request.urlopen(request) as response:  # urllib decodes no encoding
        return response.headers, response.read()


def test_text_like_files_go_gzip_encoded_the_weights_as_they_are(tmp_path):
    code = bytes(range(256)) * 64 + b"(module)" * 1000  # compressible, like a stage
    (tmp_path / "text.wasm").write_bytes(code)
    lexicon = {"word": "wˈɜːd"} | {str(i): "x" for i in range(500)}
    (tmp_path / "lexicon.json").write_text(json.dumps(lexicon))
    weights = bytes(range(256)) * 64
    (tmp_path / "text.weights").write_bytes(weights)
    server = StaticServer(tmp_path)
    try:
        headers, body = _get(server.url + "text.wasm", "gzip, deflate, br")
        assert headers["Content-Encoding"] == "gzip"
        assert headers["Content-Type"] == "application/wasm"
        assert int(headers["Content-Length"]) == len(body) < len(code) / 4
        assert gzip.decompress(body) == code
        for name, value in HEADERS.items():
            assert headers[name] == value
        assert headers["Vary"] == "Accept-Encoding"
        # the same bytes again (kept), and a HEAD's headers match the GET's
        assert _get(server.url + "text.wasm", "gzip")[1] == body
        head, nothing = _get(server.url + "text.wasm", "gzip", "HEAD")
        assert nothing == b"" and head["Content-Length"] == headers["Content-Length"]
        headers, body = _get(server.url + "lexicon.json", "gzip")
        assert headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == (tmp_path / "lexicon.json").read_bytes()
        headers, body = _get(server.url + "text.weights", "gzip")
        assert headers["Content-Encoding"] is None and body == weights
        assert int(headers["Content-Length"]) == len(weights)
    finally:
        server.close()


@pytest.mark.parametrize("encoding", [None, "identity", "gzip;q=0", "br"])
def test_a_client_that_refuses_gzip_gets_the_bytes(tmp_path, encoding):
    code = b"(module)" * 1000
    (tmp_path / "text.wasm").write_bytes(code)
    server = StaticServer(tmp_path)
    try:
        headers, body = _get(server.url + "text.wasm", encoding)
        assert headers["Content-Encoding"] is None and body == code
        assert int(headers["Content-Length"]) == len(code)
    finally:
        server.close()


def test_a_changed_file_is_compressed_again(tmp_path):
    (tmp_path / "tts.js").write_text("export const a = 1;\n")
    server = StaticServer(tmp_path)
    try:
        assert gzip.decompress(_get(server.url + "tts.js", "gzip")[1]) == b"export const a = 1;\n"
        (tmp_path / "tts.js").write_text("export const a = 22;\n")
        assert gzip.decompress(_get(server.url + "tts.js", "gzip")[1]) == b"export const a = 22;\n"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            _get(server.url + "missing.js", "gzip")
    finally:
        server.close()
