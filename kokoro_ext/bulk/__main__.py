"""python -m kokoro_ext.bulk INPUT OUT_DIR: every record of INPUT as an audio file in OUT_DIR.

Exit status 0 when every record is written (or was already), 1 when some failed (the
results table and the summary say which and why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kokoro_ext.bulk.output import FORMATS
from kokoro_ext.bulk.records import BOOK_SUFFIXES, PIECE_CHARS, TABLE_SUFFIXES
from kokoro_ext.bulk.run import DEFAULT_THREADS, BulkOptions, run


def parse_args(argv: list[str] | None = None) -> BulkOptions:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.bulk",
        description="Synthesize a table of records or a book, one audio file per record, on Ray.",
    )
    parser.add_argument("input", type=Path, help=f"a table ({', '.join(TABLE_SUFFIXES)}: text and "
                        "optional id, voice, speed, language) or a book "
                        f"({', '.join(BOOK_SUFFIXES)}: a record per chapter)")
    parser.add_argument("out_dir", type=Path, help="audio, word timestamps and results.parquet")
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"),
                        help="the build; on a cluster, a path every node can read")
    parser.add_argument("--format", choices=FORMATS, default="flac")
    parser.add_argument("--voice", help="the voice of records that name none (default: the build's)")
    parser.add_argument("--speed", type=float, default=1.0, help="of records that give none")
    parser.add_argument("--lang", dest="language", help="language of records that give none "
                        "(default: the voice's)")
    parser.add_argument("--address", help="a Ray cluster, as ray.init takes it (auto: the one "
                        "this machine is part of); default: start Ray on this machine")
    parser.add_argument("--actors", type=int, help="default: the cluster's CPUs / --threads")
    parser.add_argument("--threads", type=int,
                        help=f"per actor (default: {DEFAULT_THREADS}, or the largest node's CPUs if fewer)")
    parser.add_argument("--gpus-per-actor", type=float, default=1.0,
                        help="a CUDA build's actors: the share of a GPU each takes (0.5: two "
                        "a GPU); their number: the cluster's GPUs / this, unless --actors")
    parser.add_argument("--piece-chars", type=int, default=PIECE_CHARS,
                        help="a long record is cut at sentence ends into pieces of this size")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    args = parser.parse_args(argv)
    return BulkOptions(**vars(args))


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        summary = run(options)
    except (OSError, ValueError) as error:  # the input or the build cannot be read
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary.text())
    return 1 if summary.tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
