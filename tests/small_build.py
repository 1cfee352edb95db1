"""The small-config build the pipeline tests share (one per test session)."""

from __future__ import annotations

import json
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
