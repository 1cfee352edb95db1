"""--target parsing and the check that a build's CPU can run on this host."""

from __future__ import annotations

import pytest

from kokoro_ext.target import check_runs_here, host_cpu, parse_target


@pytest.mark.parametrize(
    "text,want",
    [
        ("llvm", {"kind": "llvm", "mcpu": host_cpu()}),
        ("llvm -mcpu=x86-64-v2", {"kind": "llvm", "mcpu": "x86-64-v2"}),
        (
            "llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma",
            {"kind": "llvm", "mcpu": "skylake-avx512", "mattr": ["+avx2", "+fma"]},
        ),
        ('{"kind": "llvm", "mcpu": "x86-64"}', {"kind": "llvm", "mcpu": "x86-64"}),
    ],
)
def test_parse_target(text, want):
    assert parse_target(text) == want


@pytest.mark.parametrize(
    "text,message",
    [
        ("cuda", "kind 'cuda' is not supported"),
        ("llvm mcpu", "not of the form -key=value"),
        ("llvm -mcpu=nonsense", "CPU 'nonsense' is unknown to LLVM"),
        ("{kind: llvm", "not valid JSON"),
    ],
)
def test_bad_target_is_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse_target(text)


def test_builds_for_this_host_and_baseline_x86_run_here():
    check_runs_here("llvm")
    check_runs_here("llvm -mcpu=x86-64")


def test_build_for_another_cpu_is_refused():
    # AMD-only instructions (clzero, sse4a) exist on no Intel host, and vice versa.
    other = "znver4" if "AMD" not in open("/proc/cpuinfo").read() else "sapphirerapids"
    with pytest.raises(ValueError, match=f"compiled for CPU '{other}'.*rebuild"):
        check_runs_here(f"llvm -mcpu={other}")
