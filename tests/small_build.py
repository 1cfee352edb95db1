"""The small-config build the pipeline tests share (one per test session)."""

from __future__ import annotations

import json
from pathlib import Path

from kokoro_ext.build import build, parse_args
from kokoro_ext.model import small_config

TOKENS, FRAMES = (12, 20), (24, 48)


def build_small(root: Path, log=print, jobs: int | None = None) -> Path:
    """Build the small config with TOKENS and FRAMES buckets into ``root/artifacts``.

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
            "--tokens",
            ",".join(map(str, TOKENS)),
            "--frames",
            ",".join(map(str, FRAMES)),
            "--random-weights",
        ]
        + (["--jobs", str(jobs)] if jobs else [])
    )
    return build(args, log=log)
