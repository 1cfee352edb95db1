"""Which instructions this CPU has, read without LLVM: /proc/cpuinfo flags as LLVM names.

A build records the instruction features its compiled code may use (the manifest's
``cpu_features``, LLVM feature names, computed by the build side with LLVM), and the
native library records the feature macros it was compiled with.  Loading compares those
with the host's features, read here from the kernel's CPU flags, so that the run side
needs neither LLVM nor TVM's compiler library.  The build side (kokoro_ext.build.target)
makes the same ``HostCPU`` from LLVM's own host query where it compiles.

Only features that ``CPUINFO_FEATURES`` maps are compared; a host without x86 flags in
/proc/cpuinfo (another OS or architecture) can be checked for nothing, and the system's
loader refuses a library of another architecture anyway.  Every function that looks at
the host takes ``host=`` so tests can simulate machines.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# CPUID features whose instructions only an OS, a hypervisor or hand-written intrinsics
# use: LLVM never selects them for loops, vectors or math, so a host lacking them runs
# the code all the same.  Hypervisors mask exactly these most often, and kernels hide
# some (Linux clears rdseed on Zen 5 for an erratum).
NO_CODEGEN = frozenset(
    {
        "cldemote", "clflushopt", "clwb", "clzero", "enqcmd", "fsgsbase", "hreset",
        "invpcid", "kl", "lwp", "movdir64b", "movdiri", "mwaitx", "pconfig", "pku",
        "ptwrite", "rdpid", "rdpru", "rdrnd", "rdseed", "rtm", "serialize", "sgx",
        "shstk", "tsxldtrk", "uintr", "usermsr", "waitpkg", "wbnoinvd", "widekl",
        "xsave", "xsavec", "xsaveopt", "xsaves",
    }
)  # fmt: skip

#: Linux's x86 CPU flag (arch/x86/include/asm/cpufeatures.h) -> the LLVM features it
#: stands for.  Flags of the same name as the LLVM feature are listed as themselves.
CPUINFO_FEATURES: dict[str, tuple[str, ...]] = {
    **{
        flag: (flag,)
        for flag in (
            "adx aes avx avx2 avx512bw avx512cd avx512dq avx512f avx512ifma avx512vbmi "
            "avx512vl bmi2 cldemote clflushopt clwb clzero cmov cmpccxadd cx16 cx8 enqcmd "
            "f16c fma fma4 fsgsbase fxsr gfni invpcid lwp mmx movbe movdir64b movdiri "
            "mwaitx pconfig pku popcnt rdpid rdpru rdseed serialize sgx sha512 sm3 sm4 "
            "sse sse2 sse4a ssse3 tbm tsxldtrk vaes vpclmulqdq waitpkg wbnoinvd xop "
            "xsave xsavec xsaveopt xsaves"
        ).split()
    },
    "lm": ("64bit",),
    "pni": ("sse3",),
    "pclmulqdq": ("pclmul",),
    "sse4_1": ("sse4.1",),
    "sse4_2": ("sse4.2", "crc32"),  # LLVM's host query reports crc32 with SSE4.2
    "lahf_lm": ("sahf",),
    "abm": ("lzcnt",),
    "3dnowprefetch": ("prfchw",),
    "bmi1": ("bmi",),
    "sha_ni": ("sha",),
    "rdrand": ("rdrnd",),
    "rtm": ("rtm",),
    "user_shstk": ("shstk",),
    "uintr": ("uintr",),
    "avx512_vbmi2": ("avx512vbmi2",),
    "avx512_vnni": ("avx512vnni",),
    "avx512_bitalg": ("avx512bitalg",),
    "avx512_vpopcntdq": ("avx512vpopcntdq",),
    "avx512_bf16": ("avx512bf16",),
    "avx512_fp16": ("avx512fp16",),
    "avx512_vp2intersect": ("avx512vp2intersect",),
    "avx_vnni": ("avxvnni",),
    "avx_vnni_int8": ("avxvnniint8",),
    "avx_vnni_int16": ("avxvnniint16",),
    "avx_ifma": ("avxifma",),
    "avx_ne_convert": ("avxneconvert",),
    "amx_tile": ("amx-tile",),
    "amx_bf16": ("amx-bf16",),
    "amx_int8": ("amx-int8",),
    "amx_fp16": ("amx-fp16",),
    "amx_complex": ("amx-complex",),
}
#: Every LLVM feature the flags can tell (present or absent) on an x86 host.
CPUINFO_KNOWN = frozenset(f for features in CPUINFO_FEATURES.values() for f in features)


@dataclass(frozen=True)
class HostCPU:
    """A CPU as LLVM names its features: a name and every feature known, on or off."""

    name: str
    features: Mapping[str, bool]

    @property
    def enabled(self) -> frozenset[str]:
        """The features this CPU has."""
        return frozenset(f for f, on in self.features.items() if on)

    @staticmethod
    def from_cpuinfo(text: str) -> HostCPU:
        """The first processor of a /proc/cpuinfo text; no features if it has no x86 flags."""
        fields: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                if fields:
                    break  # one processor is enough: the kernel lists the common flags
                continue
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        name = fields.get("model name") or platform.machine() or "unknown"
        if "flags" not in fields:
            return HostCPU(name, {})
        flags = set(fields["flags"].split())
        enabled = {f for flag in flags & CPUINFO_FEATURES.keys() for f in CPUINFO_FEATURES[flag]}
        return HostCPU(name, {f: f in enabled for f in sorted(CPUINFO_KNOWN)})

    @staticmethod
    @functools.cache
    def detect() -> HostCPU:
        """This machine, from /proc/cpuinfo (what the kernel and any hypervisor expose)."""
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            text = ""
        return HostCPU.from_cpuinfo(text)


def _host(host: HostCPU | None) -> HostCPU:
    return HostCPU.detect() if host is None else host


def instruction_features(features: Iterable[str], host: HostCPU | None = None) -> frozenset[str]:
    """The features among ``features`` that ``host`` can tell and compiled code may use."""
    known = _host(host).features
    return frozenset(f for f in features if f in known and f not in NO_CODEGEN)


def missing_instructions(required: Iterable[str], host: HostCPU | None = None) -> list[str]:
    """The instruction features in ``required`` that ``host`` lacks, sorted."""
    host = _host(host)
    return sorted(instruction_features(required, host) - host.enabled)


def refusal(what: str, missing: list[str], host: HostCPU | None = None) -> str:
    """The message for code that needs ``missing`` instructions: what, and the two remedies."""
    shown = ", ".join(missing[:10]) + (f", ... ({len(missing)} in all)" if len(missing) > 10 else "")
    return (
        f"{what} use instructions this CPU ({_host(host).name}) lacks: {shown}. "
        "Rebuild on this machine (`python -m kokoro_ext.build --target llvm` builds for "
        'exactly this CPU), or build portable artifacts elsewhere with --target "llvm '
        '-mcpu=x86-64-v2" (or x86-64-v3 for any AVX2 machine)'
    )


def check_features(required: Iterable[str], what: str, host: HostCPU | None = None) -> None:
    """ValueError (``refusal``) if code needing the features ``required`` cannot run on
    ``host``; ``what`` names the code, e.g. "these artifacts were compiled for ... and"."""
    missing = missing_instructions(required, host)
    if missing:
        raise ValueError(refusal(what, missing, host))
