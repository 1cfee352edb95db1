"""``python -m kokoro_ext.serve``: serve a build over OpenAI's speech API, and Kokoro-FastAPI's
endpoints and voice names, with uvicorn."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from kokoro_ext.serve.app import API_KEY_ENV, OPTIONS_ENV, ServerOptions, create_app
from kokoro_ext.serve.compat import VOICE_MAPPINGS


def parse_args(argv: list[str] | None = None) -> tuple[ServerOptions, int]:
    """Command-line arguments as (ServerOptions, number of worker processes)."""
    d = ServerOptions()
    p = argparse.ArgumentParser(prog="python -m kokoro_ext.serve", description=__doc__)
    p.add_argument("--artifacts", type=Path, default=d.artifacts, help="the build (default: %(default)s)")
    p.add_argument("--voices", type=Path, default=None,
                   help="directory of <name>.bin (or .npy, .pt) voice packs (default: the fetched voices)")
    p.add_argument("--host", default=d.host,
                   help="address to listen on; 0.0.0.0 for clients in other containers or "
                   "machines, as Kokoro-FastAPI's container listens (default: %(default)s)")
    p.add_argument("--port", type=int, default=d.port, help="default: %(default)s (Kokoro-FastAPI's)")
    p.add_argument("--cors", nargs="+", default=list(d.cors), metavar="ORIGIN",
                   help="origins whose pages may call the API, '*' for any (default: none)")
    p.add_argument("--openai-voices", choices=sorted(VOICE_MAPPINGS), default=d.openai_voices,
                   help="what OpenAI's voice names (alloy, echo, ...) mean: Kokoro-FastAPI's "
                   "mapping (alloy: am_adam, ...) or the voice of the same name (alloy: "
                   "af_alloy, ...) (default: %(default)s)")
    p.add_argument("--downloads", type=Path, default=None,
                   help="directory for return_download_link files (default: a temporary one)")
    p.add_argument("--max-downloads", type=int, default=d.max_downloads,
                   help="download files kept, the newest (default: %(default)s)")
    p.add_argument("--web-build", type=Path, default=None,
                   help="a browser build (or a site of webgpu/ and wasm/ builds) for the page "
                   "under /web/ (default: the page alone)")
    p.add_argument("--no-web", dest="web", action="store_false", help="do not serve /web/")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}, else none)")
    p.add_argument("--max-active", type=int, default=d.max_active,
                   help="requests synthesized in turn, chunk by chunk (default: %(default)s)")
    p.add_argument("--max-queue", type=int, default=d.max_queue,
                   help="requests waiting beyond those; more get 503 (default: %(default)s)")
    p.add_argument("--max-input-chars", type=int, default=d.max_input_chars,
                   help="most characters of input; long input is chunked and streamed "
                   "(default: no limit but --max-body-bytes)")
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
    p.add_argument("--no-voice-tags", dest="voice_tags", action="store_false",
                   help="refuse allow_voice_tags and /dev/dialogue with 403, as Kokoro-FastAPI's "
                   "ENABLE_VOICE_TAGS=false does, for text from untrusted sources (default: allowed)")
    p.add_argument("--no-ssml", dest="ssml", action="store_false",
                   help="refuse ssml: true and /dev/ssml with 403, as Kokoro-FastAPI's "
                   "ENABLE_SSML=false does (default: allowed)")
    p.add_argument("--max-pause", type=float, default=d.max_pause,
                   help="longest [pause:Xs], in seconds: a longer one is this long "
                   "(default: %(default)s, Kokoro-FastAPI's)")
    p.add_argument("--allow-dev-unload", action="store_true",
                   help="serve POST /dev/unload (drop the loaded build until the next request), "
                   "as Kokoro-FastAPI's ALLOW_DEV_UNLOAD=true does (default: 403)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="do not synthesize a word at startup")
    a = p.parse_args(argv)
    return ServerOptions(
        artifacts=a.artifacts, voices=a.voices, host=a.host, port=a.port, api_key=a.api_key,
        max_active=a.max_active, max_queue=a.max_queue, max_input_chars=a.max_input_chars,
        max_body_bytes=a.max_body_bytes, send_timeout=a.send_timeout,
        chunk_phonemes=a.chunk_phonemes, first_chunk_phonemes=a.first_chunk_phonemes,
        warmup=a.warmup, openai_voices=a.openai_voices, cors=tuple(a.cors), downloads=a.downloads,
        max_downloads=a.max_downloads, web=a.web, web_build=a.web_build,
        voice_tags=a.voice_tags, ssml=a.ssml, max_pause=a.max_pause, allow_dev_unload=a.allow_dev_unload,
    ), a.workers


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    options, workers = parse_args(argv)
    if workers == 1:
        uvicorn.run(create_app(options), host=options.host, port=options.port, log_level="info")
        return
    # uvicorn's workers are processes that import the app by name: hand them the options,
    # with one downloads directory, so that a link works whichever worker it reaches
    if options.downloads is None:
        options.downloads = Path(tempfile.mkdtemp(prefix="kokoro-ext-downloads-"))
        atexit.register(shutil.rmtree, options.downloads, True)
    os.environ[OPTIONS_ENV] = json.dumps(asdict(options), default=str)
    uvicorn.run("kokoro_ext.serve.app:app_from_env", factory=True, workers=workers,
                host=options.host, port=options.port, log_level="info")


if __name__ == "__main__":
    main()
