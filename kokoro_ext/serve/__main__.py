"""``python -m kokoro_ext.serve``: serve a build over OpenAI's speech API with uvicorn."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

from kokoro_ext.serve.app import API_KEY_ENV, OPTIONS_ENV, ServerOptions, create_app


def parse_args(argv: list[str] | None = None) -> tuple[ServerOptions, int]:
    """Command-line arguments as (ServerOptions, number of worker processes)."""
    d = ServerOptions()
    p = argparse.ArgumentParser(prog="python -m kokoro_ext.serve", description=__doc__)
    p.add_argument("--artifacts", type=Path, default=d.artifacts, help="the build (default: %(default)s)")
    p.add_argument("--voices", type=Path, default=None,
                   help="directory of <name>.bin (or .npy, .pt) voice packs (default: the fetched voices)")
    p.add_argument("--host", default=d.host, help="default: %(default)s")
    p.add_argument("--port", type=int, default=d.port, help="default: %(default)s")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}, else none)")
    p.add_argument("--max-active", type=int, default=d.max_active,
                   help="requests synthesized in turn, chunk by chunk (default: %(default)s)")
    p.add_argument("--max-queue", type=int, default=d.max_queue,
                   help="requests waiting beyond those; more get 503 (default: %(default)s)")
    p.add_argument("--max-input-chars", type=int, default=d.max_input_chars, help="default: %(default)s")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="default: %(default)s")
    p.add_argument("--send-timeout", type=float, default=d.send_timeout,
                   help="seconds a client may take to send its body, or stall our sending "
                   "(default: %(default)s)")
    p.add_argument("--chunk-phonemes", type=int, default=d.chunk_phonemes,
                   help="most phonemes in one chunk: bounds how long a new request waits for "
                   "the chunk in progress (default: %(default)s)")
    p.add_argument("--first-chunk-phonemes", type=int, default=d.first_chunk_phonemes,
                   help="most phonemes in a request's first chunk, for early first audio; "
                   "set it to --chunk-phonemes to never cut a first sentence "
                   "(default: %(default)s)")
    p.add_argument("--workers", type=int, default=1,
                   help="uvicorn worker processes, each a replica with its own memory "
                   "(default: %(default)s)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="do not synthesize a word at startup")
    a = p.parse_args(argv)
    return ServerOptions(
        artifacts=a.artifacts, voices=a.voices, host=a.host, port=a.port, api_key=a.api_key,
        max_active=a.max_active, max_queue=a.max_queue, max_input_chars=a.max_input_chars,
        max_body_bytes=a.max_body_bytes, send_timeout=a.send_timeout,
        chunk_phonemes=a.chunk_phonemes, first_chunk_phonemes=a.first_chunk_phonemes,
        warmup=a.warmup,
    ), a.workers


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    options, workers = parse_args(argv)
    if workers == 1:
        uvicorn.run(create_app(options), host=options.host, port=options.port, log_level="info")
        return
    # uvicorn's workers are processes that import the app by name: hand them the options
    os.environ[OPTIONS_ENV] = json.dumps(asdict(options), default=str)
    uvicorn.run("kokoro_ext.serve.app:app_from_env", factory=True, workers=workers,
                host=options.host, port=options.port, log_level="info")


if __name__ == "__main__":
    main()
