"""What every bench shares: skip an engine that cannot load, save results before plotting.

A bench's run can take an hour; it must not end in a traceback that loses it.  So an
engine that fails to load (a missing package, model file or build, anything) is reported
in one line and left out, the results (``NAME.json`` and ``NAME.txt``) are written before
anything is plotted, and the chart is drawn only if matplotlib imports.

Stdlib only at import: bench/user.py's parent process must stay small (see there).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any, Callable


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``, for a table or a log."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def load_engine(name: str, load: Callable[[], Any], log=print) -> tuple[Any, str | None]:
    """``(load(), None)``, or ``(None, reason)`` after saying in one line why ``name`` is
    skipped.  Any exception counts: a bench compares what loads."""
    try:
        return load(), None
    except Exception as error:  # noqa: BLE001 - the reason is reported, the bench goes on
        reason = one_line(error)
        skipped(name, reason, log)
        return None, reason


def skipped(name: str, reason: str, log=print) -> None:
    """The one line that says an engine is left out, and why."""
    log(f"skipped {name}: {reason}")


def write_results(out: Path, name: str, result: dict, table: str,
                  plot: Callable[[dict, Path], None] | None = None, log=print) -> None:
    """Print ``table``; write ``NAME.json`` and ``NAME.txt`` to ``out``, then ``NAME.png``
    with ``plot(result, path)`` if matplotlib is installed."""
    log("")
    log(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(
        json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n")
    (out / f"{name}.txt").write_text(table + "\n")
    written = [f"{name}.json"]
    if plot is not None and plot_if_possible(plot, result, out / f"{name}.png", log):
        written.append(f"{name}.png")
    log(f"\nwrote {out / (name + '.txt')}, " + ", ".join(written))


def plot_if_possible(plot: Callable[[dict, Path], None], result: dict, path: Path,
                     log=print) -> bool:
    """``plot(result, path)`` on matplotlib's Agg backend; False (said in one line) when
    matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        log(f"no chart {path.name}: matplotlib is not installed (pip install matplotlib)")
        return False
    matplotlib.use("Agg")
    plot(result, path)
    return True


def machine_record(packages: tuple[str, ...]) -> dict:
    """What a result records of the machine: CPU, cores, memory, load, platform, Python and
    the versions of ``packages`` (None where one is not installed)."""
    import importlib.metadata
    import os

    versions = {}
    for dist in packages:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory = None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gib": memory,
            "load_average_end": os.getloadavg(), "platform": platform.platform(),
            "python": platform.python_version(), "versions": versions}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def read_wav(path: Path):
    """(float32 samples in [-1, 1), sample rate) of a 16-bit mono WAV."""
    import wave

    import numpy as np

    with wave.open(str(path)) as f:
        data = np.frombuffer(f.readframes(f.getnframes()), "<i2").astype(np.float32) / 32768
        return data, f.getframerate()

