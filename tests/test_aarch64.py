"""An AArch64 build, made on this x86-64 machine, run under qemu-user.

The small config (random weights) is cross-built for the Raspberry Pi 5 preset (Cortex-A76:
NEON, dotprod, fp16) and spoken by an aarch64 CPython under ``qemu-aarch64-static -cpu
cortex-a76`` with the aarch64 wheels and the kernels cross-built for any AArch64 CPU
(kokoro_ext.tools.emulation; what it downloads stays in the cache, so only the first run
fetches).  Its audio is the x86 build's within ``SNR_DB``: the two differ by float
rounding only (other vector widths and FMA contraction in the compiled code, NEON against
AVX in the kernels, OpenBLAS's NEON kernels), not in any step of the computation, and
have the same length (the same durations).

qemu-user runs the guest ~100x slower than the host runs itself, so the phonemes are a few
frames.  Skipped only where qemu-user-static or the cross compiler is not installed.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import pytest

from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.tools import emulation
from small_build import build_small

MISSING = emulation.missing_tools()
pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="cross-building from x86-64"),
    pytest.mark.skipif(bool(MISSING), reason=f"emulating AArch64 needs {', '.join(MISSING)}"),
]

GUEST = Path(__file__).with_name("aarch64_guest.py")
PHONEMES = "hˈɑɪ"  # 13 frames: the decoder takes about 20 s under qemu
#: The aarch64 audio against the x86 build's, the bound of the build against kokoro
#: (kokoro_ext.tools.validate.WAVEFORM_DB): rounding differences, which a bin on the
#: iSTFT phase's branch cut can turn into a flip of its sign.  Measured: 99 dB on the small
#: config, 46 dB for the real Kokoro-82M (graviton3 under qemu against znver4), as
#: close as the x86 build is to PyTorch (48 dB median, bench/results/quality.txt).
SNR_DB = 40.0
ELF_MACHINE_AARCH64 = 183  # e_machine


@pytest.fixture(scope="module")
def arm_build(tmp_path_factory) -> Path:
    return build_small(tmp_path_factory.mktemp("arm"), log=lambda _: None, target="rpi5")


@pytest.fixture(scope="module")
def emulator() -> emulation.Emulator:
    return emulation.prepare(cpu="cortex-a76")


def _elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    return int.from_bytes(header[18:20], "little")


def test_the_build_is_aarch64_code_recording_the_cortex_a76s_features(arm_build):
    manifest = json.loads((arm_build / "manifest.json").read_text())
    target = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76"}
    assert manifest["target"] == target
    assert {"neon", "dotprod", "fullfp16"} <= set(manifest["cpu_features"])
    assert not {"sve", "i8mm", "avx2"} & set(manifest["cpu_features"])
    for stage in manifest["stages"].values():
        assert _elf_machine(arm_build / stage["file"]) == ELF_MACHINE_AARCH64


def test_the_native_kernels_are_aarch64_code_for_every_aarch64_cpu(emulator):
    assert _elf_machine(emulator.library) == ELF_MACHINE_AARCH64
    record = json.loads(emulator.library.with_name("libkokoro_ext_kernels.cpu.json").read_text())
    assert record["march"] == "armv8-a" and "__ARM_NEON" in record["macros"]
    assert "__ARM_FEATURE_DOTPROD" not in record["macros"]


def test_x86_refuses_the_aarch64_build(arm_build):
    with pytest.raises(ValueError, match="compiled for aarch64 .*this machine is x86_64"):
        Synthesizer(arm_build)


def test_the_aarch64_build_speaks_as_the_x86_build_under_qemu(
    arm_build, build_dir, emulator, tmp_path, parity_report
):
    out = tmp_path / "arm.npy"
    result = emulator.run([GUEST, arm_build, PHONEMES, out], capture_output=True, text=True,
                          timeout=1200)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    host, timing = (json.loads(line) for line in result.stdout.splitlines()[-2:])
    assert host["machine"] == "aarch64" and host["arch"] == "aarch64"
    features = set(host["features"])
    assert {"neon", "dotprod", "fullfp16"} <= features and "sve" not in features
    arm = np.load(out)
    x86 = Synthesizer(build_dir[0]).synthesize_phonemes(PHONEMES, seed=0).audio
    assert arm.shape == x86.shape  # the same durations, frame for frame
    error = (arm - x86).astype(np.float64)
    snr = 10 * np.log10(np.sum(x86.astype(np.float64) ** 2) / np.sum(error**2))
    parity_report(
        f"aarch64 (qemu cortex-a76) vs x86: {arm.size} samples, max |diff| "
        f"{np.max(np.abs(arm - x86)):.1e}, {snr:.0f} dB; guest synthesis {timing['seconds']:.0f} s"
    )
    assert snr >= SNR_DB


def test_a_cortex_a72_refuses_the_rpi5_build_for_its_missing_instructions(arm_build, emulator):
    a72 = emulation.Emulator(emulator.sysroot, emulator.site, emulator.library, cpu="cortex-a72")
    code = f"from kokoro_ext.run.synthesizer import Synthesizer; Synthesizer({str(arm_build)!r})"
    result = a72.run(["-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "compiled for CPU 'cortex-a76' and use instructions this CPU" in result.stderr
    assert "lacks: dotprod, fullfp16" in result.stderr and "--target aarch64" in result.stderr
