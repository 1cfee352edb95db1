"""``python -m kokoro_ext.web``: what it serves, with which headers, and what it refuses."""

from __future__ import annotations

import json
import subprocess
import sys
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
