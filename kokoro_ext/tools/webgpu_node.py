"""A WebGPU build's stages in node on Dawn, for machines with a GPU and no browser.

``NodeWebGpu(directory)`` starts ``node webgpu_node.mjs`` (beside this file) on a
``--target webgpu`` build: the build's own ``kokoro.js`` and tvmjs, with
``navigator.gpu`` from npm ``webgpu`` (Dawn's node bindings; its Vulkan backend needs
the Vulkan loader, ``libvulkan.so.1``, and a driver: a GPU's, or SwiftShader's, which
Debian's chromium ships and ``swiftshader_icd`` finds).  ``run_stage`` runs one stage on
numpy arrays and returns its outputs, as ``kokoro_ext.tools.browser.Browser.run_stage``
does, so ``browser_stages`` makes a StageProvider of it; ``seconds`` holds each call's
time in node (inputs in, outputs back on the host) and ``adapter`` the adapter Dawn chose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from kokoro_ext.run import cache

#: Dawn's node bindings, as npm publishes them, and their tarball's SHA-256.
WEBGPU_PACKAGE = "webgpu@0.6.2"
WEBGPU_SHA256 = "77a6be6513b9f7c2e94425620ce603efb38cdc5d0393e1b31a1b0c8479330ffd"
#: Where Debian's chromium keeps SwiftShader's Vulkan driver (its manifest).
SWIFTSHADER_ICD = Path("/usr/lib/chromium/vk_swiftshader_icd.json")
SCRIPT = Path(__file__).with_name("webgpu_node.mjs")


class NodeUnavailable(RuntimeError):
    """node, npm ``webgpu`` or the Vulkan loader is missing."""


def webgpu_package() -> Path:
    """The folder of npm ``webgpu`` (checked against its SHA-256), from npm into the cache
    once."""
    from kokoro_ext.build.web.runtime import ToolchainError, npm_tarball

    target = cache.cache_dir() / "web" / f"webgpu-{WEBGPU_SHA256[:12]}"
    if (target / "package.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="webgpu-", dir=target.parent) as scratch:
        try:
            tarball = npm_tarball(WEBGPU_PACKAGE, WEBGPU_SHA256, Path(scratch))
        except ToolchainError as error:
            raise NodeUnavailable(str(error)) from error
        with tarfile.open(tarball) as archive:
            archive.extractall(scratch, filter="data")
        shutil.move(str(Path(scratch) / "package"), target)
    return target


def vulkan_loader() -> str | None:
    """The Vulkan loader's library name, if this machine has it (Dawn's Vulkan backend
    loads libvulkan.so.1; Debian: libvulkan1)."""
    import ctypes.util

    return ctypes.util.find_library("vulkan")


def swiftshader_env() -> dict[str, str]:
    """The environment that points Vulkan at SwiftShader (no GPU); {} without it."""
    return {"VK_ICD_FILENAMES": str(SWIFTSHADER_ICD)} if SWIFTSHADER_ICD.is_file() else {}


class NodeWebGpu:
    """The WebGPU build ``directory`` in a node process on Dawn (``env``: added to node's
    environment, e.g. ``swiftshader_env()``)."""

    def __init__(self, directory: Path, env: dict[str, str] | None = None,
                 package: Path | None = None) -> None:  # fmt: skip
        node = shutil.which("node")
        if node is None:
            raise NodeUnavailable("node is not on PATH: the WebGPU build runs in node on Dawn")
        self.directory = Path(directory)
        self.package = package or webgpu_package()
        self.seconds: list[tuple[str, float]] = []
        self.adapter = ""
        self._scratch = tempfile.TemporaryDirectory(prefix="webgpu-node-")
        self._process = subprocess.Popen(
            [node, str(SCRIPT), str(self.directory), str(self.package)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip

    def __enter__(self) -> NodeWebGpu:
        return self

    def run_stage(self, name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The build's stage ``name`` on ``inputs`` (numpy, in its signature's order)."""
        folder = Path(self._scratch.name)
        specs = []
        for i, array in enumerate(inputs):
            file = folder / f"in-{name}-{i}.bin"
            file.write_bytes(np.ascontiguousarray(array).tobytes())
            specs.append({"file": str(file), "dtype": str(array.dtype), "shape": list(array.shape)})
        request = {"stage": name, "inputs": specs, "outputs": str(folder)}
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(timeout=30)
            error = self._process.stderr.read() if self._process.stderr else ""
            raise RuntimeError(f"node exited ({self._process.returncode}): {error[-3000:]}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the {name} stage failed in node: {reply['error']}")
        self.seconds.append((name, reply["seconds"]))
        self.adapter = reply["adapter"]
        return [
            np.fromfile(o["file"], dtype=o["dtype"]).reshape(o["shape"]) for o in reply["outputs"]
        ]

    def __exit__(self, *_exception: object) -> None:
        self.close()

    def close(self) -> None:
        """Ends node (its stdin closed: it finishes the requests it has) and removes the
        arrays' files."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()
        self._scratch.cleanup()
