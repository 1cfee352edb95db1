"""The target of a build's manifest when it is not a CPU's, for bench/gpu.py: the
build's own targets are kokoro_ext.build.backend's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kokoro_ext.build.backend import BuildTarget, CpuTarget, resolve


def gpu_target(target: Mapping[str, Any] | str) -> BuildTarget | None:
    """kokoro_ext.build.backend's target for ``target``, None for a CPU one."""
    resolved = resolve(target if isinstance(target, str) else dict(target))
    return None if isinstance(resolved, CpuTarget) else resolved
