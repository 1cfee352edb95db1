"""Which instructions this CPU has, read without LLVM: the kernel's CPU flags as LLVM names.

A build records the instruction features its compiled code may use (the manifest's
``cpu_features``, LLVM feature names, computed by the build side with LLVM), and the
native library records the feature macros it was compiled with.  Loading compares those
with the host's features, read here from the kernel's CPU flags, so that the run side
needs neither LLVM nor TVM's compiler library.  The build side (kokoro_ext.build.target)
makes the same ``HostCPU`` from LLVM's own host query where it compiles.

On x86-64 the flags are /proc/cpuinfo's ``flags`` (``CPUINFO_FEATURES``); on AArch64 they
are the kernel's hardware capabilities (``AARCH64_FEATURES``): the auxiliary vector's
AT_HWCAP and AT_HWCAP2, which /proc/cpuinfo's ``Features`` line spells out and which
qemu-user also sets for the CPU it emulates (its /proc/cpuinfo is the real host's).
Only the features a host's table maps are compared: a feature of another architecture
can be checked for nothing, and the system's loader refuses a library of another
architecture anyway.  Every function that looks at the host takes ``host=`` so tests
can simulate machines.
"""

from __future__ import annotations

import ctypes
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

#: Linux's arm64 hardware capability (arch/arm64/include/uapi/asm/hwcap.h; the names of
#: /proc/cpuinfo's Features line) -> (AT_HWCAP word 1 or 2, bit, the LLVM features it
#: stands for).  Only instructions compiled code may use: the system ones (dcpop, dit,
#: ssbs, sb, paca, bti, mte, rng, ...) are left out, as NO_CODEGEN leaves them on x86, and
#: so is uscat (LLVM's lse2), which adds no instruction, only an alignment guarantee.
AARCH64_FEATURES: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "fp": (1, 0, ("fp-armv8",)),
    "asimd": (1, 1, ("neon",)),
    "aes": (1, 3, ("aes",)),
    "pmull": (1, 4, ("aes",)),  # LLVM's aes has PMULL too
    "sha1": (1, 5, ("sha2",)),  # LLVM's sha2 has SHA1 too
    "sha2": (1, 6, ("sha2",)),
    "crc32": (1, 7, ("crc",)),
    "atomics": (1, 8, ("lse",)),
    "fphp": (1, 9, ("fullfp16",)),
    "asimdhp": (1, 10, ("fullfp16",)),
    "asimdrdm": (1, 12, ("rdm",)),
    "jscvt": (1, 13, ("jsconv",)),
    "fcma": (1, 14, ("complxnum",)),
    "lrcpc": (1, 15, ("rcpc",)),
    "sha3": (1, 17, ("sha3",)),
    "sm3": (1, 18, ("sm4",)),  # LLVM's sm4 has SM3 too
    "sm4": (1, 19, ("sm4",)),
    "asimddp": (1, 20, ("dotprod",)),
    "sha512": (1, 21, ("sha3",)),  # LLVM's sha3 has SHA512 too
    "sve": (1, 22, ("sve",)),
    "asimdfhm": (1, 23, ("fp16fml",)),
    "ilrcpc": (1, 26, ("rcpc-immo",)),
    "sve2": (2, 1, ("sve2",)),
    "sveaes": (2, 2, ("sve-aes",)),
    "svebitperm": (2, 4, ("sve-bitperm",)),
    "svesha3": (2, 5, ("sve-sha3",)),
    "svesm4": (2, 6, ("sve-sm4",)),
    "frint": (2, 8, ("fptoint",)),
    "svef32mm": (2, 10, ("f32mm",)),
    "svef64mm": (2, 11, ("f64mm",)),
    "i8mm": (2, 13, ("i8mm",)),
    "bf16": (2, 14, ("bf16",)),
    "sme": (2, 23, ("sme",)),
}
#: Every LLVM feature the hardware capabilities can tell on an AArch64 host.
AARCH64_KNOWN = frozenset(f for _, _, features in AARCH64_FEATURES.values() for f in features)
#: The features each architecture's host can tell (``platform.machine()`` spelling).
KNOWN_FEATURES = {"x86_64": CPUINFO_KNOWN, "aarch64": AARCH64_KNOWN}
_AT_HWCAP, _AT_HWCAP2 = 16, 26  # getauxval(3) keys


def architecture(name: str) -> str:
    """``x86_64`` or ``aarch64`` for a machine or the first part of a target triple
    (``arm64``, ``amd64``, ``aarch64-linux-gnu``, ...); other names as they are."""
    arch = name.split("-", 1)[0].lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


@dataclass(frozen=True)
class HostCPU:
    """A CPU as LLVM names its features: a name and every feature known, on or off."""

    name: str
    features: Mapping[str, bool]
    arch: str = "x86_64"  # architecture(): whose feature names ``features`` holds

    @property
    def enabled(self) -> frozenset[str]:
        """The features this CPU has."""
        return frozenset(f for f, on in self.features.items() if on)

    @staticmethod
    def from_cpuinfo(text: str) -> HostCPU:
        """The first processor of a /proc/cpuinfo text: its x86 ``flags`` or its AArch64
        ``Features``; no features if it has neither."""
        fields: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                if fields:
                    break  # one processor is enough: the kernel lists the common flags
                continue
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        name = fields.get("model name") or platform.machine() or "unknown"
        if "Features" in fields:  # AArch64: no model name, the core's part number
            part = fields.get("CPU part")
            name = fields.get("model name") or (f"aarch64 (CPU part {part})" if part else "aarch64")
            return HostCPU.from_aarch64_names(name, fields["Features"].split())
        if "flags" not in fields:
            return HostCPU(name, {}, architecture(platform.machine()))
        flags = set(fields["flags"].split())
        enabled = {f for flag in flags & CPUINFO_FEATURES.keys() for f in CPUINFO_FEATURES[flag]}
        return HostCPU(name, {f: f in enabled for f in sorted(CPUINFO_KNOWN)})

    @staticmethod
    def from_aarch64_names(name: str, names: Iterable[str]) -> HostCPU:
        """An AArch64 CPU with the hardware capabilities ``names`` (cpuinfo spelling)."""
        names = set(names)
        enabled = {f for n in names & AARCH64_FEATURES.keys() for f in AARCH64_FEATURES[n][2]}
        return HostCPU(name, {f: f in enabled for f in sorted(AARCH64_KNOWN)}, "aarch64")

    @staticmethod
    def from_hwcaps(name: str, hwcap: int, hwcap2: int) -> HostCPU:
        """An AArch64 CPU from its AT_HWCAP and AT_HWCAP2 words."""
        words = {1: hwcap, 2: hwcap2}
        names = [n for n, (word, bit, _) in AARCH64_FEATURES.items() if words[word] >> bit & 1]
        return HostCPU.from_aarch64_names(name, names)

    @staticmethod
    @functools.cache
    def detect() -> HostCPU:
        """This machine, as the kernel and any hypervisor (or qemu-user) expose it."""
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            text = ""
        if architecture(platform.machine()) != "aarch64":
            return HostCPU.from_cpuinfo(text)
        described = HostCPU.from_cpuinfo(text)
        name = described.name if described.arch == "aarch64" else "aarch64"
        try:
            getauxval = ctypes.CDLL(None).getauxval
        except (OSError, AttributeError):  # not glibc: the Features line, if there is one
            return described if described.arch == "aarch64" else HostCPU(name, {}, "aarch64")
        getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
        return HostCPU.from_hwcaps(name, getauxval(_AT_HWCAP), getauxval(_AT_HWCAP2))


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
    host = _host(host)
    shown = ", ".join(missing[:10]) + (f", ... ({len(missing)} in all)" if len(missing) > 10 else "")
    if host.arch == "aarch64":
        remedy = (
            "Rebuild for this CPU: its preset (--target rpi4, rpi5, graviton3, ...) or "
            '"llvm -mtriple=aarch64-linux-gnu -mcpu=<its LLVM name>", or for any 64-bit ARM '
            "CPU with --target aarch64"
        )
    else:
        remedy = (
            "Rebuild on this machine (`python -m kokoro_ext.build --target llvm` builds for "
            'exactly this CPU), or build portable artifacts elsewhere with --target "llvm '
            '-mcpu=x86-64-v2" (or x86-64-v3 for any AVX2 machine)'
        )
    return f"{what} use instructions this CPU ({host.name}) lacks: {shown}. {remedy}"


def check_architecture(triple: str | None, what: str, host: HostCPU | None = None) -> None:
    """ValueError if code for the target ``triple`` (None: not recorded) cannot run on
    ``host``'s architecture at all."""
    host = _host(host)
    if triple and architecture(triple) != host.arch:
        raise ValueError(
            f"{what} compiled for {architecture(triple)} ({triple}); this machine is "
            f"{host.arch}: build for it (--target llvm here, or e.g. --target aarch64 on a "
            "build machine for 64-bit ARM)"
        )


def check_features(required: Iterable[str], what: str, host: HostCPU | None = None) -> None:
    """ValueError (``refusal``) if code needing the features ``required`` cannot run on
    ``host``; ``what`` names the code, e.g. "these artifacts were compiled for ... and"."""
    missing = missing_instructions(required, host)
    if missing:
        raise ValueError(refusal(what, missing, host))
