"""A headless Chromium running a browser build, for tests and benches.

``Browser(directory)`` serves ``directory`` (a ``--target webgpu`` build) on 127.0.0.1
with the headers a page needs for WebAssembly threads (cross-origin isolation), starts
Debian's ``chromium`` headless through Playwright (its driver is playwright-core; no
browser download: ``executable_path``), with WebGPU on (``--enable-unsafe-webgpu``: on a
machine without a GPU, Chromium's SwiftShader runs it, which is for correctness, not
speed), opens the page and loads the build with its own module (``kokoro.js``).
``run_stage`` runs one stage on numpy arrays and returns its outputs.  ``load=False``: the
server and the browser only, no page (a bench opens its own with ``open_page``).
``tab(other)``: another build in a new tab of the same Chromium.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import shutil
from pathlib import Path
from collections.abc import Callable, Iterator
from types import TracebackType

import numpy as np

from kokoro_ext.web.server import StaticServer

#: Where Debian's chromium package puts the browser.
CHROMIUM = "chromium"
_ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-dev-shm-usage"]


class BrowserUnavailable(RuntimeError):
    """Chromium or Playwright is missing."""


def chromium() -> str:
    """The path of Chromium; BrowserUnavailable saying how to install it."""
    path = shutil.which(CHROMIUM)
    if path is None:
        raise BrowserUnavailable(
            "chromium is not on PATH: the browser tests and bench drive it headless "
            "(Debian/Ubuntu: apt-get install chromium)"
        )
    return path


def _encode(array: np.ndarray) -> dict:
    return {"data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode(),
            "dtype": str(array.dtype), "shape": list(array.shape)}  # fmt: skip


def _decode(value: dict) -> np.ndarray:
    data = np.frombuffer(base64.b64decode(value["data"]), dtype=value["dtype"])
    return data.reshape(value["shape"]).copy()


# In the page: base64 <-> typed arrays, and the build's stages by name.
_SETUP = """async ([base, threads]) => {
  const { loadBuild } = await import(base + "kokoro.js");
  const TYPES = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array };
  const decode = (v) => {
    const bytes = Uint8Array.from(atob(v.data), (c) => c.charCodeAt(0));
    return { data: new TYPES[v.dtype](bytes.buffer), shape: v.shape };
  };
  const encode = (t) => {
    const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    let text = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return { data: btoa(text), dtype: t.dtype, shape: t.shape };
  };
  const build = await loadBuild(base, { threads: threads ?? undefined });
  window.kokoroBuild = build;
  window.kokoroRunStage = async (name, inputs) =>
    (await build.run(name, inputs.map(decode))).map(encode);
  return build.gpu?.adapterInfo ? JSON.stringify(build.gpu.adapterInfo) : "";
}"""


class Browser:
    """A headless Chromium with ``directory``'s build loaded; a context manager."""

    def __init__(self, directory: Path, timeout_s: float = 600, load: bool = True):
        self.directory = Path(directory)
        self.timeout_ms = timeout_s * 1000
        self.load = load
        self.messages: list[str] = []

    def __enter__(self) -> Browser:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as err:
            raise BrowserUnavailable(
                "playwright is not installed: pip install 'kokoro-tvm-ext[test]'"
            ) from err
        executable = chromium()
        self.server = StaticServer(self.directory)
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(executable_path=executable, args=_ARGS)
            if not self.load:
                return self
            self.page = self._new_page(self._browser)
            self.adapter = self._load_build(self.page, self.server)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _load_build(self, page, server: StaticServer, threads: int | None = None) -> str:
        """Load ``server``'s build in ``page`` (a wasm build's stages on ``threads``,
        default: kokoro.js's); the adapter's description."""
        page.goto(server.url + "manifest.json")  # same origin as the build
        page.add_script_tag(url=server.url + "tvmjs.js")
        return page.evaluate(_SETUP, [server.url, threads])

    @contextlib.contextmanager
    def tab(
        self, directory: Path, threads: int | None = None, isolated: bool = True
    ) -> Iterator[Browser]:
        """``directory``'s build loaded in a new tab of this Chromium (a wasm build's
        stages on ``threads``; served without cross-origin isolation if not
        ``isolated``), as a Browser whose ``run_stage`` runs there (a second Browser
        cannot start beside this one: one Playwright a thread)."""
        view = copy.copy(self)
        view.directory = Path(directory)
        view.server = StaticServer(view.directory, isolated=isolated)
        page = None
        try:
            view.page = page = self._new_page(self._browser)
            view.adapter = self._load_build(page, view.server, threads)
            yield view
        finally:
            if page is not None:
                page.close()
            view.server.close()

    def _new_page(self, browser):
        page = browser.new_page()
        page.set_default_timeout(self.timeout_ms)
        page.on("console", lambda m: self.messages.append(m.text))
        return page

    def open_page(self, path: str = "index.html", webgpu: bool = True):
        """A new tab on the build's ``path`` (or a URL), once its script has set
        ``window.kokoroPage.ready`` (the demo page's: kokoro_ext/web/static/index.html).
        ``webgpu=False``: in a second Chromium without the flag, which on Linux has no
        WebGPU, as most browsers people have."""
        if webgpu:
            browser = self._browser
        else:
            if not hasattr(self, "_plain"):
                args = [a for a in _ARGS if a != "--enable-unsafe-webgpu"]
                self._plain = self._playwright.chromium.launch(
                    executable_path=chromium(), args=args
                )
            browser = self._plain
        page = self._new_page(browser)
        page.goto(path if "://" in path else self.server.url + path)
        page.wait_for_function("() => window.kokoroPage?.ready")
        return page

    def run_stage(self, name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The build's stage ``name`` on ``inputs`` (numpy, in its signature's order)."""
        outputs = self.page.evaluate(
            "([name, inputs]) => window.kokoroRunStage(name, inputs)",
            [name, [_encode(a) for a in inputs]],
        )
        return [_decode(o) for o in outputs]

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for name in ("_plain", "_browser"):
            if hasattr(self, name):
                getattr(self, name).close()
        if hasattr(self, "_playwright"):
            self._playwright.stop()
        if hasattr(self, "server"):
            self.server.close()


def browser_stages(browser: Browser, manifest) -> Callable[[str], Callable[..., dict]]:
    """A StageProvider (kokoro_ext.run.pipeline) running the stages in ``browser``: keyword
    inputs by name, int64 ones passed as the build's int32, outputs by name."""

    def provider(name: str):
        signature = manifest.stages[name].signature

        def run(**inputs: np.ndarray) -> dict[str, np.ndarray]:
            arrays = []
            for spec in signature.inputs:
                value = np.asarray(inputs[spec.name])
                if value.dtype == np.int64 and spec.dtype == "int32":
                    value = value.astype(np.int32)
                arrays.append(np.ascontiguousarray(value, dtype=spec.dtype))
            outputs = browser.run_stage(name, arrays)
            return {spec.name: out for spec, out in zip(signature.outputs, outputs, strict=True)}

        return run

    return provider
