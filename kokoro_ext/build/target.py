"""The TVM target a build compiles for, and whether a build's code can run on this host.

TVM 0.27 accepts targets only as JSON dicts (``{"kind": "llvm", "mcpu": "..."}``); the
``"llvm -mcpu=..."`` command-line form people know is rejected.  ``parse_target`` takes
both.

A CPU *name* stands for LLVM's model of that CPU, and a hypervisor may mask features the
model assumes (a KVM guest on an AMD EPYC reports ``znver3`` without ``mwaitx`` or
``pku``; a Zen 4 guest may lack parts of AVX-512).  So a build "for this host" (``llvm``
without ``mcpu``, the default) means what ``-march=native`` means: the host's CPU name for
tuning **plus exactly the host's features**, ``+f`` for what the host has beyond the
model and ``-f`` for what the model assumes and the host lacks.  The compiled code then
uses only instructions the host has.

``check_runs_here`` compares instruction-set features only.  The rule
(``instruction_features``): a feature counts if LLVM's host query can report it (it is a
CPUID bit; tuning flags such as ``macrofusion``, ``fast-*``, ``idivq-to-divl`` and mode
flags such as ``64bit-mode`` are not, so they are never compared) and it is not in
``NO_CODEGEN``, the system and special-purpose instructions that compiled numeric code
never contains (``mwaitx``, ``rdpru``, ``pku``, ...).

Every function that looks at the host takes ``host=`` so tests can simulate machines.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Iterable
from typing import Any

import tvm
import tvm_ffi

from kokoro_ext.run import cpu
from kokoro_ext.run.cpu import NO_CODEGEN, HostCPU, refusal

__all__ = [
    "NO_CODEGEN", "HostCPU", "check_runs_here", "cpu_model_features", "host_cpu",
    "host_mattr", "instruction_features", "llvm_host", "missing_instructions",
    "parse_target", "refusal", "target_features",
]  # fmt: skip

Target = dict[str, Any]

def llvm_host() -> HostCPU:
    """This machine as LLVM's host query sees it (``-march=native``: CPUID, so masking
    shows), with every feature LLVM knows; the run side reads /proc/cpuinfo instead."""
    return _llvm_host()


@functools.cache
def _llvm_host() -> HostCPU:
    get = tvm_ffi.get_global_func
    features = get("tvm.codegen.llvm.GetHostCPUFeatures")()
    return HostCPU(
        name=str(get("target.llvm_get_system_cpu")()),
        features={str(k): bool(v) for k, v in features.items()},
    )


def _host(host: HostCPU | None) -> HostCPU:
    return llvm_host() if host is None else host


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. ``rocketlake``, ``znver3``)."""
    return llvm_host().name


def cpu_model_features(cpu: str, mattr: Iterable[str] = ()) -> frozenset[str]:
    """Every LLVM feature code for ``cpu`` with ``mattr`` applied may use (implied ones too)."""
    target = {"kind": "llvm", "mcpu": cpu, **({"mattr": list(mattr)} if mattr else {})}
    features = tvm_ffi.get_global_func("target.llvm_get_cpu_features")(tvm.target.Target(target))
    return frozenset(str(name) for name in features.keys())


def instruction_features(features: Iterable[str], host: HostCPU | None = None) -> frozenset[str]:
    """The features among ``features`` that stand for instructions compiled code may use
    (LLVM's host by default)."""
    return cpu.instruction_features(features, _host(host))


def host_mattr(cpu: str, host: HostCPU | None = None) -> list[str]:
    """``mattr`` that turns LLVM's model of ``cpu`` into exactly the host's features."""
    host = _host(host)
    model = cpu_model_features(cpu)
    extra = sorted(host.enabled - model)
    masked = sorted(f for f in model if host.features.get(f) is False)
    return [f"+{f}" for f in extra] + [f"-{f}" for f in masked]


def parse_target(text: str | Target, host: HostCPU | None = None) -> Target:
    """``--target`` value -> TVM target dict; ValueError naming the problem.

    Accepts ``llvm``, the CLI form ``llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma`` and a
    JSON dict.  Only the llvm kind is supported (the native kernels are CPU code).
    Without ``mcpu`` the target is completed from ``host`` (default: this machine) with
    its CPU name and its exact feature list (``mattr``); a user's own ``mattr`` comes
    after and wins.
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
    if isinstance(target.get("mattr"), str):
        target["mattr"] = target["mattr"].split(",")
    triple = target.get("mtriple") or tvm_ffi.get_global_func("target.llvm_get_system_triple")()
    if "mcpu" not in target:
        host = _host(host)
        target["mcpu"] = host.name
        mattr = host_mattr(host.name, host) + list(target.get("mattr", []))
        if mattr:
            target["mattr"] = mattr
    if not tvm_ffi.get_global_func("target.llvm_is_valid_cpu")(target["mcpu"], triple):
        raise ValueError(
            f"--target CPU {target['mcpu']!r} is unknown to LLVM for {triple}; "
            f"this host is {_host(host).name!r}"
        )
    try:
        tvm.target.Target(target)
    except Exception as err:  # TVM raises ValueError/TVMError with a long trace
        raise ValueError(f"TVM rejects target {json.dumps(target)}: {str(err).splitlines()[0]}")
    return target


def target_features(target: Target) -> frozenset[str]:
    """Every LLVM feature code compiled for ``target`` may use."""
    return cpu_model_features(target["mcpu"], target.get("mattr", ()))


def missing_instructions(required: Iterable[str], host: HostCPU | None = None) -> list[str]:
    """The instruction features in ``required`` that ``host`` (LLVM's by default) lacks."""
    return cpu.missing_instructions(required, _host(host))


def check_runs_here(target: str | Target, host: HostCPU | None = None) -> None:
    """ValueError if code built for ``target`` uses instructions ``host`` does not have.

    A target without ``mcpu`` means the host itself and always runs.
    """
    target = parse_target(target, host)
    what = f"these artifacts were compiled for CPU {target['mcpu']!r} and"
    cpu.check_features(target_features(target), what, _host(host))
