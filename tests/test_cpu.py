"""The run side's host check without LLVM: /proc/cpuinfo flags as LLVM feature names."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from kokoro_ext.build.target import (
    instruction_features,
    llvm_host,
    parse_target,
    target_features,
    target_instruction_features,
)
from kokoro_ext.run import cpu

# A Zen 3 KVM guest (the flags of the host tests/data/host-zen3-kvm.json was recorded on):
# no AVX-512, and the hypervisor hides mwaitx, rdpru, pku and wbnoinvd.
ZEN3_CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush \
mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl \
nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 \
x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm \
sse4a misalignsse 3dnowprefetch osvw topoext invpcid_single ssbd ibrs ibpb stibp vmmcall \
fsgsbase bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt \
xsavec xgetbv1 xsaves clzero xsaveerptr arat npt nrip_save umip vaes vpclmulqdq rdpid fsrm

processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu
"""
AARCH64_CPUINFO = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes\n"
# A Raspberry Pi 5 (Cortex-A76, part 0xd0b).
RPI5_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU part\t: 0xd0b
"""
_RECORDED = json.loads((Path(__file__).parent / "data" / "host-zen3-kvm.json").read_text())


def test_cpuinfo_flags_map_to_llvm_names():
    host = cpu.HostCPU.from_cpuinfo(ZEN3_CPUINFO)
    assert host.name == "AMD EPYC 7B13"
    # renamed flags: pni, lahf_lm, abm, 3dnowprefetch, bmi1, sha_ni, sse4_2 (with crc32)
    assert {"sse3", "sahf", "lzcnt", "prfchw", "bmi", "sha", "sse4.2", "crc32", "64bit"} <= host.enabled
    assert host.features["avx512f"] is False and host.features["mwaitx"] is False
    assert "avx2" in host.enabled and "fpu" not in host.features  # only LLVM names


def test_cpuinfo_agrees_with_the_recorded_llvm_query_of_the_same_guest():
    host = cpu.HostCPU.from_cpuinfo(ZEN3_CPUINFO)
    llvm = _RECORDED["features"]
    for feature in cpu.CPUINFO_KNOWN - cpu.NO_CODEGEN:
        assert host.features[feature] == llvm.get(feature, False), feature


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not Path("/proc/cpuinfo").is_file(), reason="x86 Linux"
)
def test_this_hosts_cpuinfo_agrees_with_llvms_host_query():
    here, llvm = cpu.HostCPU.detect(), llvm_host()
    differ = {
        f
        for f in cpu.CPUINFO_KNOWN - cpu.NO_CODEGEN
        if here.features[f] != llvm.features.get(f, False)
    }
    assert not differ
    # and so a build for this host is accepted by the check without LLVM
    features = instruction_features(target_features(parse_target("llvm")))
    cpu.check_features(features, "a build for this host")


def test_a_build_needing_avx512_is_refused_on_the_zen3_guest():
    host = cpu.HostCPU.from_cpuinfo(ZEN3_CPUINFO)
    needs = ["sse2", "avx2", "avx512f", "avx512bw", "mwaitx"]  # mwaitx: never compiled code
    with pytest.raises(ValueError, match=r"\(AMD EPYC 7B13\) lacks: avx512bw, avx512f\. Rebuild"):
        cpu.check_features(needs, "these artifacts were compiled for CPU 'znver4' and", host)
    cpu.check_features(["sse2", "avx2", "fma", "mwaitx", "rdseed"], "x86-64-v3 code", host)


def test_an_aarch64_host_is_checked_for_its_own_features_only():
    host = cpu.HostCPU.from_cpuinfo(AARCH64_CPUINFO)
    assert host.arch == "aarch64" and host.enabled == {"fp-armv8", "neon", "aes"}
    assert set(host.features) == cpu.AARCH64_KNOWN
    cpu.check_features(["avx512f"], "x86 code", host)  # another architecture's: not told


def test_a_raspberry_pi_5_runs_rpi5_builds_and_refuses_graviton3_builds():
    host = cpu.HostCPU.from_cpuinfo(RPI5_CPUINFO)
    assert host.name == "aarch64 (CPU part 0xd0b)"
    rpi5 = target_instruction_features(parse_target("rpi5"))
    assert rpi5 == host.enabled == {
        "fp-armv8", "neon", "aes", "sha2", "crc", "lse", "fullfp16", "rdm", "rcpc", "dotprod"
    }  # fmt: skip
    cpu.check_features(rpi5, "an rpi5 build", host)
    graviton3 = target_instruction_features(parse_target("graviton3"))
    with pytest.raises(ValueError, match=r"lacks: bf16, complxnum, .*i8mm.*sve.*--target aarch64"):
        cpu.check_features(graviton3, "a graviton3 build", host)


def test_hwcap_bits_give_the_features_cpuinfo_names():
    # AT_HWCAP of the Raspberry Pi 5: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
    # fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp; AT_HWCAP2 bit 13 i8mm, 14 bf16
    bits = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 20]
    host = cpu.HostCPU.from_hwcaps("a76", sum(1 << b for b in bits), 0)
    assert host.enabled == cpu.HostCPU.from_cpuinfo(RPI5_CPUINFO).enabled
    assert {"i8mm", "bf16"} <= cpu.HostCPU.from_hwcaps("v1", 0b11, 1 << 13 | 1 << 14).enabled


def test_architecture_names():
    zen3 = cpu.HostCPU.from_cpuinfo(ZEN3_CPUINFO)
    assert cpu.architecture("aarch64-linux-gnu") == cpu.architecture("arm64") == "aarch64"
    assert cpu.architecture("x86_64-conda-linux-gnu") == cpu.architecture("AMD64") == "x86_64"
    with pytest.raises(ValueError, match="compiled for aarch64 .*this machine is x86_64"):
        cpu.check_architecture("aarch64-linux-gnu", "these artifacts were", zen3)
    cpu.check_architecture(None, "old artifacts", zen3)
