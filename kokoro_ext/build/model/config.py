"""Kokoro model configs: the shipped Kokoro-82M v1.0 config and a small one for tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from kokoro_ext import KOKORO_82M_CONFIG

_REQUIRED = ("vocab", "n_token", "hidden_dim", "style_dim", "n_layer", "max_dur", "plbert", "istftnet")


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """Load a Kokoro config.json; the shipped Kokoro-82M v1.0 config when path is None.

    Raises ValueError naming the file and the missing keys if it is not a Kokoro config.
    """
    path = Path(path) if path is not None else KOKORO_82M_CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read Kokoro config {path}: {err}") from err
    missing = [key for key in _REQUIRED if key not in config]
    if missing:
        raise ValueError(f"{path} is not a Kokoro config: missing {', '.join(missing)}")
    return config


def small_config() -> dict[str, Any]:
    """The Kokoro architecture at a fraction of the size, for fast tests.

    Same vocab, module structure and iSTFTNet layout as Kokoro-82M, with a narrow, shallow
    ALBERT and one layer where Kokoro stacks three.  Widths elsewhere stay: kokoro's
    Decoder hard-codes its channels (1024/512/64, and 512 for the text features it takes),
    so neither hidden_dim nor the decoder can shrink through the config; the style vector
    stays 128 wide so voice packs keep their [510, 1, 256] shape.
    """
    config = copy.deepcopy(load_config())
    config.update(n_layer=1)
    config["plbert"].update(
        hidden_size=64, num_attention_heads=2, intermediate_size=128, num_hidden_layers=2
    )
    return config
