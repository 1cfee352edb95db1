"""The runtime wheel (kokoro_ext.tools.wheel) and how the run side picks its kernels.

The choice among a wheel's kernel libraries (kokoro_ext.run.native.select) is tested on
simulated hosts: the best variant a CPU runs, $KOKORO_EXT_ISA forcing a lower one, and
refusing one above the host; a language whose G2P extra is missing names it.  Then the x86-64 wheel is built (about a minute: its three
kernel libraries are the session's ``x86_kernels``), its contents and metadata checked,
and it is installed (``pip install --no-deps --target``) and speaks a build for any AVX2
CPU with each variant, with the TVM runtime library it carries: the AVX2 and baseline
kernels (what an AVX2-only or older host loads) give the AVX-512 kernels' audio within
``SNR_DB``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kokoro_ext.run import native
from kokoro_ext.run.cpu import HostCPU
from kokoro_ext.text import frontend
from kokoro_ext.text.languages import LANGUAGES, language
from kokoro_ext.tools import wheel
from small_build import build_small

GUEST = Path(__file__).with_name("aarch64_guest.py")
PHONEMES = "hˈɑɪ wˈɜɹld"
#: The AVX2 and baseline kernels' audio against the AVX-512 kernels', on one build: the
#: products' sums are the same in the same order (tests/test_products_isa.py), the LSTM,
#: Winograd and elementwise kernels differ in vector width and FMA contraction only, so
#: only float rounding separates them.  The bound is the AArch64 build's against x86's
#: (tests/test_aarch64.py); measured on the small config: the AVX2 kernels bit for bit the
#: AVX-512 ones, the baseline kernels 99 dB.
SNR_DB = 40.0

# /proc/cpuinfo flags of three x86-64 hosts: AVX-512 (a Zen 4 guest), AVX2 only (Zen 3),
# and neither (an early x86-64: SSE2 and SSE3 only)
_BASE = "fpu cx8 cmov mmx fxsr sse sse2 lm pni"
_AVX2 = f"{_BASE} ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2 movbe abm xsave"
_AVX512 = f"{_AVX2} avx512f avx512bw avx512cd avx512dq avx512vl avx512_vnni"
HOSTS = {
    name: HostCPU.from_cpuinfo(f"model name\t: {name}\nflags\t\t: {flags}\n")
    for name, flags in (("zen4", _AVX512), ("zen3", _AVX2), ("k8", _BASE))
}
# the feature macros GCC 12 predefines for each variant's -march (those that name a feature)
_V1 = ["__MMX__", "__SSE__", "__SSE2__", "__FXSR__"]
_V3 = _V1 + ["__SSE3__", "__SSSE3__", "__SSE4_1__", "__SSE4_2__", "__POPCNT__", "__AVX__",
             "__AVX2__", "__FMA__", "__F16C__", "__BMI__", "__BMI2__", "__MOVBE__", "__LZCNT__"]  # fmt: skip
_V4 = _V3 + ["__AVX512F__", "__AVX512BW__", "__AVX512CD__", "__AVX512DQ__", "__AVX512VL__"]
MACROS = {"x86-64": _V1, "x86-64-v3": _V3, "x86-64-v4": _V4}


def _write_variants(folder: Path, plain: bool = False) -> list[native.KernelLibrary]:
    """Stand-ins for a wheel's x86-64 kernel libraries (records, empty files); with
    ``plain`` also a library built for one machine (-march=native, AVX-512)."""
    for variant in native.VARIANTS["x86_64"]:
        library = folder / variant.file_name
        library.touch()
        record = {"arch": "x86_64", "march": variant.march, "compiler": "GNU 12.2.0",
                  "macros": MACROS[variant.march]}  # fmt: skip
        native.record_path(library).write_text(json.dumps(record))
    if plain:
        (folder / native.LIBRARY_NAME).touch()
        record = {"march": "native", "compiler": "GNU 12.2.0", "macros": _V4 + ["__AVX512VNNI__"]}
        (folder / native.CPU_RECORD).write_text(json.dumps(record))
    return native.installed(folder)


@pytest.mark.parametrize("host, chosen", [("zen4", "avx512"), ("zen3", "avx2"), ("k8", "baseline")])
def test_the_best_variant_the_host_runs_is_loaded(tmp_path, host, chosen):
    libraries = _write_variants(tmp_path)
    assert [lib.variant for lib in libraries] == ["avx512", "avx2", "baseline"]
    assert native.select(libraries, host=HOSTS[host]).variant == chosen


def test_the_isa_override_forces_a_lower_variant(tmp_path):
    libraries = _write_variants(tmp_path)
    for isa in ("avx2", "baseline"):
        assert native.select(libraries, isa, HOSTS["zen4"]).variant == isa


def test_the_isa_override_above_the_host_is_refused_naming_what_it_lacks(tmp_path):
    libraries = _write_variants(tmp_path)
    lacks = r"avx512bw, avx512cd, avx512dq, avx512f, avx512vl"
    with pytest.raises(ValueError, match=rf"KOKORO_EXT_ISA=avx512 .*x86-64-v4.*zen3\) lacks: {lacks}"):
        native.select(libraries, "avx512", HOSTS["zen3"])
    with pytest.raises(ValueError, match=r"KOKORO_EXT_ISA=avx2 .*lacks: avx, avx2, bmi, bmi2"):
        native.select(libraries, "avx2", HOSTS["k8"])
    with pytest.raises(ValueError, match=r"no such kernel library here \(variants: avx512, avx2, baseline\)"):
        native.select(libraries, "sse9", HOSTS["zen4"])


def test_a_library_built_for_this_machine_comes_before_the_variants(tmp_path):
    libraries = _write_variants(tmp_path, plain=True)
    assert libraries[0] == native.KernelLibrary(tmp_path / native.LIBRARY_NAME)
    assert native.select(libraries, host=HOSTS["zen4"]).variant is None
    # where it does not run (copied to another machine), the best variant that does
    assert native.select(libraries, host=HOSTS["zen3"]).variant == "avx2"


def test_the_environment_chooses_the_folder_and_the_variant(tmp_path, monkeypatch):
    _write_variants(tmp_path)
    monkeypatch.setenv(native.LIBRARY_ENV, str(tmp_path))
    monkeypatch.delenv(native.ISA_ENV, raising=False)
    assert native.library_path(HOSTS["zen4"]).name == "libkokoro_ext_kernels.avx512.so"
    monkeypatch.setenv(native.ISA_ENV, "baseline")
    assert native.library_path(HOSTS["zen4"]).name == "libkokoro_ext_kernels.baseline.so"
    monkeypatch.setenv(native.LIBRARY_ENV, str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="native kernel library not found"):
        native.library_path(HOSTS["zen4"])


def test_the_tvm_runtime_is_apache_tvms_where_installed_else_the_wheels(tmp_path, monkeypatch):
    found = native.runtime_library()  # this environment has apache-tvm (the build side)
    assert found.path.parent.parent.name == "tvm" and found.version == wheel.read_pin()
    # a runtime wheel's install: no tvm package, the runtime and its record in kokoro_ext/lib
    monkeypatch.setitem(sys.modules, "tvm", None)  # find_spec("tvm") is then None
    monkeypatch.setattr(native, "LIBRARY_DIR", tmp_path)
    with pytest.raises(ValueError, match="TVM runtime library was found neither"):
        native.runtime_library()
    (tmp_path / native.RUNTIME_RECORD).write_text(json.dumps({"version": "0.27.0.post1"}))
    assert native.runtime_library() == native.RuntimeLibrary(
        tmp_path / native.RUNTIME_NAME, "0.27.0.post1"
    )


@pytest.mark.parametrize("code, module, extra", [("j", "misaki.cutlet", "ja"), ("z", "jieba", "zh")])
def test_a_language_whose_g2p_is_not_installed_names_its_extra(monkeypatch, code, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as in an English-only install
    with pytest.raises(ValueError, match=rf"pip install 'kokoro-tvm-ext\[{extra}\]'"):
        frontend._load_g2p(language(code))
    kinds = {lang.g2p for lang in LANGUAGES.values()} - {"misaki-en"}
    assert kinds == set(frontend.EXTRAS)


# --- the x86-64 wheel, built --------------------------------------------------------------

x86_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="the x86-64 wheel")


@pytest.fixture(scope="module")
def x86_wheel(x86_kernels, tmp_path_factory) -> Path:
    """The x86-64 runtime wheel, from the session's kernel libraries."""
    if importlib.util.find_spec("auditwheel") is None:
        pytest.skip("auditwheel is not installed (pip install auditwheel)")
    try:
        wheel._tool("patchelf")
    except RuntimeError as err:
        pytest.skip(str(err))
    scratch = tmp_path_factory.mktemp("wheel")
    lib = scratch / "lib"
    shutil.copytree(x86_kernels, lib)
    wheel.copy_runtime("x86_64", lib)
    return wheel.package(lib, scratch / "dist")


@x86_only
def test_the_wheel_holds_the_run_side_and_its_libraries_for_any_manylinux(x86_wheel):
    assert x86_wheel.name.startswith("kokoro_tvm_ext-")
    python, abi, plat = x86_wheel.name.removesuffix(".whl").split("-")[-3:]
    assert (python, abi) == ("py3", "none") and plat.startswith("manylinux_")
    assert plat.endswith("_x86_64")
    names = wheel.contents(x86_wheel)
    for variant in native.VARIANTS["x86_64"]:
        assert variant.file_name in names
        assert native.record_path(Path(variant.file_name)).name in names
    assert {native.RUNTIME_NAME, native.RUNTIME_RECORD, f"{wheel.LICENSES}/LICENSE",
            f"{wheel.LICENSES}/NOTICE"} <= set(names)  # fmt: skip
    assert native.LIBRARY_NAME not in names  # no library built for one machine
    with zipfile.ZipFile(x86_wheel) as archive:
        files = archive.namelist()
        (metadata,) = [n for n in files if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata).decode()
        record = json.loads(archive.read(f"kokoro_ext/lib/{native.RUNTIME_RECORD}"))
    # nothing grafted: tvm-ffi and OpenBLAS stay in their wheels, the runtime is in ours
    assert not [n for n in files if ".libs/" in n]
    assert not [n for n in files if n.startswith("kokoro_ext/") and n.endswith(".pyc")]
    assert record == {"version": wheel.read_pin()}
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]  # fmt: skip
    assert f"apache-tvm-ffi=={wheel.read_pin('TVM_FFI_VERSION')}" in requires
    assert not [r for r in requires if r.startswith(("apache-tvm=", "spacy", "torch", "jieba"))]
    extras = {line.split(":", 1)[1].strip() for line in metadata.splitlines()
              if line.startswith("Provides-Extra:")}  # fmt: skip
    assert {"ja", "zh", "espeak", "build", "serve"} <= extras


@x86_only
def test_the_wheels_libraries_find_what_they_link_relative_to_themselves(x86_wheel, tmp_path):
    with zipfile.ZipFile(x86_wheel) as archive:
        archive.extractall(tmp_path)
    for library in sorted((tmp_path / "kokoro_ext" / "lib").glob("*.so")):
        rpath = subprocess.run([wheel._tool("patchelf"), "--print-rpath", str(library)],
                               check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
        assert rpath == wheel.RPATH, library.name


@pytest.fixture(scope="module")
def avx2_build(tmp_path_factory) -> Path:
    """The small config (random weights) built for any AVX2 CPU (x86-64-v3)."""
    return build_small(tmp_path_factory.mktemp("v3"), log=lambda _: None,
                       target="llvm -mcpu=x86-64-v3")  # fmt: skip


def _speak(site: Path, build: Path, isa: str, out: Path) -> dict:
    """PHONEMES spoken by the wheel installed in ``site`` with the ``isa`` kernels, the
    apache-tvm package hidden (so its own TVM runtime is used); what it loaded."""
    code = (
        "import json, runpy, sys\n"
        "sys.modules['tvm'] = None  # as where apache-tvm is not installed\n"
        f"sys.argv = ['guest', {str(build)!r}, {PHONEMES!r}, {str(out)!r}]\n"
        f"runpy.run_path({str(GUEST)!r}, run_name='__main__')\n"
        "import kokoro_ext\n"
        "from kokoro_ext.run import native\n"
        "print(json.dumps({'package': kokoro_ext.__file__, 'kernels': str(native.load()),\n"
        "                  'runtime': str(native.load_runtime())}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), native.ISA_ENV: isa}
    env.pop(native.LIBRARY_ENV, None)
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=site,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@x86_only
def test_every_variant_of_the_installed_wheel_speaks_the_same_audio(
    x86_wheel, avx2_build, tmp_path, parity_report
):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--target", str(site), str(x86_wheel)],
                   check=True)  # fmt: skip
    host = HostCPU.detect()
    audio = {}
    for variant in native.VARIANTS["x86_64"]:
        library = site / "kokoro_ext" / "lib" / variant.file_name
        if native.missing_instructions(native.CPURecord.read(library, host).features, host):
            continue  # this host cannot run it
        loaded = _speak(site, avx2_build, variant.name, tmp_path / f"{variant.name}.npy")
        assert Path(loaded["package"]).is_relative_to(site)
        assert loaded["kernels"] == str(library)
        assert loaded["runtime"] == str(site / "kokoro_ext" / "lib" / native.RUNTIME_NAME)
        audio[variant.name] = np.load(tmp_path / f"{variant.name}.npy")
    assert "baseline" in audio and "avx2" in audio, f"this host ran only {sorted(audio)}"
    reference_name = next(iter(audio))
    reference = audio[reference_name]
    assert np.isfinite(reference).all() and np.abs(reference).max() > 0
    for name, other in audio.items():
        assert other.shape == reference.shape, name
        error = float(np.sum((other - reference) ** 2))
        snr = 10 * np.log10(float(np.sum(reference**2)) / error) if error else float("inf")
        parity_report(f"runtime wheel: {name} kernels vs {reference_name}: SNR {snr:.1f} dB")
        assert snr >= SNR_DB, (name, snr)
