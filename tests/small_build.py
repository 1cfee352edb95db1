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


def build_small(root: Path, log=print, jobs: int | None = None, target: str | None = None) -> Path:
    """Build the small config into ``root/artifacts`` (one library per stage).

    ``jobs`` as ``build --jobs`` (default: one process per core), ``target`` as
    ``build --target`` (default: this host).
    """
    options = parse_args(
        ["--config", str(small_config_file(root)), "--out", str(root / "artifacts"),
         "--random-weights"]
        + (["--jobs", str(jobs)] if jobs else [])
        + (["--target", target] if target else [])
    )  # fmt: skip
    return build(options, log=log)
