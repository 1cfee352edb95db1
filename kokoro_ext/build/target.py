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

**Other architectures.**  A target whose ``mtriple`` names another architecture than the
build host's (``llvm -mtriple=aarch64-linux-gnu``) is a cross build: nothing of the host
applies to it (without ``mcpu`` it is LLVM's ``generic`` CPU of that architecture, every
64-bit ARM CPU), its libraries are linked by that triple's GCC (``linker``), and its
instruction features are those the run side can tell on that architecture
(kokoro_ext.run.cpu.AARCH64_FEATURES).  ``PRESETS`` names common boards and servers.

**Other kinds.**  ``parse_target`` is the llvm kind's; the GPUs and the browser's CPU
(``webgpu``, ``wasm``, ``cuda`` and its presets) are kokoro_ext.build.backend's, whose
``resolve`` turns any ``--target`` into the one object a build takes.

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
    "NO_CODEGEN", "PRESETS", "HostCPU", "check_runs_here", "cpu_model_features",
    "host_cpu", "host_mattr", "instruction_features", "is_cross", "linker", "llvm_host",
    "missing_instructions", "parse_target", "refusal", "target_architecture", "target_dict",
    "target_features", "target_instruction_features",
]  # fmt: skip

Target = dict[str, Any]

_AARCH64 = "aarch64-linux-gnu"
#: --target names for common 64-bit ARM machines: (what it is, its TVM target).  The CPU
#: names are LLVM's, whose models carry each core's features (cortex-a76: dotprod, fp16;
#: neoverse-v1: sve, i8mm, bf16, dotprod); mattr only where a board lacks some of them.
PRESETS: dict[str, tuple[str, Target]] = {
    "aarch64": ("any 64-bit ARM CPU (ARMv8-A with NEON)",
                {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "generic"}),
    "rpi4": ("Raspberry Pi 4: Cortex-A72, without the crypto extension",
             {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "cortex-a72",
              "mattr": ["-aes", "-sha2"]}),
    "rpi5": ("Raspberry Pi 5: Cortex-A76 (dotprod, fp16)",
             {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "cortex-a76"}),
    "graviton2": ("AWS Graviton 2: Neoverse N1 (dotprod, fp16)",
                  {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "neoverse-n1"}),
    "graviton3": ("AWS Graviton 3: Neoverse V1 (sve, i8mm, bf16, dotprod)",
                  {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "neoverse-v1"}),
    "graviton4": ("AWS Graviton 4: Neoverse V2 (sve2, i8mm, bf16, dotprod)",
                  {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "neoverse-v2"}),
    "ampere-altra": ("Ampere Altra: Neoverse N1 (dotprod, fp16)",
                     {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "neoverse-n1"}),
    "ampereone": ("AmpereOne (i8mm, bf16, dotprod)",
                  {"kind": "llvm", "mtriple": _AARCH64, "mcpu": "ampere1"}),
}  # fmt: skip
#: The architectures a cross build can link for, and the GCC that links them
#: (Debian's gcc-aarch64-linux-gnu).
LINKERS = {"aarch64": "aarch64-linux-gnu-gcc"}
#: Examples of LLVM CPU names per architecture, for messages.
_CPU_EXAMPLES = {
    "aarch64": "generic, cortex-a72, cortex-a76, neoverse-n1, neoverse-v1, neoverse-v2",
    "x86_64": "x86-64-v2, x86-64-v3, znver4, skylake-avx512",
}

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
        arch=cpu.architecture(_system_triple()),
    )


def _system_triple() -> str:
    return str(tvm_ffi.get_global_func("target.llvm_get_system_triple")())


def _host(host: HostCPU | None) -> HostCPU:
    return llvm_host() if host is None else host


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. ``rocketlake``, ``znver3``)."""
    return llvm_host().name


def cpu_model_features(
    cpu: str, mattr: Iterable[str] = (), triple: str | None = None
) -> frozenset[str]:
    """Every LLVM feature code for ``cpu`` (of ``triple``, default this host's) with
    ``mattr`` applied may use (implied ones too)."""
    target = {"kind": "llvm", "mcpu": cpu, **({"mattr": list(mattr)} if mattr else {})}
    if triple:
        target["mtriple"] = triple
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


def target_architecture(target: Target) -> str:
    """The architecture (kokoro_ext.run.cpu.architecture) ``target`` compiles for."""
    return cpu.architecture(target.get("mtriple") or _system_triple())


def is_cross(target: Target, host: HostCPU | None = None) -> bool:
    """Whether ``target`` is for another architecture than ``host`` (default: this machine)."""
    return target_architecture(target) != _host(host).arch


def linker(target: Target, host: HostCPU | None = None) -> str | None:
    """The compiler driver that links ``target``'s libraries: None for this machine's own
    (TVM's default, the host's cc), else the target triple's GCC."""
    return LINKERS[target_architecture(target)] if is_cross(target, host) else None


def _presets_text() -> str:
    return "; ".join(f"{name} ({what})" for name, (what, _) in PRESETS.items())


def target_dict(text: str | Target) -> Target:
    """A ``--target`` value as a TVM target dict, as written: a preset's (``PRESETS``), a
    JSON dict's, or the CLI form's (``llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma``; a
    word is ``{"kind": word}``); ValueError for text of neither form."""
    if isinstance(text, str) and text.strip() in PRESETS:
        return dict(PRESETS[text.strip()][1])
    if isinstance(text, dict):
        return dict(text)
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--target {text!r} is not valid JSON ({err})") from err
    kind, *options = shlex.split(text) or [""]
    target: Target = {"kind": kind}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not option.startswith("-") or not sep or not value:
            raise ValueError(
                f"--target option {option!r} is not of the form -key=value "
                "(e.g. llvm -mcpu=skylake-avx512)"
            )
        target[key] = value.split(",") if key == "mattr" else value
    return target


def parse_target(
    text: str | Target, host: HostCPU | None = None, others: Iterable[str] = ()
) -> Target:
    """``--target`` value of a CPU -> TVM target dict; ValueError naming the problem.

    Accepts ``llvm``, the CLI form ``llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma``, a
    JSON dict and a preset name (``PRESETS``: rpi5, graviton3, ...): the llvm kind
    (other kinds are kokoro_ext.build.backend's; ``others``, their --target words, for
    the message refusing one).  Without ``mcpu`` the target is completed from ``host``
    (default: this machine) with its CPU name and its exact feature list (``mattr``); a
    user's own ``mattr`` comes after and wins.  A target of another architecture
    (``mtriple``) takes nothing from the host: without ``mcpu`` it is that
    architecture's ``generic`` CPU.
    """
    target = target_dict(text)
    others = ", ".join(others) or "none"
    if target.get("kind") != "llvm":
        word = isinstance(text, str) and len(shlex.split(text)) == 1 and "{" not in text
        if word and target.get("kind") not in tvm.target.Target.list_kinds():
            raise ValueError(
                f"--target {text.strip()!r} is neither a TVM target (llvm, 'llvm -mcpu=<cpu>', "
                f"'llvm -mtriple=aarch64-linux-gnu -mcpu=<cpu>'), a GPU or browser "
                f"({others}) nor a preset: {_presets_text()}"
            )
        raise ValueError(
            f"--target kind {target.get('kind')!r} is not supported: kokoro_ext builds for "
            f"CPUs (llvm, optionally llvm -mcpu=<cpu>) and for {others}"
        )
    if isinstance(target.get("mattr"), str):
        target["mattr"] = target["mattr"].split(",")
    triple = target.get("mtriple") or _system_triple()
    arch = cpu.architecture(triple)
    cross = arch != _host(host).arch
    if cross and arch not in LINKERS:
        raise ValueError(
            f"--target triple {triple!r} is for {arch}: this {_host(host).arch} machine builds "
            f"for {', '.join([_host(host).arch, *LINKERS])} (e.g. -mtriple=aarch64-linux-gnu)"
        )
    if "mcpu" not in target:
        if cross:
            target["mcpu"] = "generic"
        else:
            host = _host(host)
            target["mcpu"] = host.name
            mattr = host_mattr(host.name, host) + list(target.get("mattr", []))
            if mattr:
                target["mattr"] = mattr
    if not tvm_ffi.get_global_func("target.llvm_is_valid_cpu")(target["mcpu"], triple):
        presets = [n for n, (_, t) in PRESETS.items() if cpu.architecture(t["mtriple"]) == arch]
        where = f"presets: {', '.join(presets)}" if cross else f"this host is {_host(host).name!r}"
        raise ValueError(
            f"--target CPU {target['mcpu']!r} is unknown to LLVM for {triple}; LLVM's "
            f"{arch} CPUs include {_CPU_EXAMPLES.get(arch, 'generic')}; {where}"
        )
    try:
        tvm.target.Target(target)
    except Exception as err:  # TVM raises ValueError/TVMError with a long trace
        raise ValueError(f"TVM rejects target {json.dumps(target)}: {str(err).splitlines()[0]}")
    return target


def target_features(target: Target) -> frozenset[str]:
    """Every LLVM feature code compiled for ``target`` may use."""
    return cpu_model_features(target["mcpu"], target.get("mattr", ()), target.get("mtriple"))


def target_instruction_features(target: Target, host: HostCPU | None = None) -> frozenset[str]:
    """The instruction features of ``target`` a host of its architecture can be checked
    for (the manifest's ``cpu_features``): the LLVM host's rule for this machine's own
    architecture, the run side's table (kokoro_ext.run.cpu) for another."""
    features = target_features(target)
    if not is_cross(target, host):
        return instruction_features(features, host)
    known = cpu.KNOWN_FEATURES.get(target_architecture(target), frozenset())
    return frozenset(f for f in features if f in known and f not in NO_CODEGEN)


def missing_instructions(required: Iterable[str], host: HostCPU | None = None) -> list[str]:
    """The instruction features in ``required`` that ``host`` (LLVM's by default) lacks."""
    return cpu.missing_instructions(required, _host(host))


def check_runs_here(target: str | Target, host: HostCPU | None = None) -> None:
    """ValueError if code built for ``target`` uses instructions ``host`` does not have.

    A target without ``mcpu`` means the host itself and always runs.
    """
    target = parse_target(target, host)
    cpu.check_architecture(target.get("mtriple"), "these artifacts were", _host(host))
    what = f"these artifacts were compiled for CPU {target['mcpu']!r} and"
    cpu.check_features(target_features(target), what, _host(host))
