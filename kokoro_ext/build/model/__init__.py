"""Kokoro-82M as PyTorch modules: configs, weights (checkpoint or ONNX) and voices, offline."""

from .checkpoint import build_model, load_voice, random_voice
from .config import load_config, small_config
from kokoro_ext.run.voices import VOICE_SHAPE, list_voices, load_voice_array, resolve_voice

__all__ = [
    "VOICE_SHAPE",
    "build_model",
    "list_voices",
    "load_config",
    "load_voice",
    "load_voice_array",
    "random_voice",
    "resolve_voice",
    "small_config",
]
