"""Kokoro-82M as PyTorch modules: configs, weights and voices, without the model hub."""

from .checkpoint import build_model, load_voice, random_voice
from .config import load_config, small_config

__all__ = ["build_model", "load_config", "load_voice", "random_voice", "small_config"]
