"""What a WebGPU build's kernels must not contain, checked on the WGSL TVM wrote.

Chromium rejects a shader module at its first use, in the browser, with an error the page
would have to surface; each of these is a way TVM's WGSL can be invalid or exceed what
the runtime asks of the device, found here at build time instead, naming the kernel:

- 8-bit integer types (``i8``): WGSL has none (the GPU pipeline's WGSL passes remove
  bool and int8 tensors between kernels, kokoro_ext.build.passes.narrow);
- ``inff``, ``nanf``, ``-2147483648i``: literals TVM prints that WGSL cannot parse;
- more storage buffers in one kernel than tvmjs requests of the device.
"""

from __future__ import annotations

import re
from typing import Any

#: What tvmjs requests of the device (its detectGPUDevice): kernels must stay within it.
MAX_STORAGE_BUFFERS = 10
_KERNEL = re.compile(r"// Function: (\S+)\n//-+\n(?:// Function: \S+\n//-+\n)?")
_INVALID = {
    r"\bi8\b": "an 8-bit integer type (WGSL has none)",
    r"\binff\b|\bnanf\b": "an infinite or NaN literal",
    r"-2147483648i": "the literal -2147483648i (WGSL cannot represent it)",
}


def wgsl_source(executable: Any) -> str:
    """The WGSL of every kernel of a compiled WebGPU executable."""
    sources = []

    def walk(module: Any) -> None:
        for imported in module.imports:
            kind = str(imported.kind)
            if kind == "webgpu":
                sources.append(imported.inspect_source())
            walk(imported)

    walk(executable.mod)
    return "".join(sources)


def kernels(source: str) -> dict[str, str]:
    """Kernel name -> its WGSL."""
    parts = _KERNEL.split(source)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def problems(source: str) -> list[str]:
    """What is wrong with ``source``, one line per kernel and problem."""
    found = []
    for name, code in kernels(source).items():
        for pattern, what in _INVALID.items():
            if re.search(pattern, code):
                found.append(f"{name}: {what}")
        buffers = code.count("var<storage")
        if buffers > MAX_STORAGE_BUFFERS:
            found.append(f"{name}: {buffers} storage buffers, more than {MAX_STORAGE_BUFFERS}")
    return found


def check(executable: Any, stage: str) -> None:
    """ValueError naming each kernel of ``executable`` that WebGPU would refuse."""
    source = wgsl_source(executable)
    if "@compute" not in source:
        raise ValueError(f"the {stage} stage's WebGPU build has no WGSL kernels")
    found = problems(source)
    if found:
        raise ValueError(
            f"the {stage} stage's WGSL has {len(found)} problem(s) WebGPU would refuse: "
            + "; ".join(found[:5])
        )
