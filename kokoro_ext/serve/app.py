"""The speech API as a Starlette application: OpenAI's, and Kokoro-FastAPI's on top.

A client set up for Kokoro-FastAPI (Open WebUI, SillyTavern, a home-assistant pipeline:
port 8880, its paths, its voice names and fields) is served by changing only the host;
docs/server.md has the table of every endpoint and field.

``POST /v1/audio/speech`` takes OpenAI's body (``model``, ``input``, ``voice``,
``instructions``, ``response_format``, ``speed``, ``stream_format``) and
Kokoro-FastAPI's fields (``stream``, ``lang_code``, ``volume_multiplier``,
``normalization_options``, ``return_download_link``, ``download_format``,
``return_timing``, ``voice_aliases``, ``allow_voice_tags``, ``ssml``: its inline
``[voice:]``, ``[rate:]`` and ``[pause:]`` tags, kokoro_ext.serve.tags), and streams the audio as it is synthesized, raw or as Server-Sent
Events, or with ``stream: false`` sends the whole file;
``POST /dev/captioned_speech`` (Kokoro-FastAPI's) streams JSON lines of base64 audio
with each chunk's word timestamps; ``GET /v1/audio/voices`` lists the voices as
Kokoro-FastAPI does; ``POST /v1/audio/voices/combine`` returns a blend as a ``.pt``
voice; ``GET /v1/download/{file}`` a ``return_download_link`` file; ``GET /v1/models``,
``/v1/models/{id}`` and ``/v1/test`` as Kokoro-FastAPI's; ``POST /dev/phonemize`` and
``/dev/generate_from_phonemes`` its phoneme tools; ``POST /dev/dialogue`` its turns of
speakers; ``/dev/ssml`` its SSML translator; ``POST /dev/unload`` (with
``allow_dev_unload``) drops the loaded build; ``/web/`` the browser page;
``GET /health`` says whether the server is up and how busy it is (never behind the API
key, for load balancers' probes).

Errors are never a traceback: a 4xx for what the client got wrong (the message names the
field: kokoro_ext.run.errors.BadInput), and for anything else (a broken build, a bug) a
500 that says nothing of the server, whose details go to the log.  Their body carries
both clients' shapes: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` and
Kokoro-FastAPI's ``{"detail": {"error", "message", "type"}}``.  A body that does not fit
the schema (a missing or mistyped field) is a 400 on /v1 as OpenAI answers, and a 422 on
/dev as Kokoro-FastAPI (FastAPI's validation) answers there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hmac
import json
import logging
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

import numpy as np

from kokoro_ext.run.errors import BadInput, NothingToSay, TooLong
from kokoro_ext.run.voices import Blend, NamedVoice, VoiceDirectory
from kokoro_ext.serve import audio, compat, tags
from kokoro_ext.serve.compat import DEFAULT_MODEL, DEFAULT_VOICE, MODELS, Downloads
from kokoro_ext.serve.scheduler import END, Job, QueueFull, Scheduler
from kokoro_ext.text.g2p import phonemes_to_ids
from kokoro_ext.text.languages import language
from kokoro_ext.text.normalize import Normalization

#: OpenAI's voices -> Kokoro voices, as Kokoro-FastAPI maps them (the default mapping).
OPENAI_VOICES = compat.KOKORO_FASTAPI_VOICES
#: The speed range of kokoro_ext.run.synthesizer (OpenAI's), for voice aliases' paces.
SPEED_RANGE = (0.25, 4.0)
API_KEY_ENV = "KOKORO_EXT_API_KEY"
#: ServerOptions as JSON, for ``app_from_env`` in uvicorn's worker processes.
OPTIONS_ENV = "KOKORO_EXT_SERVE_OPTIONS"
#: Paths served without the API key: load balancers probe /health; /web/ is a page's
#: static files, which a browser fetches without the key.
OPEN_PATHS = ("/health", "/web")
OPEN_PREFIXES = ("/web/",)
#: ``stream_format``: the encoded audio as it is, or each piece base64 in an SSE event.
STREAM_FORMATS = ("audio", "sse")
#: Deepest nesting of arrays and objects a body may have (OpenAI's needs 2).
MAX_DEPTH = 32
#: The browser page (kokoro_ext.web), served read-only under /web/.
WEB_STATIC = Path(__file__).resolve().parent.parent / "web" / "static"

log = logging.getLogger(__name__)


@dataclass
class ServerOptions:
    """How the server runs; ``python -m kokoro_ext.serve --help`` sets each."""

    artifacts: Path = Path("artifacts")
    voices: Path | None = None  # default: the fetched voices (kokoro_ext.run.cache.voices_dir())
    # 127.0.0.1: a bare command exposes nothing; a container (docker/) listens on 0.0.0.0
    # as Kokoro-FastAPI's does, for clients in other containers or machines
    host: str = "127.0.0.1"
    port: int = 8880  # Kokoro-FastAPI's
    api_key: str | None = None  # required as "Authorization: Bearer KEY" when set
    max_active: int = 8  # requests whose chunks take turns
    max_queue: int = 32  # requests waiting for a turn; beyond, 503 with Retry-After
    # Most characters of ``input``; None: no limit but the body's (Kokoro-FastAPI has
    # none): long input is chunked and streamed like any other
    max_input_chars: int | None = None
    max_body_bytes: int = 256 * 1024  # about 4 hours of speech
    openai_voices: str = "kokoro-fastapi"  # the mapping of OpenAI's names: compat.VOICE_MAPPINGS
    cors: tuple[str, ...] = ()  # origins whose pages may call the API ("*": any)
    downloads: Path | None = None  # return_download_link files; None: a temporary directory
    max_downloads: int = 16  # the newest are kept, none older than an hour
    web: bool = True  # the browser page under /web/
    web_build: Path | None = None  # a browser build (or site) the page loads, under /web/build/
    send_timeout: float = 30.0  # seconds a client may take to send its body or stall a send
    # Most phonemes in one chunk (a long sentence is cut at a clause, else a word): bounds
    # how long a new request waits for the chunk in progress (~100 phonemes: ~0.9 s of
    # work on two Zen 5 cores, ~6 s of speech).  The build's limit (510) at most.
    chunk_phonemes: int = 100
    # A request's first chunk holds at most first_chunk_phonemes (cut at a clause, else a
    # word; the rest of its sentence follows at chunk_phonemes): its first audio waits for
    # the whole chunk, and a screen reader or an assistant for its first audio.  Equal to
    # chunk_phonemes: never cut.
    first_chunk_phonemes: int = 16
    warmup: bool = True  # synthesize a word at startup, so the first request is not slower
    # Kokoro-FastAPI's enable_voice_tags: a request's allow_voice_tags and /dev/dialogue
    # (off: 403), for deployments that pass untrusted text on
    voice_tags: bool = True
    ssml: bool = True  # its enable_ssml: a request's ssml and /dev/ssml (off: 403)
    max_pause: float = 60.0  # its max_pause_duration_s: a longer [pause:Xs] is this long
    # its allow_dev_unload: POST /dev/unload drops the loaded build (off: 403); the next
    # request loads it again
    allow_dev_unload: bool = False


def chunk_phonemes(index: int, options: ServerOptions) -> int:
    """The most phonemes chunk ``index`` of a request may hold.

    A request's first audio waits for the chunk in progress, the first chunks ahead of it
    (first chunks go first, shortest text first: kokoro_ext.serve.scheduler) and its own,
    whose work grows with its phonemes; so a first chunk holds at most
    ``first_chunk_phonemes``, the others ``chunk_phonemes``.  Below about 16 phonemes a cut
    gains little, since a chunk also costs a fixed part (its lead-in and final silence).
    Cuts prefer clause punctuation (kokoro_ext.text.chunking.pack_evenly).
    """
    if index == 0:
        return min(options.first_chunk_phonemes, options.chunk_phonemes)
    return options.chunk_phonemes


class HTTPError(Exception):
    """An error answered as OpenAI's JSON error body and Kokoro-FastAPI's ``detail``.

    ``schema``: the body does not fit the request's schema (a missing or mistyped field),
    which Kokoro-FastAPI's /dev endpoints answer with 422; ``code``: Kokoro-FastAPI's
    ``detail.error`` for it.
    """

    def __init__(self, status: int, message: str, param: str | None = None, headers=None,
                 schema: bool = False, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers
        self.schema, self.code = schema, code

    def body(self) -> dict:
        kind = {401: "authentication_error", 403: "permission_error", 503: "server_busy"}.get(
            self.status, "invalid_request_error" if self.status < 500 else "server_error"
        )
        code = self.code or {401: "unauthorized", 404: "not_found", 503: "server_busy"}.get(
            self.status, "validation_error" if self.status < 500 else "processing_error"
        )
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": None},
            "detail": {"error": code, "message": self.message, "type": kind},
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class APIKeyMiddleware:
    """401 for every HTTP request without ``Authorization: Bearer KEY``, but to OPEN_PATHS.

    Plain ASGI rather than BaseHTTPMiddleware, which would put the streamed response and
    the disconnect watch of SpeechStream behind a stream of its own.
    """

    def __init__(self, app: ASGIApp, api_key: str):
        self.app, self.key = app, api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] == "http" and path not in OPEN_PATHS
                and not path.startswith(OPEN_PREFIXES) and not self._authorized(scope)):
            refusal = HTTPError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'",
                                headers={"WWW-Authenticate": "Bearer"})
            await refusal.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), self.key)


@dataclass
class SpeechRequest:
    """A validated speech body (``POST /v1/audio/speech``, ``/dev/captioned_speech``)."""

    input: str
    voice: Blend  # Kokoro voice names and weights
    response_format: str = "mp3"
    speed: float = 1.0
    stream_format: str = "audio"
    markdown: bool = True  # our extension: false reads the input as written
    stream: bool = True  # False: the whole file in one response, with its Content-Length
    lang_code: str | None = None  # the language the text is read in; None: the voice's
    volume: float = 1.0  # volume_multiplier: the samples are scaled by it (and clipped)
    download_format: str | None = None  # return_download_link: the file's format
    # normalization_options: which written forms are read as words (Kokoro-FastAPI's defaults)
    normalization: Normalization = compat.DEFAULT_NORMALIZATION
    # the input's parts (kokoro_ext.serve.tags): Speak parts in their voices (Blends) and
    # paces, and Pause parts; None: the input in ``voice``, as it is
    parts: list | None = None
    voice_tags: bool = False  # allow_voice_tags: captions name each word's voice
    return_timing: bool = False  # with a download link: a JSON of each chunk's times beside it


def parse_speech(body: bytes, voices: VoiceDirectory, options: ServerOptions) -> SpeechRequest:
    """Validate a request body; HTTPError(400), or the BadInput of the voice, naming the
    field and what is allowed, whatever the body's shape."""
    return _speech_fields(_json_object(body), voices, options)


@dataclass
class CaptionedRequest:
    """A validated ``POST /dev/captioned_speech`` body: the speech fields and how to answer."""

    speech: SpeechRequest
    stream: bool = True  # JSON lines chunk by chunk, else one JSON object at the end
    timestamps: bool = True  # False: each object's "timestamps" is empty


def parse_captioned(body: bytes, voices: VoiceDirectory, options: ServerOptions) -> CaptionedRequest:
    """Kokoro-FastAPI's captioned speech body: the speech fields (``stream_format`` not
    taken) with ``stream`` and ``return_timestamps``."""
    payload = _json_object(body)
    if "stream_format" in payload:
        raise HTTPError(400, "'stream_format' is not taken here: use 'stream'", "stream_format")
    timestamps = _flag(payload, "return_timestamps", True)
    spec = _speech_fields(payload, voices, options)
    spec.return_timing = False  # not a field of Kokoro-FastAPI's captioned speech
    return CaptionedRequest(spec, spec.stream, timestamps)


#: Kokoro-FastAPI's DialogueRequest fields passed on to the speech request it makes.
DIALOGUE_SPEECH_FIELDS = ("model", "response_format", "download_format", "speed", "stream",
                          "return_download_link", "return_timing", "lang_code", "volume_multiplier",
                          "normalization_options", "voice_aliases")
#: Most seconds of ``pause_between_turns`` (Kokoro-FastAPI's bound).
MAX_TURN_PAUSE = 10.0


def parse_dialogue(body: bytes, voices: VoiceDirectory, options: ServerOptions) -> SpeechRequest:
    """Kokoro-FastAPI's ``POST /dev/dialogue`` body: ``turns`` (or ``inputs``) of
    ``{"voice" (or "voice_id"), "text"}``, ``pause_between_turns`` (seconds, 0 to 10) and
    the speech fields, as the speech request it makes of them: the turns as one input of
    ``[voice:...]`` tags with ``[pause:Xs]`` between, read with ``allow_voice_tags``."""
    payload = _json_object(body)
    turns = payload.get("turns", payload.get("inputs"))
    if not isinstance(turns, list) or not turns:
        raise HTTPError(400, "'turns' must be a non-empty list of {\"voice\", \"text\"}", "turns", schema=True)
    rendered = []
    for index, turn in enumerate(turns):
        voice = turn.get("voice", turn.get("voice_id")) if isinstance(turn, dict) else None
        text = turn.get("text") if isinstance(turn, dict) else None
        if not isinstance(voice, str) or not isinstance(text, str):
            raise HTTPError(400, f"turns[{index}] must have a string 'voice' and 'text'", "turns", schema=True)
        voice = voice.strip()
        if not re.fullmatch(tags.VOICE_NAME_BODY, voice):
            raise HTTPError(400, f"turns[{index}].voice {_show(voice)} contains characters that "
                            "cannot appear in a voice name", "turns", schema=True)
        if not text.strip():
            raise HTTPError(400, f"turns[{index}].text: Turn text cannot be empty", "turns", schema=True)
        rendered.append((voice, text.strip()))
    pause = _optional(payload, "pause_between_turns", 0.0)
    if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not 0 <= pause <= MAX_TURN_PAUSE:
        raise HTTPError(400, f"'pause_between_turns' must be a number from 0 to {MAX_TURN_PAUSE:g}, "
                        f"got {_show(pause)}", "pause_between_turns", schema=True)
    if not options.voice_tags:
        raise _permission(VOICE_TAGS_OFF)
    # Kokoro-FastAPI's rendering: the pause written with at most 3 decimals
    seconds = f"{pause:.3f}".rstrip("0").rstrip(".")
    separator = f" [pause:{seconds}s] " if float(seconds) > 0 else " "
    speech = {name: payload[name] for name in DIALOGUE_SPEECH_FIELDS if name in payload}
    speech.update(input=separator.join(f"[voice:{voice}] {text}" for voice, text in rendered),
                  voice=rendered[0][0], allow_voice_tags=True)
    return _speech_fields(speech, voices, options)


def _json_object(body: bytes) -> dict:
    payload = _parse_json(body)
    if not isinstance(payload, dict):
        raise HTTPError(400, "the body must be a JSON object", schema=True)
    return payload


def _flag(payload: dict, name: str, default: bool) -> bool:
    value = _optional(payload, name, default)
    if not isinstance(value, bool):
        raise HTTPError(400, f"'{name}' must be true or false, got {_show(value)}", name, schema=True)
    return value


def _format(payload: dict, name: str, default: str | None) -> str | None:
    value = _optional(payload, name, default)
    if value is not None and value not in audio.FORMATS:
        raise HTTPError(
            400, f"unknown {name} {_show(value)}; one of {', '.join(audio.FORMATS)}", name, schema=True
        )
    return value


def _permission(message: str) -> HTTPError:
    """Kokoro-FastAPI's 403 for a feature its server settings turn off."""
    return HTTPError(403, message, code="permission_denied")


VOICE_TAGS_OFF = "Voice tags are disabled on this server"
SSML_OFF = "SSML translation is disabled on this server"


def _speech_fields(payload: dict, voices: VoiceDirectory, options: ServerOptions) -> SpeechRequest:
    """The fields of OpenAI's speech body and Kokoro-FastAPI's, with Kokoro-FastAPI's
    defaults (``model`` kokoro, ``voice`` af_heart); unknown fields are ignored."""
    model = _optional(payload, "model", DEFAULT_MODEL)
    if model not in MODELS:
        raise HTTPError(400, f"unknown model {_show(model)}; one of {', '.join(MODELS)}", "model",
                        code="invalid_model")
    if "input" not in payload:
        raise HTTPError(400, "missing required field 'input'", "input", schema=True)
    text = payload["input"]
    if not isinstance(text, str) or not text.strip():
        raise HTTPError(400, "'input' must be a non-empty string", "input", schema=True)
    if options.max_input_chars and len(text) > options.max_input_chars:
        raise HTTPError(
            400,
            f"'input' has {len(text)} characters; at most {options.max_input_chars} are allowed",
            "input",
        )
    # instructions are taken and not followed: Kokoro has no prompt
    instructions = payload.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise HTTPError(400, "'instructions' must be a string", "instructions", schema=True)
    response_format = _format(payload, "response_format", "mp3")
    speed = _optional(payload, "speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or speed != speed:
        raise HTTPError(400, f"'speed' must be a number, got {_show(speed)}", "speed", schema=True)
    try:
        speed = float(speed)
    except OverflowError:  # a JSON integer past float's range: out of range, said so below
        speed = math.inf if speed > 0 else -math.inf
    voice = _optional(payload, "voice", DEFAULT_VOICE)
    if isinstance(voice, dict) and set(voice) == {"id"}:  # OpenAI's {"id": "voice_..."} form
        voice = voice["id"]
    voice_tags = _flag(payload, "allow_voice_tags", False)
    if voice_tags and not options.voice_tags:
        raise _permission(VOICE_TAGS_OFF)
    if _flag(payload, "ssml", False):  # Kokoro-FastAPI's SSML translation onto the tags
        if not options.ssml:
            raise _permission(SSML_OFF)
        if not voice_tags:
            raise HTTPError(400, "SSML input requires allow_voice_tags=true, the translation "
                            "emits [voice:] and [rate:] spans", "ssml")
        text = tags.ssml_to_tags(text, voice if isinstance(voice, str) else "", True, options.max_pause)
    aliases = payload.get("voice_aliases")
    voice, rate = _alias(voice, aliases)
    if rate is not None and not voice_tags:  # an alias's own pace scales the request's
        speed = min(max(speed * rate, SPEED_RANGE[0]), SPEED_RANGE[1])
    # by name, OpenAI's alias or a blend of those only, never a path
    blend = voices.blend(voice)
    parts = _parts(text, blend, voice_tags, aliases, rate, voices, options)
    # the range is the Synthesizer's (kokoro_ext.run.synthesizer.SPEED_RANGE), checked there
    stream_format = _optional(payload, "stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise HTTPError(
            400,
            f"unknown stream_format {_show(stream_format)}; one of {', '.join(STREAM_FORMATS)}",
            "stream_format",
        )
    markdown = _flag(payload, "markdown", True)
    stream = _flag(payload, "stream", True)
    if not stream and stream_format == "sse":
        raise HTTPError(400, "'stream_format': 'sse' streams events: it needs 'stream': true", "stream")
    download_format = _format(payload, "download_format", None)
    if not _flag(payload, "return_download_link", False):
        download_format = None
    elif download_format is None:
        download_format = response_format
    return_timing = _flag(payload, "return_timing", False)
    lang_code = _optional(payload, "lang_code", None)
    if lang_code is not None:
        try:
            lang_code = language(lang_code).code
        except (TypeError, ValueError) as error:
            raise HTTPError(400, f"'lang_code': {error}", "lang_code") from None
    volume = _optional(payload, "volume_multiplier", 1.0)
    if isinstance(volume, bool) or not isinstance(volume, (int, float)) or not (0 <= volume < math.inf):
        raise HTTPError(400, f"'volume_multiplier' must be a number >= 0, got {_show(volume)}",
                        "volume_multiplier", schema=True)
    normalization = _normalization(payload)
    return SpeechRequest(text, blend, response_format, speed, stream_format, markdown, stream,
                         lang_code, float(volume), download_format, normalization, parts,
                         voice_tags, return_timing)


def _parts(text: str, blend: Blend, voice_tags: bool, aliases: object, rate: float | None,
           voices: VoiceDirectory, options: ServerOptions) -> list | None:
    """The input's Speak and Pause parts (kokoro_ext.serve.tags), each voice tag's voice
    checked here, before any audio; None for an input without tags read as one (or an
    SSML document, read as SSML)."""
    if tags.is_ssml(text) or not (voice_tags or tags.PAUSE_TAG.search(text)):
        return None

    def resolve(name: str) -> tuple[Blend, float | None]:
        name = name.replace(" ", "")
        if not name:
            raise tags.BadTag("the tag [voice:] names no voice")
        target, pace = _alias(name, aliases)
        try:
            return voices.blend(target), pace
        except BadInput as error:
            raise tags.BadTag(f"the tag [voice:{name}]: {error}") from None

    return tags.split(text, blend, voice_tags, resolve, rate if voice_tags else None, options.max_pause)


def _alias(voice: object, aliases: object) -> tuple[object, float | None]:
    """Kokoro-FastAPI's request-scoped ``voice_aliases``: ``voice`` (matched without case)
    -> the voice it stands for and the alias's own pace, if one; else ``voice``."""
    if aliases is None:
        return voice, None
    if not isinstance(aliases, dict):
        raise HTTPError(400, "'voice_aliases' must be an object of name: voice", "voice_aliases", schema=True)
    found = None
    for alias, target in aliases.items():
        if isinstance(target, dict):
            rate = target.get("rate")
            if not isinstance(target.get("voice"), str) or not (
                rate is None or (not isinstance(rate, bool) and isinstance(rate, (int, float))
                                 and SPEED_RANGE[0] <= rate <= SPEED_RANGE[1])):
                raise HTTPError(400, f"voice alias {_show(alias)} must be a voice or "
                                "{\"voice\": ..., \"rate\": 0.25 to 4}", "voice_aliases", schema=True)
            target = (target["voice"], None if rate is None else float(rate))
        elif isinstance(target, str):
            target = (target, None)
        else:
            raise HTTPError(400, f"voice alias {_show(alias)} must be a voice name", "voice_aliases", schema=True)
        if found is None and isinstance(voice, str) and alias.strip().casefold() == voice.strip().casefold():
            found = target
    return found if found is not None else (voice, None)


def _normalization(payload: dict) -> Normalization:
    """Kokoro-FastAPI's ``normalization_options`` of ``payload``, checked, as the text
    passes' switches (compat.normalization)."""
    options = _optional(payload, "normalization_options", {})
    if not isinstance(options, dict):
        raise HTTPError(400, "'normalization_options' must be an object", "normalization_options", schema=True)
    for name, value in options.items():
        if name in compat.NORMALIZATION_DEFAULTS and not isinstance(value, bool):
            raise HTTPError(400, f"'normalization_options.{name}' must be true or false, got {_show(value)}",
                            "normalization_options", schema=True)
    return compat.normalization(options)


def _optional(payload: dict, name: str, default: Any) -> Any:
    value = payload.get(name)
    return default if value is None else value


def _parse_json(body: bytes) -> Any:
    """``body`` as JSON, HTTPError(400) if it is not JSON or nests deeper than MAX_DEPTH."""
    try:
        payload = json.loads(body)
    except RecursionError:  # json's own nesting bound is the interpreter's stack
        raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels", schema=True) from None
    except ValueError as error:  # JSONDecodeError, bad UTF-8, an integer of over 4300 digits
        raise HTTPError(400, f"the body is not valid JSON: {str(error)[:200]}", schema=True) from None
    # checked without recursion, so that nothing later (repr in a message) meets the depth
    level = [payload]
    for _ in range(MAX_DEPTH + 1):
        level = [
            inner for value in level if isinstance(value, (dict, list))
            for inner in (value.values() if isinstance(value, dict) else value)
        ]
        if not level:
            return payload
    raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels", schema=True)


def _show(value: object, most: int = 60) -> str:
    """``repr(value)``, cut to ``most`` characters: messages quote what a client sent."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"the body has {declared} bytes; at most {limit} are allowed")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise HTTPError(413, f"the body is larger than {limit} bytes")
    return bytes(body)


class SpeechStream:
    """The ASGI response of one speech request: audio chunk by chunk as the worker makes it.

    It waits for the first chunk before answering, so an error found then (nothing to
    say in the text) is still a 400; and it watches for the client going away (or
    stalling a send past ``send_timeout``), which cancels the request's synthesis.

    With ``sse``, the same encoded bytes go out as OpenAI's Server-Sent Events: each
    piece base64 in ``{"type": "speech.audio.delta", "audio": ...}``, then
    ``{"type": "speech.audio.done", "usage": ...}``; a failure after the first event is an
    ``{"type": "error", "error": ...}`` event (a raw stream can only be cut short).
    With ``whole`` (Kokoro-FastAPI's ``stream: false``) nothing is sent until the end:
    then the whole file, its header stating its length, with a Content-Length, or the
    error.  ``volume`` scales the samples; ``download`` is the file of a download link,
    written as the audio goes out (in ``download_format``, encoded again if it differs).
    """

    def __init__(self, job: Job, scheduler: Scheduler, response_format: str, send_timeout: float,
                 sse: bool = False, captioned: CaptionedRequest | None = None,
                 whole: bool = False, volume: float = 1.0,
                 download: tuple[compat.DownloadFile, str] | None = None,
                 timing: list | None = None, voice_names: bool = False):
        self.job, self.scheduler = job, scheduler
        # return_timing: each chunk's text and times (and voice, with tags), written beside
        # the download as {"chunks": [...]}
        self.timing, self.voice_names, self.elapsed = timing, voice_names, 0
        self.format, self.send_timeout, self.sse = response_format, send_timeout, sse
        self.captioned, self.whole, self.volume = captioned, whole, volume
        self.download, self.download_format = download if download is not None else (None, None)
        # the download's own encoder where its format is not the response's
        self.download_encoder = (
            audio.encoder(self.download_format)
            if self.download is not None and self.download_format != response_format else None
        )

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Kokoro-FastAPI's headers of a speech response, and the download link's."""
        headers = [
            (b"content-disposition", f"attachment; filename=speech.{self.format}".encode()),
            (b"cache-control", b"no-cache"),
        ]
        if not self.whole:
            headers.append((b"x-accel-buffering", b"no"))  # proxies pass each piece on
        if self.download is not None:
            headers.append((b"x-download-path", f"/download/{self.download.name}".encode()))
            if self.timing is not None:
                headers.append((b"x-timing-path", f"/download/{self.download.name}.json".encode()))
        return headers

    def audio_of(self, chunk: Any) -> Any:
        samples = chunk.joined()
        if self.timing is not None:  # as Kokoro-FastAPI's: seconds rounded to 1 ms
            start = (self.elapsed + round(chunk.pause * audio.SAMPLE_RATE)) / audio.SAMPLE_RATE
            self.elapsed += len(samples)
            entry = {"text": chunk.text, "start": round(start, 3),
                     "end": round(self.elapsed / audio.SAMPLE_RATE, 3)}
            voice = getattr(chunk, "voice", None)
            if self.voice_names and voice:
                entry["voice"] = voice
            self.timing.append(entry)
        return samples if self.volume == 1.0 else samples * self.volume

    async def save(self, data: bytes, samples: Any = None, last: bool = False) -> None:
        """The download's share of the response: ``data`` (the response's bytes) or, in a
        format of its own, ``samples`` encoded again; ``last``: finish it."""
        if self.download is None:
            return
        if self.download_encoder is None:
            self.download.write(data)
        elif samples is not None:
            self.download.write(await _encode(self.download_encoder.feed, samples, self.download_format))
        if last:
            if self.download_encoder is not None:
                self.download.write(
                    await _encode(lambda _: self.download_encoder.finish(), None, self.download_format)
                )
                fixups = self.download_encoder.fixups
            else:
                fixups = self.encoder_fixups
            self.download.finish(fixups)
            if self.timing is not None:
                self.download.sidecar({"chunks": self.timing})
            self.download = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.ensure_future(_disconnected(receive))
        self.encoder_fixups: list = []
        try:
            first = await self._next(gone)
            if first is None:
                return
            if isinstance(first, Exception):
                await _error_response(first)(scope, receive, send)
                return
            if self.captioned is not None:
                await self._captioned(send, first, gone)
                return
            media = "text/event-stream" if self.sse else audio.MEDIA_TYPES[self.format]
            headers = [(b"content-type", media.encode()), *self.headers()]
            if self.format in ("pcm", "wav"):
                # what OpenAI's pcm is, for clients that cannot guess
                headers.append((b"x-sample-rate", str(audio.SAMPLE_RATE).encode()))
            if not self.whole:
                await self._send(send, {"type": "http.response.start", "status": 200, "headers": headers})
            encoder = audio.encoder(self.format)
            self.encoder_fixups = encoder.fixups
            whole = bytearray()
            chunk, tokens, frames = first, 0, 0
            while chunk is not END:
                tokens, frames = tokens + chunk.trace.tokens, frames + chunk.trace.frames
                samples = self.audio_of(chunk)
                data = await _encode(encoder.feed, samples, self.format)
                await self.save(data, samples)
                if self.whole:
                    whole += data
                else:
                    await self._body(send, self._delta(data) if self.sse else data)
                chunk = await self._next(gone)
                if chunk is None:
                    return  # gone
                if isinstance(chunk, Exception):  # too late for an error status
                    if self.whole:  # nothing sent yet: the error, as for the first chunk
                        await _error_response(chunk)(scope, receive, send)
                        return
                    _log_failure(chunk, "speech response cut short")
                    if self.sse:  # a raw stream can only be cut short
                        error = {"type": "error", "error": _as_http_error(chunk).body()["error"]}
                        await self._body(send, _event(error), more=False)
                    return
            tail = await _encode(lambda _: encoder.finish(), None, self.format)
            await self.save(tail, last=True)
            if self.whole:
                whole += tail
                for offset, data in encoder.fixups:  # the header states the length
                    whole[offset:offset + len(data)] = data
                headers.append((b"content-length", str(len(whole)).encode()))
                await self._send(send, {"type": "http.response.start", "status": 200, "headers": headers})
                await self._body(send, bytes(whole), more=False)
                return
            if not self.sse:
                await self._body(send, tail, more=False)
                return
            await self._body(send, self._delta(tail))
            # OpenAI counts text tokens in and audio tokens out; here: the phoneme tokens
            # the model read and the alignment frames (40 per second of speech) it made
            usage = {"input_tokens": tokens, "output_tokens": frames, "total_tokens": tokens + frames}
            await self._body(send, _event({"type": "speech.audio.done", "usage": usage}), more=False)
        except (OSError, asyncio.TimeoutError):
            pass  # the client went away or stopped reading: nothing more to tell it
        finally:
            gone.cancel()
            self.scheduler.cancel(self.job)
            if self.download is not None:  # not finished: no file behind the link
                self.download.abandon()

    async def _captioned(self, send: Send, first: Any, gone: asyncio.Future) -> None:
        """Kokoro-FastAPI's captioned speech: a JSON object per piece of encoded audio,
        ``{"audio": base64, "audio_format": media type, "timestamps": [{"word",
        "start_time", "end_time"}]}`` on a line each (``stream``), or one object of all the
        audio and words at the end.  Words of a chunk whose encoding gave no bytes yet
        (an encoder's buffering) go with the next piece; a failure after the start can only
        cut the response short."""
        media = audio.MEDIA_TYPES[self.format]
        headers = [(b"content-type", b"application/json")]
        if self.download is not None:
            headers.append((b"x-download-path", f"/download/{self.download.name}".encode()))
        await self._send(send, {"type": "http.response.start", "status": 200, "headers": headers})
        encoder = audio.encoder(self.format)
        self.encoder_fixups = encoder.fixups
        stream, wanted = self.captioned.stream, self.captioned.timestamps
        pending: list[dict] = []  # words not sent yet
        whole = bytearray()  # without stream: all of the audio

        async def out(data: bytes, last: bool = False) -> None:
            nonlocal pending
            if stream and (data or last and pending):
                line = {"audio": base64.b64encode(data).decode(), "audio_format": media,
                        "timestamps": pending}
                await self._body(send, json.dumps(line, ensure_ascii=False).encode() + b"\n")
                pending = []
            elif not stream:
                whole.extend(data)

        chunk = first
        while chunk is not END:
            if wanted:
                voice = getattr(chunk, "voice", None) if self.captioned.speech.voice_tags else None
                pending += [{"word": w.text, "start_time": w.start, "end_time": w.end,
                             **({"voice": voice} if voice else {})} for w in chunk.words]
            samples = self.audio_of(chunk)
            data = await _encode(encoder.feed, samples, self.format)
            await self.save(data, samples)
            await out(data)
            chunk = await self._next(gone)
            if chunk is None:
                return
            if isinstance(chunk, Exception):
                _log_failure(chunk, "captioned speech response cut short")
                return
        tail = await _encode(lambda _: encoder.finish(), None, self.format)
        await self.save(tail, last=True)
        await out(tail, last=True)
        if not stream:
            for offset, data in encoder.fixups:  # the whole file's header states its length
                whole[offset:offset + len(data)] = data
            line = {"audio": base64.b64encode(bytes(whole)).decode(), "audio_format": media,
                    "timestamps": pending}
            await self._body(send, json.dumps(line, ensure_ascii=False).encode())
        await self._body(send, b"", more=False)

    async def _next(self, gone: asyncio.Future) -> Any:
        """The next chunk, END, the generator's exception, or None if the client left."""
        item = asyncio.ensure_future(self.job.get(self.scheduler))
        await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not item.done():
            item.cancel()
            return None
        try:
            return item.result()
        except Exception as error:
            return error

    @staticmethod
    def _delta(data: bytes) -> bytes:
        """Encoded audio as OpenAI's delta event (nothing for no audio)."""
        if not data:
            return b""
        return _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})

    async def _body(self, send: Send, data: bytes, more: bool = True) -> None:
        """Send ``data``; an empty piece only to end the body."""
        if data or not more:
            await self._send(send, {"type": "http.response.body", "body": data, "more_body": more})

    async def _send(self, send: Send, message: dict) -> None:
        await asyncio.wait_for(send(message), self.send_timeout)


def _event(payload: dict) -> bytes:
    """One Server-Sent Event carrying ``payload`` as JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _encode(feed, data, response_format: str) -> bytes:
    if response_format in ("pcm", "wav"):
        return feed(data)
    return await asyncio.to_thread(feed, data)  # codec work off the event loop


def _error_response(error: Exception) -> JSONResponse:
    """The response to a request that failed with ``error``, by its type alone."""
    if not isinstance(error, (HTTPError, BadInput)):
        _log_failure(error, "speech request failed")
    return _as_http_error(error).response()


def _as_http_error(error: Exception) -> HTTPError:
    if isinstance(error, HTTPError):
        return error
    if isinstance(error, BadInput):  # the run side's refusal of the client's input
        return HTTPError(400, str(error), error.param)
    # Anything else is the server's own failure (missing or corrupt artifacts, NaN output,
    # a bug): its message may name files and internals, so it goes to the log only.
    return HTTPError(500, "the server could not synthesize this request")


def _log_failure(error: Exception, what: str) -> None:
    if isinstance(error, BadInput):
        log.info("%s: %s", what, error)
    else:
        log.error("%s: %s: %s", what, type(error).__name__, error, exc_info=error)


async def _warm_up(scheduler: Scheduler, synthesizer: Any) -> None:
    """Synthesize a word as a request's job: on the scheduler's worker thread, which runs
    every request, so that the first synthesis there (which makes the thread's scratch:
    the kernels' per-thread workspaces, about 20 ms) is not the first request's."""
    job = scheduler.submit(synthesizer.stream("Ready."))
    while await job.get(scheduler) is not END:
        pass


def create_app(options: ServerOptions, synthesizer: Any = None) -> Starlette:
    """The application serving ``options.artifacts`` (or an already loaded ``synthesizer``).

    The Synthesizer is loaded (every stage) and warmed up at startup, before the server
    accepts requests; ``app.state`` holds ``synthesizer``, ``scheduler``, ``voices`` and
    ``downloads``.
    """
    if options.chunk_phonemes < 1 or options.first_chunk_phonemes < 1:
        raise ValueError("chunk_phonemes and first_chunk_phonemes must be at least 1")
    if options.openai_voices not in compat.VOICE_MAPPINGS:
        raise ValueError(f"openai_voices must be one of {', '.join(compat.VOICE_MAPPINGS)}, "
                         f"got {options.openai_voices!r}")
    # default: the fetched voices (kokoro_ext.run.cache.voices_dir()); blends of voices of
    # two languages are read in the first one's, as Kokoro-FastAPI reads them
    voices = VoiceDirectory(options.voices, aliases=compat.VOICE_MAPPINGS[options.openai_voices],
                            mixed_languages=True)
    api_key = options.api_key or os.environ.get(API_KEY_ENV) or None

    async def read_body(request: Request) -> bytes:
        try:  # a client that trickles its body holds a connection, not the worker
            return await asyncio.wait_for(_read_body(request, options.max_body_bytes), options.send_timeout)
        except asyncio.TimeoutError:
            raise HTTPError(408, f"the body did not arrive within {options.send_timeout} s") from None

    def submit(state: Any, chunks: Any, size: int) -> Job:
        try:
            return state.scheduler.submit(chunks, size=size)
        except QueueFull as error:
            retry = state.scheduler.retry_after()
            raise HTTPError(503, f"server busy: {error}; retry in {retry} s",
                            headers={"Retry-After": str(retry)}) from None

    async def speech(request: Request, captioned: bool = False, dialogue: bool = False):
        state = request.app.state
        download = None
        try:
            body = await read_body(request)
            if captioned:
                wanted = parse_captioned(body, voices, options)
                spec = wanted.speech
            elif dialogue:
                wanted, spec = None, parse_dialogue(body, voices, options)
            else:
                wanted, spec = None, parse_speech(body, voices, options)
            if spec.parts is None:
                # the Synthesizer checks the speed and the text here, before any chunk
                chunks = _stream(state.synthesizer, spec.input, _voice(voices, spec.voice, spec),
                                 spec.speed, spec, lambda index: chunk_phonemes(index, options))
            else:
                chunks = _part_chunks(state.synthesizer, spec, voices, options)
            if spec.download_format is not None:
                download = (state.downloads.new(spec.download_format), spec.download_format)
            job = submit(state, chunks, len(spec.input))
        except Exception as error:
            if download is not None:
                download[0].abandon()
            if (captioned or dialogue) and isinstance(error, HTTPError) and error.schema:
                error.status = 422  # FastAPI's validation error, as Kokoro-FastAPI answers
            return _error_response(error)
        # Kokoro-FastAPI writes the timing file of a streamed download only
        timing = spec.return_timing and download is not None and spec.stream
        return SpeechStream(job, state.scheduler, spec.response_format, options.send_timeout,
                            sse=spec.stream_format == "sse", captioned=wanted,
                            whole=not spec.stream and not captioned, volume=spec.volume,
                            download=download, timing=[] if timing else None,
                            voice_names=spec.voice_tags)

    async def captioned_speech(request: Request):
        return await speech(request, captioned=True)

    async def dialogue(request: Request):
        return await speech(request, dialogue=True)

    async def list_voices(request: Request):
        legacy = _query_flag(request, "legacy")
        if isinstance(legacy, Response):
            return legacy
        if legacy:  # Kokoro-FastAPI's old shape: the names
            return JSONResponse({"voices": voices.names})
        # Open WebUI reads each entry's id and name
        return JSONResponse({"voices": [{"id": name, "name": name} for name in voices.names]})

    async def combine_voices(request: Request):
        """Kokoro-FastAPI's: a blend (``"a+b"`` or ``["a", "b"]``) as a ``.pt`` voice pack;
        nothing is saved here, the pack is made for the response."""
        try:
            spec = _parse_json(await read_body(request))
            if isinstance(spec, list) and spec and all(isinstance(v, str) and v.strip() for v in spec):
                spec = "+".join(v.strip() for v in spec)
            if not isinstance(spec, str) or not spec.strip():
                raise HTTPError(422, "the body must be a voice blend such as \"af_bella+af_sky\" "
                                "or a list of voice names", "voices", schema=True)
            blend = voices.blend(spec.strip())
            if len(blend.parts) < 2:
                raise HTTPError(400, "Need at least 2 voices to combine", "voices")
            pack = await asyncio.to_thread(lambda: voices.voice(blend).pack)
        except Exception as error:
            return _error_response(error)
        weights = {weight for _, weight in blend.parts}
        name = "+".join(n for n, _ in blend.parts) if len(weights) == 1 else blend.name
        return Response(compat.torch_file(pack), media_type="application/octet-stream", headers={
            "Content-Disposition": f"attachment; filename={name}.pt", "Cache-Control": "no-cache",
        })

    async def download(request: Request):
        name = request.path_params["name"]
        path = request.app.state.downloads.path(name)
        if path is None:
            return HTTPError(404, "Audio file not found", code="not_found").response()
        saved = compat.save_as(request.query_params.get("name"), name)
        media = "application/json" if path.suffix == ".json" else audio.MEDIA_TYPES[path.suffix[1:]]
        return FileResponse(path, media_type=media, filename=saved,
                            headers={"Cache-Control": "no-cache"})

    def model_entry(name: str) -> dict:
        return {"id": name, "object": "model", "created": compat.MODEL_CREATED, "owned_by": "kokoro"}

    async def list_models(request: Request):
        return JSONResponse({"object": "list", "data": [model_entry(m) for m in MODELS]})

    async def retrieve_model(request: Request):
        name = request.path_params["model"]
        if name not in MODELS:
            return HTTPError(404, f"Model '{name}' not found", "model", code="model_not_found").response()
        return JSONResponse(model_entry(name))

    async def test(request: Request):
        return JSONResponse({"status": "ok"})

    async def phonemize(request: Request):
        """Kokoro-FastAPI's: ``{"text", "language": "a"}`` -> ``{"phonemes", "tokens"}``,
        the text read as speech reads it (normalized, Markdown) and the token ids; this
        server also takes speech's ``normalization_options``."""
        state = request.app.state
        try:
            payload = _json_object(await read_body(request))
            text = payload.get("text")
            if not isinstance(text, str):
                raise HTTPError(422, "'text' must be a string", "text", schema=True)
            if not text.strip():
                raise HTTPError(400, "Text cannot be empty", "text")
            code = _optional(payload, "language", "a")
            try:
                code = language(code).code
            except (TypeError, ValueError) as error:
                raise HTTPError(400, f"'language': {error}", "language") from None
            normalization = _normalization(payload)
            carrier = NamedVoice(state.synthesizer.voice, f"{code}f_", code)  # only its language is read
            phonemes = await asyncio.to_thread(state.synthesizer.phonemize, text, carrier,
                                               normalization=normalization)
        except Exception as error:
            if isinstance(error, HTTPError) and error.schema:
                error.status = 422
            return _error_response(error)
        tokens = phonemes_to_ids(phonemes, state.synthesizer.vocab)  # with the boundary tokens
        return JSONResponse({"phonemes": phonemes, "tokens": tokens})

    async def generate_from_phonemes(request: Request):
        """Kokoro-FastAPI's: ``{"phonemes", "voice"}`` -> a WAV of them, read as one chunk."""
        state = request.app.state
        try:
            payload = _json_object(await read_body(request))
            for name in ("phonemes", "voice"):
                if not isinstance(payload.get(name), str):
                    raise HTTPError(422, f"'{name}' must be a string", name, schema=True)
            phonemes = payload["phonemes"]
            if not phonemes.strip():
                raise HTTPError(400, "Phonemes cannot be empty", "phonemes")
            voice = voices.voice(payload["voice"])
            most = state.synthesizer.limits.tokens - 2
            count = len(phonemes_to_ids(phonemes, state.synthesizer.vocab)) - 2
            if count > most:
                raise HTTPError(400, f"{count} phonemes: at most {most} are read in one piece", "phonemes")
            job = submit(state, _phoneme_chunks(state.synthesizer, phonemes, voice), len(phonemes))
        except Exception as error:
            if isinstance(error, HTTPError) and error.schema:
                error.status = 422
            return _error_response(error)
        return SpeechStream(job, state.scheduler, "wav", options.send_timeout)

    async def ssml_capabilities(request: Request):
        """Kokoro-FastAPI's: the SSML subset ``ssml: true`` translates, and what it does
        with the rest."""
        if not options.ssml:
            return _permission(SSML_OFF).response()
        return JSONResponse({
            "elements": {k: v for k, v in tags.SSML_ELEMENTS.items() if v},
            "ignored": [k for k, v in tags.SSML_ELEMENTS.items() if not v],
            "break_strengths": tags.BREAK_STRENGTHS, "prosody_rates": tags.PROSODY_RATES,
            "rate_range": list(tags.RATE_RANGE),
        })

    async def translate_ssml(request: Request):
        """Kokoro-FastAPI's: ``{"text", "voice": ""}`` -> ``{"text"}``, the SSML as the
        tags ``ssml: true`` reads (``<voice>`` and ``<prosody rate>`` only with a voice);
        text that is not SSML comes back as it is."""
        try:
            if not options.ssml:
                raise _permission(SSML_OFF)
            payload = _json_object(await read_body(request))
            text, voice = payload.get("text"), _optional(payload, "voice", "")
            for name, value in (("text", text), ("voice", voice)):
                if not isinstance(value, str):
                    raise HTTPError(422, f"'{name}' must be a string", name, schema=True)
            translated = tags.ssml_to_tags(text, voice, bool(voice), options.max_pause)
        except Exception as error:
            if isinstance(error, HTTPError) and error.schema:
                error.status = 422
            return _error_response(error)
        return JSONResponse({"text": translated})

    async def unload(request: Request):
        """Kokoro-FastAPI's: drop the loaded build (each stage's code and weights) until
        the next request loads it again; 403 unless ``allow_dev_unload``.  It runs as a
        job on the scheduler's worker, between other requests' chunks."""
        if not options.allow_dev_unload:
            message = "The /dev/unload endpoint is disabled"
            return HTTPError(403, message, code=message).response()
        state = request.app.state

        def drop():
            state.synthesizer.unload()
            yield from ()

        try:
            job = submit(state, drop(), 0)
            while await job.get(state.scheduler) is not END:
                pass
        except Exception as error:
            return _error_response(error)
        return JSONResponse({"status": "unloaded"})

    async def debug(request: Request):
        """Kokoro-FastAPI's host and process introspection, off by default there (403):
        not served here; /health says how busy the server is."""
        return HTTPError(403, "Debug endpoints are disabled", code="Debug endpoints are disabled").response()

    async def health(request: Request):
        stats = asdict(request.app.state.scheduler.stats())
        return JSONResponse({"status": "healthy", "voices": len(voices.names), **stats})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        synth = synthesizer
        if synth is None:
            from kokoro_ext import Synthesizer

            synth = await asyncio.to_thread(Synthesizer, options.artifacts)
            await asyncio.to_thread(synth.load)
        app.state.synthesizer = synth
        app.state.scheduler = Scheduler(options.max_active, options.max_queue)
        app.state.voices = voices
        app.state.downloads = Downloads(options.downloads, options.max_downloads)
        if options.warmup:
            await _warm_up(app.state.scheduler, synth)
        try:
            yield
        finally:
            await asyncio.to_thread(app.state.scheduler.close)
            app.state.downloads.close()

    routes = [
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/dev/captioned_speech", captioned_speech, methods=["POST"]),
        Route("/dev/dialogue", dialogue, methods=["POST"]),
        Route("/v1/audio/voices", list_voices, methods=["GET"]),
        Route("/v1/audio/voices/combine", combine_voices, methods=["POST"]),
        Route("/v1/download/{name}", download, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model}", retrieve_model, methods=["GET"]),
        Route("/v1/test", test, methods=["GET"]),
        Route("/dev/phonemize", phonemize, methods=["POST"]),
        Route("/dev/generate_from_phonemes", generate_from_phonemes, methods=["POST"]),
        Route("/dev/ssml", ssml_capabilities, methods=["GET"]),
        Route("/dev/ssml", translate_ssml, methods=["POST"]),
        Route("/dev/unload", unload, methods=["POST"]),
        *(Route(f"/debug/{name}", debug, methods=["GET"]) for name in ("threads", "storage", "system")),
        Route("/health", health, methods=["GET"]),
        *(_web_routes(options) if options.web else []),
    ]
    middleware = []
    if options.cors:  # outside the key's check: a browser's preflight carries no key
        middleware.append(Middleware(
            CORSMiddleware, allow_origins=list(options.cors), allow_methods=["*"], allow_headers=["*"],
            expose_headers=["X-Download-Path", "X-Timing-Path", "Content-Disposition", "X-Sample-Rate"],
        ))
    if api_key:
        middleware.append(Middleware(APIKeyMiddleware, api_key=api_key))
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _voice(voices: VoiceDirectory, blend: Blend, spec: SpeechRequest) -> NamedVoice:
    voice = voices.voice(blend)
    if spec.lang_code is not None:  # Kokoro-FastAPI's lang_code: read in that language
        voice = NamedVoice(voice.pack, voice.name, spec.lang_code)
    return voice


def _stream(synthesizer: Any, text: str, voice: NamedVoice, speed: float, spec: SpeechRequest, limit):
    return synthesizer.stream(
        text, voice, speed, chunk_limit=limit, normalization=spec.normalization,
        # only when asked: a synthesizer without the option still serves the rest
        **({} if spec.markdown else {"markdown": False}),
    )


@dataclass
class PartTrace:
    """What a response counts of a part's chunk: its tokens and alignment frames."""

    tokens: int = 0
    frames: int = 0


@dataclass
class PartChunk:
    """A chunk of a tagged input, as SpeechStream reads a Synthesizer's Chunk (whose
    module, with the run side's, is imported only when a build is loaded): ``voice`` is
    the name of the voice that speaks it, None for a pause's silence."""

    text: str
    audio: np.ndarray  # float32 at 24 kHz
    pause: float  # seconds of silence before ``audio``
    index: int
    trace: PartTrace
    words: tuple = ()
    voice: str | None = None

    def joined(self) -> np.ndarray:
        silence = np.zeros(round(self.pause * audio.SAMPLE_RATE), dtype=np.float32)
        return np.concatenate([silence, self.audio])


def _silence(seconds: float, index: int) -> PartChunk:
    """A [pause:Xs] as a chunk of that many seconds of silence (whole samples, rounded
    down, as Kokoro-FastAPI makes it)."""
    samples = np.zeros(int(seconds * audio.SAMPLE_RATE), dtype=np.float32)
    return PartChunk(text="", audio=samples, pause=0.0, index=index, trace=PartTrace())


def _part_chunks(synthesizer: Any, spec: SpeechRequest, voices: VoiceDirectory, options: ServerOptions):
    """The chunks of a tagged input's parts, in order: each Speak part as its own
    ``stream`` would give it (seed 0, in its voice, at ``speed`` times its pace) and each
    Pause as silence; words' times run on across the parts.  Every part's stream is made
    now, so that its text's errors (markup) are the request's 400 before any audio; the
    chunk limits count the request's chunks (only the first is cut short).  A part with
    nothing to say adds nothing; an input none of whose parts says anything is refused."""
    from kokoro_ext.run.synthesizer import check_speed

    check_speed(spec.speed)  # the request's own, before the parts' paces are held in range
    done = [0]  # chunks yielded so far
    plans: list = []
    named: dict[Blend, NamedVoice] = {}
    for part in spec.parts:
        if isinstance(part, tags.Pause):
            plans.append(part)
            continue
        if part.voice not in named:
            named[part.voice] = _voice(voices, part.voice, spec)
        speed = tags.clamp_rate(spec.speed * part.rate)
        stream = _stream(synthesizer, part.text, named[part.voice], speed, spec,
                         lambda index: chunk_phonemes(index + done[0], options))
        plans.append((stream, named[part.voice].name))
    return _chained(plans, done, any(isinstance(p, tags.Pause) for p in plans))


def _chained(plans: list, done: list[int], silent_ok: bool):
    offset = 0  # samples before the next chunk
    said = False
    for plan in plans:
        if isinstance(plan, tags.Pause):
            chunk = _silence(plan.seconds, done[0])
        else:
            stream, name = plan
            try:
                for piece in stream:
                    start = offset / audio.SAMPLE_RATE
                    words = tuple(dataclasses.replace(w, start=w.start + start, end=w.end + start)
                                  for w in piece.words)
                    chunk = PartChunk(piece.text, piece.audio, piece.pause, done[0],
                                      PartTrace(piece.trace.tokens, piece.trace.frames), words, name)
                    offset += len(chunk.audio) + round(chunk.pause * audio.SAMPLE_RATE)
                    done[0] += 1
                    said = True
                    yield chunk
            except NothingToSay:
                continue  # Kokoro-FastAPI skips a part with nothing to say
            continue
        offset += len(chunk.audio)
        done[0] += 1
        yield chunk
    if not said and not silent_ok:
        raise NothingToSay("nothing to say: the input's parts have no words")


def _query_flag(request: Request, name: str) -> bool | Response:
    """A boolean query parameter as FastAPI reads one, or the 422 it answers."""
    value = request.query_params.get(name)
    if value is None:
        return False
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    return HTTPError(422, f"'{name}' must be true or false, got {_show(value)}", name, schema=True).response()


def _phoneme_chunks(synthesizer: Any, phonemes: str, voice: NamedVoice):
    """The one chunk of ``phonemes``, synthesized on the scheduler's worker like any."""
    from kokoro_ext.run.pipeline import LengthOverflow
    from kokoro_ext.run.synthesizer import Chunk

    try:
        trace = synthesizer.synthesize_phonemes(phonemes, voice)
    except LengthOverflow as error:  # too long once the durations are known
        raise TooLong(str(error)) from None
    except NothingToSay as error:
        error.param = "phonemes"
        raise
    yield Chunk(text="", phonemes=phonemes, audio=trace.audio, pause=0.0, index=0, seed=0, trace=trace)


class _IsolatedStatic:
    """The headers a page with WebAssembly threads needs (kokoro_ext.web.server.HEADERS)
    on each response of ``app``."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from kokoro_ext.web.server import HEADERS

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"cache-control", b"no-cache"),
                                      *((k.lower().encode(), v.encode()) for k, v in HEADERS.items())]
            await send(message)

        await self.app(scope, receive, with_headers)


def _web_routes(options: ServerOptions) -> list:
    """The browser page (kokoro_ext/web/static) under /web/, read-only; with a browser
    build (``web_build``), that build under /web/build/ and /web/ opening the page on it."""
    routes = []
    if options.web_build is not None:
        target = "/web/index.html?builds=build/"
        site = [name for name in ("webgpu", "wasm") if (options.web_build / name / "manifest.json").is_file()]
        if site:  # a site of both builds: the page tries them in order
            target = "/web/index.html?builds=" + ",".join(f"build/{name}/" for name in site)

        async def open_page(request: Request):
            return RedirectResponse(target, status_code=302)

        routes += [Route("/web/", open_page, methods=["GET"]),
                   Mount("/web/build", _IsolatedStatic(StaticFiles(directory=options.web_build)))]
    async def config(request: Request):
        """Kokoro-FastAPI's player settings: the root path it is served under
        ($UVICORN_ROOT_PATH) and the version."""
        from kokoro_ext import __version__

        return JSONResponse({"root_path": os.environ.get("UVICORN_ROOT_PATH", ""), "version": __version__})

    routes.append(Route("/web/config", config, methods=["GET"]))
    return routes + [Mount("/web", _IsolatedStatic(StaticFiles(directory=WEB_STATIC, html=True)))]


def app_from_env() -> Starlette:
    """``create_app`` with the ServerOptions in $KOKORO_EXT_SERVE_OPTIONS (JSON, fields of
    ServerOptions; missing ones default): the factory each of uvicorn's workers calls."""
    fields = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
    for name in ("artifacts", "voices", "downloads", "web_build"):
        if fields.get(name) is not None:
            fields[name] = Path(fields[name])
    fields["cors"] = tuple(fields.get("cors", ()))
    return create_app(ServerOptions(**fields))
