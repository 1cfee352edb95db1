# Cross-building the kernel library for 64-bit ARM Linux on another machine:
#
#   cmake -S . -B build-arm --toolchain cpp/cmake/aarch64-linux-gnu.cmake \
#     -DKOKORO_EXT_TARGET_SITE=<dir> -DKOKORO_EXT_LIBRARY_DIR=<out>
#
# with Debian's g++-aarch64-linux-gnu.  <dir> holds the aarch64 wheels of apache-tvm,
# apache-tvm-ffi and scipy-openblas32 (kokoro_ext.build.aarch64 installs them there):
# the library links their libraries, the headers come from the build's own environment.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(_triple aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${_triple}-gcc)
set(CMAKE_CXX_COMPILER ${_triple}-g++)
set(CMAKE_FIND_ROOT_PATH /usr/${_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# Every AArch64 CPU has NEON (ARMv8-A): the library runs on all of them unless
# -DKOKORO_EXT_MARCH=... asks for more (e.g. armv8.2-a+dotprod+fp16 for Cortex-A76).
set(KOKORO_EXT_MARCH "armv8-a" CACHE STRING "-march for the kernels; empty for the compiler default")
