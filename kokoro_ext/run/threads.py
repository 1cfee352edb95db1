"""The threads the stages run on: one per physical core this process may use.

TVM's runtime sizes its thread pool, unless ``TVM_NUM_THREADS`` (or ``OMP_NUM_THREADS``)
says otherwise, as half the hardware threads on x86, assuming two per core.  A virtual
machine whose vCPUs are whole cores (the 2-core AMD EPYC guests here) then computes on
one core of two: every TVM-generated kernel and, since they share TVM's pool, the native
kernels.  ``configure_thread_pool`` counts the physical cores instead, from the kernel's
CPU topology, and sets ``TVM_NUM_THREADS`` to that count, which TVM reads when it creates
a thread's pool (on its first parallel kernel; ``runtime.config_threadpool`` cannot grow
a pool past the size it was created with).  An explicit ``TVM_NUM_THREADS`` or
``OMP_NUM_THREADS`` is left to TVM.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: Linux's CPU topology (Documentation/ABI/stable/sysfs-devices-system-cpu).
TOPOLOGY = Path("/sys/devices/system/cpu")
#: The environment variables by which a user sets TVM's thread count himself.
USER_SETTINGS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")
def physical_cores(cpus: Iterable[int] | None = None, topology: Path = TOPOLOGY) -> int:
    """The distinct cores (package, die, core id) among ``cpus`` (default: the CPUs this
    process may run on); each CPU counts as a core where the topology is not readable."""
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    cores = set()
    for cpu in cpus:
        base = topology / f"cpu{cpu}" / "topology"
        try:
            ids = [(base / name).read_text().strip() for name in ("physical_package_id", "core_id")]
        except OSError:
            return max(1, len(cpus))
        die = base / "die_id"
        cores.add((ids[0], die.read_text().strip() if die.exists() else "0", ids[1]))
    return max(1, len(cores))


def configure_thread_pool(environ: dict[str, str] | None = None) -> int | None:
    """Have TVM's thread pools take ``physical_cores()`` threads, unless one of
    USER_SETTINGS is set: the thread count set, or None where the user's setting stands.

    Call it before the first stage runs (kokoro_ext.run.runner.StageRunner does).
    """
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in USER_SETTINGS):
        return None
    environ["TVM_NUM_THREADS"] = str(physical_cores())
    return int(environ["TVM_NUM_THREADS"])
