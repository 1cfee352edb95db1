"""The wasm target's thread pool (cpp/web/threads.cc) under load, in node: the pool and
tests/data/threads_check.cc linked as a stage is (shared memory, the -mt libraries,
``--wrap``), instantiated as kokoro.js instantiates a stage, its threads running
wasm-thread.js.  The stages on threads in Chromium: tests/test_browser_wasm.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kokoro_ext.build.web import kernels, runtime

if (shutil.which("emcc") is None or shutil.which("node") is None) and not os.environ.get("CI"):
    pytest.skip("needs emscripten and node (Debian: emscripten, nodejs)", allow_module_level=True)

DATA = Path(__file__).parent / "data"
WASM_THREAD = kernels.CPP.parent / "kokoro_ext" / "web" / "static" / "wasm-thread.js"


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("threads")
    flags = ["-O2", "-std=c++17", *runtime.THREADS_CFLAGS, "-DKOKORO_EXT_THREADS_ALONE",
             *kernels._includes()]  # fmt: skip
    objects = []
    for source in (kernels.CPP / "web" / "threads.cc", DATA / "threads_check.cc"):
        objects.append(str(folder / f"{source.stem}.o"))
        out = runtime.run_emcc([*flags, "-c", str(source), "-o", objects[-1]])
        assert out.returncode == 0, out.stderr[-2000:]
    wasm = folder / "check.wasm"
    out = runtime.run_emcc([*runtime.link_flags(threads=True), "-o", str(wasm), *objects])
    assert out.returncode == 0, out.stderr[-2000:]
    return wasm


def run(module: Path, threads: int, launches: int, tasks: int) -> dict:
    out = subprocess.run(
        ["node", str(DATA / "threads_check.js"), str(module), str(WASM_THREAD), str(threads),
         str(launches), str(tasks)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("tasks", [0, 2, 7])
def test_every_task_runs_once_on_the_pools_threads(module, tasks):
    """2000 launches on 4 threads (0 tasks: one a thread; 7: more tasks than threads,
    each claimed by whichever thread is free): no task lost or run twice, no heap block
    overwritten by another thread's, nested launches in their caller's thread; the
    workers joined, and more than the caller ran tasks, each thread with its own
    thread-local storage."""
    got = run(module, threads=4, launches=2000, tasks=tasks)
    assert got["errors"] == 0
    assert got["threads"] == 4 and got["tasks"] == (tasks or 4)
    assert bin(got["seen"]).count("1") >= 2


def test_without_workers_the_caller_runs_one_task(module):
    """No workers (a page not cross-origin isolated): one task in the caller, as the web
    runtime's serial launch (the lambda divides its work by the env's num_task)."""
    got = run(module, threads=1, launches=200, tasks=5)
    assert got == {"errors": 0, "threads": 1, "seen": 0b10, "tasks": 1}
