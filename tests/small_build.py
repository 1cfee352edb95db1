"""The small-config build the pipeline tests share (one per test session)."""

from __future__ import annotations

import json
from pathlib import Path

from kokoro_ext.build.cli import build, parse_args
from kokoro_ext.build.model import small_config
from kokoro_ext.run.pipeline import AnyLength

#: Limits tests put on a Synthesizer of the small build, so that short texts need chunks.
TOKENS, FRAMES = 20, 48


def limit(synth):
    """``synth`` taking at most TOKENS tokens and FRAMES frames per call; returns it."""
    synth.token_sizes, synth.frame_sizes = AnyLength(TOKENS), AnyLength(FRAMES)
    return synth


def build_small(root: Path, log=print, jobs: int | None = None) -> Path:
    """Build the small config into ``root/artifacts`` (one library per stage).

    ``jobs`` as ``build --jobs`` (default: one process per core).
    """
    config = root / "small.json"
    config.write_text(json.dumps(small_config(), ensure_ascii=False))
    args = parse_args(
        [
            "--config",
            str(config),
            "--out",
            str(root / "artifacts"),
            "--random-weights",
        ]
        + (["--jobs", str(jobs)] if jobs else [])
    )
    return build(args, log=log)
