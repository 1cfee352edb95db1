"""The TVM target a build compiles for: parsed from ``--target``, completed from the host.

TVM 0.27 accepts targets only as JSON dicts (``{"kind": "llvm", "mcpu": "..."}``); the
``"llvm -mcpu=..."`` command-line form people know is rejected.  ``parse_target`` takes
both, and an llvm target without ``mcpu`` is completed with the host's CPU: a build is for
the machine it runs on unless the user names another CPU (``--target "llvm -mcpu=x86-64"``
gives a portable build).  ``check_runs_here`` refuses a build whose CPU needs instructions
this host lacks, instead of dying on SIGILL inside a compiled stage.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import tvm
import tvm_ffi

Target = dict[str, Any]


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. ``rocketlake``, ``znver4``)."""
    return str(tvm_ffi.get_global_func("target.llvm_get_system_cpu")())


def parse_target(text: str | Target) -> Target:
    """``--target`` value -> TVM target dict; ValueError naming the problem.

    Accepts ``llvm``, the CLI form ``llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma`` and a
    JSON dict.  Only the llvm kind is supported (the native kernels are x86/ARM CPU code).
    """
    if isinstance(text, dict):
        target = dict(text)
    elif text.lstrip().startswith("{"):
        try:
            target = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--target {text!r} is not valid JSON ({err})") from err
    else:
        kind, *options = shlex.split(text) or [""]
        target = {"kind": kind}
        for option in options:
            key, sep, value = option.lstrip("-").partition("=")
            if not option.startswith("-") or not sep or not value:
                raise ValueError(
                    f"--target option {option!r} is not of the form -key=value "
                    "(e.g. llvm -mcpu=skylake-avx512)"
                )
            target[key] = value.split(",") if key == "mattr" else value
    if target.get("kind") != "llvm":
        raise ValueError(
            f"--target kind {target.get('kind')!r} is not supported: kokoro_ext builds for "
            "CPUs, use llvm (optionally llvm -mcpu=<cpu>)"
        )
    if "mcpu" not in target:
        target["mcpu"] = host_cpu()
    triple = target.get("mtriple") or tvm_ffi.get_global_func("target.llvm_get_system_triple")()
    if not tvm_ffi.get_global_func("target.llvm_is_valid_cpu")(target["mcpu"], triple):
        raise ValueError(
            f"--target CPU {target['mcpu']!r} is unknown to LLVM for {triple}; "
            f"this host is {host_cpu()!r}"
        )
    try:
        tvm.target.Target(target)
    except Exception as err:  # TVM raises ValueError/TVMError with a long trace
        raise ValueError(f"TVM rejects target {json.dumps(target)}: {str(err).splitlines()[0]}")
    return target


def _target_features(target: Target) -> set[str]:
    # the keys are the features the target enables (their values are empty strings)
    features = tvm_ffi.get_global_func("target.llvm_get_cpu_features")(tvm.target.Target(target))
    enabled = {str(name) for name in features.keys()}
    return enabled | {a[1:] for a in target.get("mattr", []) if a.startswith("+")}


def _host_lacks() -> set[str]:
    # instruction-set features only: the target's list also holds tuning flags
    # (macrofusion, fast-gather, ...) that the host query does not report
    features = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    return {str(name) for name, on in features.items() if not on}


def check_runs_here(target: str | Target) -> None:
    """ValueError if code built for ``target`` uses CPU features this host does not have."""
    target = parse_target(target)
    missing = sorted(_target_features(target) & _host_lacks())
    if missing:
        raise ValueError(
            f"these artifacts were compiled for CPU {target['mcpu']!r}, which has instructions "
            f"this {host_cpu()!r} host lacks ({', '.join(missing[:8])}"
            f"{', ...' if len(missing) > 8 else ''}); rebuild here with "
            "`python -m kokoro_ext.build`, or build portable artifacts with "
            '--target "llvm -mcpu=x86-64-v2"'
        )
