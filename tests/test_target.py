"""--target parsing, and whether a build's code runs on a host, on simulated hosts.

No test here depends on the CPU of the machine it runs on: every host is simulated
from a recorded LLVM host query (a Zen 3 KVM guest) or from LLVM's model of a CPU with
features masked as a hypervisor masks them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from kokoro_ext.run import cpu as cpu_mod
from kokoro_ext.run import native
from kokoro_ext.build.target import (
    NO_CODEGEN,
    HostCPU,
    check_runs_here,
    cpu_model_features,
    instruction_features,
    is_cross,
    linker,
    llvm_host,
    parse_target,
    target_features,
    target_instruction_features,
)

_RECORDED = json.loads((Path(__file__).parent / "data" / "host-zen3-kvm.json").read_text())
# Every CPUID feature LLVM 22's host query reports (on or off); a CPU-independent list.
_KNOWN = sorted(_RECORDED["features"])


def _simulated(cpu: str, masked: set[str] = frozenset(), extra: set[str] = frozenset()) -> HostCPU:
    """A host that LLVM would call ``cpu``, with ``masked`` features hidden by its hypervisor."""
    model = cpu_model_features(cpu) | extra
    return HostCPU(cpu, {f: f in model and f not in masked for f in _KNOWN})


# The session machine this was recorded on: znver3 without mwaitx, rdpru, pku, wbnoinvd.
ZEN3_KVM = HostCPU(_RECORDED["name"], _RECORDED["features"])
# A Zen 4 guest whose CPU model hides the newer AVX-512 subsets (and the usual system bits).
ZEN4_KVM = _simulated(
    "znver4",
    masked={"avx512bf16", "avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512bitalg",
            "avx512vpopcntdq", "avx512ifma", "gfni", "mwaitx", "rdpru", "pku"},
)  # fmt: skip
# A Zen 4 guest with AVX-512 hidden altogether (an EPYC-Milan CPU model on Genoa).
ZEN4_NO_AVX512 = _simulated("znver4", masked={f for f in _KNOWN if f.startswith("avx512")})
INTEL_AMX = _simulated("sapphirerapids")
X86_64_V2 = _simulated("x86-64-v2")
HOSTS = {
    "zen3-kvm": ZEN3_KVM,
    "zen4-kvm": ZEN4_KVM,
    "zen4-no-avx512": ZEN4_NO_AVX512,
    "intel-amx": INTEL_AMX,
    "x86-64-v2": X86_64_V2,
}


def _refusal(target, host: HostCPU) -> str:
    with pytest.raises(ValueError) as err:
        check_runs_here(target, host)
    return str(err.value)


@pytest.mark.parametrize("name", HOSTS)
def test_a_build_for_the_host_uses_exactly_its_instructions_and_runs_there(name):
    host = HOSTS[name]
    target = parse_target("llvm", host)
    assert target["mcpu"] == host.name
    assert instruction_features(target_features(target), host) == instruction_features(
        host.enabled, host
    )
    check_runs_here(target, host)
    # The manifest form (JSON) round-trips to the same target.
    assert parse_target(json.dumps(target), host) == target


def test_the_zen3_kvm_build_disables_what_the_guest_masks():
    target = parse_target("llvm", ZEN3_KVM)
    assert {"-mwaitx", "-rdpru", "-pku", "-wbnoinvd"} <= set(target["mattr"])
    assert not {"mwaitx", "rdpru", "pku", "wbnoinvd"} & target_features(target)


def test_the_cpu_name_alone_is_not_refused_for_system_features():
    # The original bug: znver3's model has mwaitx and rdpru, which a KVM guest masks.
    # Compiled numeric code never contains them, so the check ignores them.
    assert {"mwaitx", "rdpru"} <= NO_CODEGEN
    check_runs_here("llvm -mcpu=znver3", ZEN3_KVM)


def test_tuning_flags_are_never_compared():
    features = cpu_model_features("znver3")
    assert {"macrofusion", "fast-lzcnt", "idivq-to-divl", "sbb-dep-breaking"} <= features
    assert not {"macrofusion", "fast-lzcnt", "idivq-to-divl"} & instruction_features(
        features, ZEN3_KVM
    )


# (host, build for, instructions the refusal must name)
REFUSED = [
    ("zen3-kvm", "zen4-kvm", ["avx512f", "avx512bw"]),
    ("zen3-kvm", "intel-amx", ["amx-tile", "avx512fp16"]),
    ("zen4-kvm", "intel-amx", ["amx-tile", "avx512vnni"]),
    ("zen4-no-avx512", "zen4-kvm", ["avx512f"]),
    ("intel-amx", "zen3-kvm", ["sse4a"]),  # AMD-only
    ("x86-64-v2", "zen3-kvm", ["avx2", "fma"]),
    ("x86-64-v2", "intel-amx", ["avx", "avx2"]),
]


@pytest.mark.parametrize("host,built_for,named", REFUSED, ids=lambda x: str(x))
def test_a_build_needing_instructions_the_host_lacks_is_refused(host, built_for, named):
    message = _refusal(parse_target("llvm", HOSTS[built_for]), HOSTS[host])
    assert f"compiled for CPU '{HOSTS[built_for].name}'" in message
    for feature in named:
        assert feature in message
    assert "--target llvm" in message and 'llvm -mcpu=x86-64-v2"' in message  # both remedies


ACCEPTED = [
    ("zen4-kvm", "zen3-kvm"),
    ("zen4-no-avx512", "zen3-kvm"),
    ("zen3-kvm", "x86-64-v2"),
    ("intel-amx", "x86-64-v2"),
]


@pytest.mark.parametrize("host,built_for", ACCEPTED, ids=lambda x: str(x))
def test_a_build_for_a_smaller_cpu_is_accepted(host, built_for):
    check_runs_here(parse_target("llvm", HOSTS[built_for]), HOSTS[host])


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("cpu", ["x86-64", "x86-64-v2"])
def test_portable_builds_run_on_every_host(name, cpu):
    check_runs_here(f"llvm -mcpu={cpu}", HOSTS[name])


def test_x86_64_v3_is_refused_only_where_avx2_is_missing():
    for name in ("zen3-kvm", "zen4-kvm", "zen4-no-avx512", "intel-amx"):
        check_runs_here("llvm -mcpu=x86-64-v3", HOSTS[name])
    assert "avx2" in _refusal("llvm -mcpu=x86-64-v3", X86_64_V2)


def _asm(target) -> str:
    @T.prim_func
    def scale(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
        T.func_attr({"global_symbol": "scale", "tirx.noalias": True})
        for i in T.serial(4):
            for j in T.vectorized(16):
                b[i * 16 + j] = a[i * 16 + j] * T.float32(2)

    return tvm.compile(tvm.IRModule({"scale": scale}), target=target).mod.inspect_source("asm")


def test_masked_avx512_reaches_the_generated_code():
    # The same CPU name, with and without the host's masks: only the masked build
    # keeps away from 512-bit registers.
    assert "zmm" in _asm({"kind": "llvm", "mcpu": "znver4"})
    assert "zmm" not in _asm(parse_target("llvm", ZEN4_NO_AVX512))


@pytest.mark.parametrize(
    "text,want",
    [
        ("llvm -mcpu=x86-64-v2", {"kind": "llvm", "mcpu": "x86-64-v2"}),
        (
            "llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma",
            {"kind": "llvm", "mcpu": "skylake-avx512", "mattr": ["+avx2", "+fma"]},
        ),
        ('{"kind": "llvm", "mcpu": "x86-64"}', {"kind": "llvm", "mcpu": "x86-64"}),
    ],
)
def test_parse_target(text, want):
    assert parse_target(text, ZEN3_KVM) == want


def test_a_users_mattr_comes_after_the_hosts():
    target = parse_target("llvm -mattr=-avx2", ZEN3_KVM)
    assert target["mcpu"] == "znver3" and target["mattr"][-1] == "-avx2"
    assert "avx2" not in target_features(target)


@pytest.mark.parametrize(
    "text,message",
    [
        ("rocm", "kind 'rocm' is not supported"),
        ("llvm mcpu", "not of the form -key=value"),
        ("llvm -mcpu=nonsense", "CPU 'nonsense' is unknown to LLVM"),
        ("{kind: llvm", "not valid JSON"),
    ],
)
def test_bad_target_is_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse_target(text, ZEN3_KVM)


# --- other architectures -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text,cpu,has,lacks",
    [
        ("llvm -mtriple=aarch64-linux-gnu", "generic", {"neon"}, {"dotprod", "aes"}),
        ("aarch64", "generic", {"neon", "fp-armv8"}, {"dotprod"}),
        ("rpi4", "cortex-a72", {"neon", "crc"}, {"aes", "sha2", "dotprod"}),
        ("rpi5", "cortex-a76", {"neon", "dotprod", "fullfp16"}, {"sve", "i8mm"}),
        ("graviton3", "neoverse-v1", {"sve", "i8mm", "bf16", "dotprod"}, {"sve2"}),
    ],
)
def test_aarch64_targets_take_nothing_from_the_x86_host(text, cpu, has, lacks):
    target = parse_target(text, ZEN3_KVM)
    assert target["mtriple"] == "aarch64-linux-gnu" and target["mcpu"] == cpu
    assert is_cross(target, ZEN3_KVM) and linker(target, ZEN3_KVM) == "aarch64-linux-gnu-gcc"
    features = target_instruction_features(target, ZEN3_KVM)
    assert has <= features and not lacks & features
    assert features <= cpu_mod.AARCH64_KNOWN  # what an AArch64 host can be checked for
    assert parse_target(json.dumps(target), ZEN3_KVM) == target


def test_a_host_build_is_not_cross():
    target = parse_target("llvm", ZEN3_KVM)
    assert not is_cross(target, ZEN3_KVM) and linker(target, ZEN3_KVM) is None


@pytest.mark.parametrize(
    "text,message",
    [
        ("rpi6", r"'rpi6' is neither a TVM target .* nor a preset: aarch64 \(any 64-bit.*rpi5 \("),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=znver4",
         r"CPU 'znver4' is unknown to LLVM for aarch64-linux-gnu; LLVM's aarch64 CPUs include "
         r"generic, cortex-a72.*presets: aarch64, rpi4, rpi5"),
        ("llvm -mtriple=riscv64-linux-gnu",
         r"is for riscv64: this x86_64 machine builds for x86_64, aarch64"),
    ],
)  # fmt: skip
def test_bad_aarch64_targets_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse_target(text, ZEN3_KVM)


def test_an_aarch64_build_is_refused_on_x86():
    message = r"compiled for aarch64 \(aarch64-linux-gnu\); this machine is x86_64"
    with pytest.raises(ValueError, match=message):
        check_runs_here("rpi5", ZEN3_KVM)


def test_arm_compiler_macros_map_to_llvm_features(tmp_path):
    rpi5 = cpu_mod.HostCPU.from_aarch64_names("a76", ["fp", "asimd", "asimddp"])
    macros = ["__ARM_NEON", "__ARM_FEATURE_DOTPROD", "__ARM_FEATURE_MATMUL_INT8",
              "__ARM_FEATURE_FMA", "__ARM_FEATURE_SVE", "__AARCH64EL__", "__FLT_MAX__"]  # fmt: skip
    assert native.features_from_macros(macros, rpi5) == {"neon", "dotprod", "i8mm", "sve"}
    # a kernel library for Graviton 3 is refused on the Pi before loading
    library = _library(tmp_path, macros, march="armv8.4-a+sve+i8mm")
    with pytest.raises(ValueError, match=r"-march=armv8.4-a\+sve\+i8mm and .*lacks: i8mm, sve"):
        native.check_runs_here(library, rpi5)


# --- the native kernel library ---------------------------------------------------------


def _library(tmp_path: Path, macros: list[str], march: str = "native") -> Path:
    record = {"march": march, "compiler": "GNU 12.2.0", "macros": macros}
    (tmp_path / native.CPU_RECORD).write_text(json.dumps(record))
    return tmp_path / native.LIBRARY_NAME


def test_compiler_macros_map_to_llvm_features():
    macros = ["__SSE4_1__", "__AVX512VNNI__", "__AMX_TILE__", "__FMA__", "__FLT_MAX__", "__LP64__"]
    assert native.features_from_macros(macros, INTEL_AMX) == {
        "sse4.1", "avx512vnni", "amx-tile", "fma"
    }  # fmt: skip


def test_a_native_library_built_for_avx512_is_refused_before_loading(tmp_path):
    library = _library(tmp_path, ["__SSE2__", "__AVX2__", "__AVX512F__", "__AVX512BW__"])
    with pytest.raises(ValueError, match=r"-march=native.*avx512bw, avx512f.*KOKORO_EXT_MARCH"):
        native.check_runs_here(library, ZEN3_KVM)
    assert native.check_runs_here(library, ZEN4_KVM).features >= {"avx512f", "avx2"}


def test_a_portable_native_library_runs_everywhere(tmp_path):
    library = _library(tmp_path, ["__SSE__", "__SSE2__", "__MMX__"], march="")
    for host in HOSTS.values():
        native.check_runs_here(library, host)


def test_a_native_library_without_its_record_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no readable CPU record.*rebuild it here"):
        native.check_runs_here(tmp_path / native.LIBRARY_NAME, ZEN3_KVM)


def test_the_installed_native_library_has_a_record_this_host_accepts():
    record = native.check_runs_here(native.library_path())
    assert "sse2" in record.features


def test_host_detection_reads_the_llvm_host_query():
    host = llvm_host()
    assert host.name and {"sse2", "avx2", "avx512f"} <= set(host.features)
    assert np.all([isinstance(v, bool) for v in host.features.values()])


@pytest.mark.parametrize(
    "name,coretype",
    [("zen3-kvm", None), ("zen4-no-avx512", None), ("x86-64-v2", None),
     ("zen4-kvm", "SkylakeX"), ("intel-amx", "SkylakeX")],
)  # fmt: skip
def test_openblas_gets_its_avx512_kernels_only_where_the_host_has_them(name, coretype):
    from kokoro_ext.run.native import openblas_coretype

    assert openblas_coretype(HOSTS[name]) == coretype


def test_wasm_is_a_browser_cpu_target_with_the_kernels_compiled_for_it():
    from kokoro_ext.build.backend import WASM, CpuTarget, resolve
    from kokoro_ext.build.backend.browser import symbol_prefix

    target = resolve("wasm")
    assert target is WASM and resolve(dict(WASM.target)) is WASM
    assert dict(WASM.target) == {"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm",
                                 "mcpu": "generic", "mattr": ["+simd128"]}  # fmt: skip
    assert WASM.transform_apart and not WASM.polyphase
    # the stages go into one module, each stage's symbols under a prefix of its own, of
    # at least 8 characters (TVM reads a shorter one back as a small string, not an object)
    prefixes = {symbol_prefix(stage) for stage in ("text", "prosody", "source", "decoder")}
    assert len(prefixes) == 4 and min(map(len, prefixes)) >= 8
    # the native kernels (compiled by emscripten): int8 weights where the checkpoint's
    # are (float32 kept on request), float32 products
    assert WASM.choose().lstm_backend == "native" and WASM.choose().dense == "native"
    assert WASM.choose().weight_dtype == "auto" and WASM.max_frames is not None
    assert WASM.choose(weight_dtype="float32").weight_dtype == "float32"
    assert WASM.products(WASM.choose(weight_dtype="int8")) == "fp32"
    with pytest.raises(ValueError, match="--precision int8: a build for wasm takes"):
        WASM.choose(precision="int8")
    # an llvm target is wasm's only if it is wasm's: a CPU's stays a CPU's
    assert isinstance(resolve("llvm"), CpuTarget) and isinstance(resolve("aarch64"), CpuTarget)
