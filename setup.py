"""kokoro-tvm-ext: Kokoro-82M compiled with Apache TVM.

Install with the pinned TVM wheel already present and the patch series applied
(see README.md, or run ./bootstrap.sh):

    pip install --no-build-isolation -e .

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
CPU_RECORD = "libkokoro_ext_kernels.cpu.json"  # kokoro_ext.native.CPU_RECORD


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
    install_requires=[
        f"apache-tvm=={pinned('TVM_WHEEL_VERSION')}",
        f"apache-tvm-ffi=={pinned('TVM_FFI_VERSION')}",
        "torch>=2.4",
        "kokoro==0.9.4",
        "numpy",
        "onnx",  # kokoro_ext.model.onnx_import: the real weights come as an ONNX export
        "scipy-openblas32>=0.3.27",
    ],
    extras_require={
        "test": ["pytest", "onnx", "onnxscript", "onnxruntime", "openai", "httpx"],
        # python -m kokoro_ext.serve: the OpenAI-compatible speech server and its encoders
        "serve": ["starlette", "uvicorn", "soundfile>=0.13", "lameenc"],
        # bench/e2e.py compares with ONNX Runtime and plots
        "bench": ["onnx", "onnxscript", "onnxruntime", "matplotlib"],
    },
    zip_safe=False,
)
