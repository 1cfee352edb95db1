"""Building ``kokoro.KModel`` from a config, with real or deterministic random weights.

kokoro's own constructor downloads weights from the model hub unless it is given a
checkpoint file, and loads a checkpoint that does not fit the config with
``strict=False`` after a debug log line, which leaves random weights in place silently.
``build_model`` never touches the network and refuses a checkpoint that does not fit.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from kokoro_ext.run.voices import VOICE_SHAPE, load_voice_array

_RANDOM_DURATION_BIAS = -3.0
_PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


def _strip_module_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # Checkpoints saved from DataParallel prefix every key with "module."; kokoro strips it.
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module.") :]: v for k, v in state.items()}
    return state


def _load_checkpoint(model: torch.nn.Module, path: Path) -> None:
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a bad file
        raise ValueError(f"cannot read Kokoro weights {path}: {err}") from err
    if not isinstance(checkpoint, dict) or set(checkpoint) != set(_PARTS):
        found = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ValueError(
            f"{path} is not a kokoro-v1_0.pth style checkpoint: expected the parts "
            f"{list(_PARTS)}, found {found}"
        )
    for part in _PARTS:
        module = getattr(model, part)
        state = _strip_module_prefix(checkpoint[part])
        expected = module.state_dict()
        problems = [f"missing {k}" for k in expected if k not in state]
        problems += [f"unexpected {k}" for k in state if k not in expected]
        problems += [
            f"{k}: checkpoint {tuple(state[k].shape)} vs config {tuple(v.shape)}"
            for k, v in expected.items()
            if k in state and state[k].shape != v.shape
        ]
        if problems:
            shown = "; ".join(problems[:5]) + (f"; ... {len(problems) - 5} more" if len(problems) > 5 else "")
            raise ValueError(
                f"weights in {path} do not match the config (part {part!r}): {shown}. "
                "Pass the config the checkpoint was trained with (--config)."
            )
        module.load_state_dict(state)


def _load_onnx(model: torch.nn.Module, path: Path) -> None:
    from kokoro_ext.build.model.onnx_import import import_onnx

    imported = import_onnx(path, model)
    model.load_state_dict(imported.state_dict)


def build_model(
    config: dict[str, Any], weights: str | Path | None = None, seed: int = 0
) -> torch.nn.Module:
    """A ``kokoro.KModel`` in eval mode for ``config``.

    With ``weights`` (a kokoro-v1_0.pth style checkpoint, or a Kokoro ONNX export, int8
    or float32: kokoro_ext.build.model.onnx_import) its parameters are loaded and checked
    against the config; without, they are PyTorch's default initialization drawn
    from ``torch.manual_seed(seed)``, the same for the same seed and config (a model that
    does not produce speech), with the duration head's bias set so that tokens last a few
    frames, as in a trained model.
    """
    from kokoro import KModel

    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)  # gives kokoro a checkpoint so it does not download one
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))
    if weights is not None and Path(weights).suffix == ".onnx":
        _load_onnx(model, Path(weights))
    elif weights is not None:
        _load_checkpoint(model, Path(weights))
    else:
        # Untrained, the duration head predicts about max_dur/2 frames per token (25, where
        # Kokoro speaks about 3); a bias that puts random models at speech-like durations
        # keeps their inputs in the frame buckets that trained models use.
        with torch.no_grad():
            model.predictor.duration_proj.linear_layer.bias.fill_(_RANDOM_DURATION_BIAS)
    return model.eval()


def load_voice(source: str | Path) -> torch.Tensor:
    """A voice pack, float32 [510, 1, 256], from a .bin/.npy/.pt file or by name
    (``af_heart``: see kokoro_ext.run.voices)."""
    return torch.from_numpy(load_voice_array(source))


def random_voice(seed: int = 0) -> torch.Tensor:
    """A deterministic stand-in voice pack for random-weight models."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(VOICE_SHAPE, generator=generator) * 0.1
