"""bench/gpu.py for the tests: the script as a module, and a Python path of torch and numpy
alone (with what torch imports), as on the GPU machine the bundle is for."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
#: torch, numpy and what torch needs (its Requires-Dist), by their folder and file names
_TORCH_AND_NUMPY = ("torch", "numpy", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
                    "filelock", "fsspec", "typing_extensions")  # fmt: skip


def gpu_script():
    """bench/gpu.py, imported."""
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def torch_only_path(folder: Path) -> Path:
    """``folder`` with links to this environment's torch and numpy and their dependencies
    (packages, dist-info records), and nothing else of its site-packages."""
    folder.mkdir(parents=True, exist_ok=True)
    site = Path(torch.__file__).resolve().parents[1]
    for entry in site.iterdir():
        link = folder / entry.name
        if entry.name.lower().startswith(_TORCH_AND_NUMPY) and not link.is_symlink():
            link.symlink_to(entry)  # a second run in the same scratch keeps the first's
    return folder


def run_in_bundle(bundle: Path, code: str, scratch: Path, timeout: int = 900):
    """``code`` in a fresh ``python -S`` (no site-packages: no TVM, kokoro, transformers,
    nor this checkout) whose path is ``bundle`` and torch and numpy alone; the bundle's
    folder is the current one.  Returns the finished process (output captured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KOKORO_EXT"))}
    env.update(PYTHONPATH=str(torch_only_path(scratch / "site")), HOME=str(scratch / "home"),
               XDG_CACHE_HOME=str(scratch / "cache"))  # fmt: skip
    prelude = (
        "import sys, importlib.util as u; sys.path.insert(0, '.')\n"
        "absent = [m for m in ('tvm', 'transformers', 'huggingface_hub', 'loguru', 'misaki', "
        "'scipy') if u.find_spec(m) is not None]\n"
        "assert not absent, f'the bundle should run without {absent}'\n"
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", prelude + code],
        cwd=bundle, env=env, capture_output=True, text=True, timeout=timeout,
    )
