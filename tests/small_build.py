"""The small-config build the pipeline tests share (one per test session)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kokoro_ext.build.cli import parse_args
from kokoro_ext.build.driver import build
from kokoro_ext.build.model import small_config
from kokoro_ext.run.manifest import Limits

#: Limits tests put on a Synthesizer of the small build, so that short texts need chunks.
TOKENS, FRAMES = 20, 48


def limit(synth):
    """``synth`` taking at most TOKENS tokens and FRAMES frames per call; returns it."""
    synth.limits = Limits(tokens=TOKENS, frames=FRAMES)
    return synth


def small_config_file(root: Path) -> Path:
    """The small config as a file in ``root``, for ``--config``."""
    config = root / "small.json"
    config.write_text(json.dumps(small_config(), ensure_ascii=False))
    return config


def build_small(
    root: Path, log=print, jobs: int | None = None, target: str | None = None,
    wire: str | None = None,
) -> Path:
    """Build the small config into ``root/artifacts`` (one library per stage).

    ``jobs`` as ``build --jobs`` (default: one process per core), ``target`` as
    ``build --target`` (default: this host), ``wire`` as ``build --wire`` (default float16).
    """  # fmt: skip
    options = parse_args(
        ["--config", str(small_config_file(root)), "--out", str(root / "artifacts"),
         "--random-weights"]
        + (["--jobs", str(jobs)] if jobs else [])
        + (["--target", target] if target else [])
        + (["--wire", wire] if wire else [])
    )  # fmt: skip
    return build(options, log=log)


@dataclass(frozen=True)
class GridSources:
    """A small-config checkpoint whose weights lie on int8 grids (as Kokoro-82M v1.0's
    int8 ones do), with its config and a voice: what ``--weight-dtype auto`` stores as
    int8, losslessly."""

    config: Path
    checkpoint: Path
    voice: Path


#: The modules of the checkpoint, as kokoro_ext.build.model loads them.
PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


def on_int8_grids(model) -> None:
    """Every float weight of 2 to 4 dims of ``model`` put on an int8 grid with a step per
    leading row (per output channel), as an int8 checkpoint holds them; folded weight
    norms exact."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim < 2 or name.endswith("weight_g"):
                continue
            rows = p.reshape(p.shape[0], -1)
            step = rows.abs().amax(dim=1).clamp_min(1e-12) / 127
            snapped = torch.round(rows / step[:, None]) * step[:, None]
            p.copy_(snapped.reshape(p.shape))
        for module in model.modules():
            if hasattr(module, "weight_g") and hasattr(module, "weight_v"):
                ones = torch.ones_like(module.weight_g)
                _, norm = torch._weight_norm_interface(module.weight_v, ones, 0)
                module.weight_g.copy_(norm.reshape(module.weight_g.shape))


def grid_sources(root: Path) -> GridSources:
    """The small config's model (seed 3) on int8 grids, saved in ``root``."""
    import numpy as np
    import torch

    from kokoro_ext.build.model import build_model

    config = small_config_file(root)
    model = build_model(small_config(), seed=3)
    on_int8_grids(model)
    checkpoint = root / "grid.pth"
    torch.save({part: getattr(model, part).state_dict() for part in PARTS}, checkpoint)
    voice = root / "voice.npy"
    np.save(voice, np.random.default_rng(0).standard_normal((510, 1, 256)).astype(np.float32) * 0.1)
    return GridSources(config, checkpoint, voice)


def build_grid(sources: GridSources, out: Path, *flags: str, log=print) -> Path:
    """``sources`` built into ``out`` with the build's ``flags`` (``--target`` and the
    like)."""
    options = parse_args(
        ["--config", str(sources.config), "--weights", str(sources.checkpoint), "--voice",
         str(sources.voice), *flags, "--out", str(out)]
    )  # fmt: skip
    return build(options, log=log)


def rewire(build: Path, out: Path, wire: str) -> Path:
    """A copy at ``out`` of ``build`` (a browser build of ``--wire float32``) with its
    weights in wire format ``wire``: the bytes ``build --wire WIRE`` writes, from the same
    arrays through the same writer, without compiling again."""
    import dataclasses
    import shutil

    import numpy as np

    from kokoro_ext.run import artifacts
    from kokoro_ext.run.manifest import WeightsFile
    from kokoro_ext.run.weights import load_weights
    from kokoro_ext.run.wire import write_wire_weights

    shutil.copytree(build, out)
    manifest = artifacts.read_manifest(out)
    stages = {}
    for name, entry in manifest.stages.items():
        assert all(t.wire is None for t in entry.weights.tensors), "not a float32 build"
        file = build / entry.weights.file
        arrays = [np.array(a) for a in load_weights(file, entry.weights.tensors)]
        path = out / entry.weights.file
        path.unlink()  # a copy, not the original's bytes rewritten
        tensors = write_wire_weights(path, arrays, wire)
        stages[name] = dataclasses.replace(entry, weights=WeightsFile(
            file=entry.weights.file, sha256=artifacts.sha256(path), bytes=path.stat().st_size,
            tensors=tuple(tensors)))  # fmt: skip
    artifacts.write_manifest(out, dataclasses.replace(manifest, stages=stages))
    return out
