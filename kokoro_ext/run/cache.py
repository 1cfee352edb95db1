"""Where ``python -m kokoro_ext.build.fetch`` keeps the real model and the voices.

One directory per user, shared by every build and checkout:

    $KOKORO_TVM_EXT_CACHE, else $XDG_CACHE_HOME/kokoro-tvm-ext, else ~/.cache/kokoro-tvm-ext
      kokoro-v1.0.int8.onnx     Kokoro-82M v1.0, int8 ONNX export (kokoro-onnx's file)
      voices/<name>.bin         the 54 v1.0 voice packs, float32 [510, 1, 256]
      fetched.json              where each came from and its SHA-256

Nothing here touches the network or imports torch or TVM.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "KOKORO_TVM_EXT_CACHE"
MODEL_FILE = "kokoro-v1.0.int8.onnx"
VOICES = "voices"
RECORD = "fetched.json"
DEFAULT_VOICE = "af_heart"
FETCH_HINT = "run `python -m kokoro_ext.build.fetch` (./bootstrap.sh does) to download them once"


def cache_dir() -> Path:
    """The cache directory (it may not exist yet)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kokoro-tvm-ext"


def model_path() -> Path:
    """Where the fetched Kokoro-82M int8 ONNX model is (or would be)."""
    return cache_dir() / MODEL_FILE


def voices_dir() -> Path:
    """Where the fetched voice packs are (or would be)."""
    return cache_dir() / VOICES


def default_weights() -> Path:
    """The fetched model; ValueError saying how to get it if it is not there."""
    path = model_path()
    if not path.is_file():
        raise ValueError(
            f"the Kokoro-82M weights are not in {cache_dir()} ({MODEL_FILE} is missing): "
            f"{FETCH_HINT}, or pass --weights FILE (kokoro-v1_0.pth or a kokoro-v1.0 .onnx), "
            "or --random-weights for a model that is not speech"
        )
    return path
