"""kokoro-tvm-ext: Kokoro-82M compiled with Apache TVM.

Two installs (README.md, "Deploy"):

    pip install --no-build-isolation .            # run side: speak with a build (no torch)
    pip install --no-build-isolation ".[build]"   # and compile builds (torch, kokoro, onnx)

Building needs the pinned TVM wheel with the patch series applied (./bootstrap.sh does
both, and installs ".[build,test]" editable); running a build does not: the patches
change only TVM's compiler.

The native kernel library (cpp/) is built with CMake against the tvm-ffi and the
scipy-openblas32 of the installing interpreter, so the build must not be isolated
from it.
"""

import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CPU_RECORD = "libkokoro_ext_kernels.cpu.json"  # kokoro_ext.run.native.CPU_RECORD


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


setup(
    name="kokoro-tvm-ext",
    version="0.1.0",
    description="Kokoro-82M text-to-speech compiled with Apache TVM for CPUs",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["kokoro_ext", "kokoro_ext.*"]),
    package_data={"kokoro_ext": ["configs/*.json", f"lib/{CPU_RECORD}"]},
    ext_modules=[CMakeLibrary("kokoro_ext.lib.libkokoro_ext_kernels")],
    cmdclass={"build_ext": CMakeBuild},
    # The run side (kokoro_ext.run, kokoro_ext.text): no torch.
    install_requires=[
        f"apache-tvm=={pinned('TVM_WHEEL_VERSION')}",
        f"apache-tvm-ffi=={pinned('TVM_FFI_VERSION')}",
        "numpy",
        "scipy-openblas32>=0.3.27",  # the native kernels link its OpenBLAS
        # the text front end (kokoro_ext/text): G2P of the nine Kokoro languages, offline.
        # misaki's English G2P is listed rather than as misaki[en]: that extra also brings
        # spacy-curated-transformers and with it torch, which kokoro_ext.text never uses
        "misaki==0.9.4",
        "spacy>=3.8",  # only misaki's types; kokoro_ext.text.tokenizer splits the text
        "num2words",  # numbers spelled out (kokoro_ext.text.normalize)
        "espeakng-loader",  # espeak-ng and its data: es, fr, hi, it, pt-br; English fallback
        "phonemizer-fork",
        "fugashi",  # Japanese (misaki's cutlet reader) with the dictionary unidic-lite
        "unidic-lite",
        "jaconv",
        "mojimoji",
        "jieba",  # Mandarin (misaki.zh)
        "pypinyin",
        "pypinyin-dict",
        "cn2an",
        "ordered-set",
        "tqdm",  # the say command's progress bar on a terminal
    ],
    extras_require={
        # The build side (kokoro_ext.build) and the comparison tools (kokoro_ext.tools).
        "build": [
            "torch>=2.4",
            "kokoro==0.9.4",
            "onnx",  # kokoro_ext.build.model.onnx_import: the real weights are an ONNX export
        ],
        "test": [
            "pytest", "onnx", "onnxscript", "onnxruntime", "import-linter>=2.1", "openai", "httpx",
            "matplotlib",  # tests/test_bench_user.py draws the bench's chart
            # every audio format's encoder, and PyAV's FFmpeg to decode mp3 and aac again
            "kokoro-tvm-ext[audio]",
        ],
        # the encoders beyond wav and pcm (kokoro_ext.run.encode), for say and the server:
        # libsndfile (flac, opus), LAME (mp3), PyAV's FFmpeg (aac; wheels bundle FFmpeg)
        "audio": ["soundfile>=0.13", "lameenc", "av>=18"],
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
