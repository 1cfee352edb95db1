"""The OpenAI-compatible speech API as a Starlette application.

``POST /v1/audio/speech`` takes OpenAI's body (``model``, ``input``, ``voice``,
``instructions``, ``response_format``, ``speed``, ``stream_format``) and streams the audio
as it is synthesized, raw or as Server-Sent Events;
``GET /v1/audio/voices`` lists the voices, ``GET /v1/models`` the accepted model names,
``POST /dev/captioned_speech`` (Kokoro-FastAPI's) streams JSON lines of base64 audio
with each chunk's word timestamps;
``GET /health`` says whether the server is up and how busy it is (never behind the API
key, for load balancers' probes).  Errors are OpenAI's JSON shape,
``{"error": {"message", "type", "param", "code"}}``, never a traceback: a 4xx for what
the client got wrong (kokoro_ext.run.errors.BadInput names the field), and for anything
else (a broken build, a bug) a 500 that says nothing of the server, whose details go to
the log.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kokoro_ext.run.errors import BadInput
from kokoro_ext.run.voices import Blend, VoiceDirectory
from kokoro_ext.serve import audio
from kokoro_ext.serve.scheduler import END, Job, QueueFull, Scheduler

#: Model names accepted in ``model``: all mean the one Kokoro-82M build being served.
MODELS = ("kokoro", "tts-1", "tts-1-hd")
#: OpenAI's voices -> the Kokoro v1.0 voice of the same name or character.
OPENAI_VOICES = {
    "alloy": "af_alloy",
    "echo": "am_echo",
    "fable": "bm_fable",
    "onyx": "am_onyx",
    "nova": "af_nova",
    "shimmer": "af_bella",  # Kokoro has no shimmer; a bright American female voice
}
API_KEY_ENV = "KOKORO_EXT_API_KEY"
#: ServerOptions as JSON, for ``app_from_env`` in uvicorn's worker processes.
OPTIONS_ENV = "KOKORO_EXT_SERVE_OPTIONS"
#: Paths served without the API key: load balancers probe them.
OPEN_PATHS = ("/health",)
#: ``stream_format``: the encoded audio as it is, or each piece base64 in an SSE event.
STREAM_FORMATS = ("audio", "sse")
#: Deepest nesting of arrays and objects a body may have (OpenAI's needs 2).
MAX_DEPTH = 32

log = logging.getLogger(__name__)


@dataclass
class ServerOptions:
    """How the server runs; ``python -m kokoro_ext.serve --help`` sets each."""

    artifacts: Path = Path("artifacts")
    voices: Path | None = None  # default: the fetched voices (kokoro_ext.run.cache.voices_dir())
    host: str = "127.0.0.1"
    port: int = 8880
    api_key: str | None = None  # required as "Authorization: Bearer KEY" when set
    max_active: int = 8  # requests whose chunks take turns
    max_queue: int = 32  # requests waiting for a turn; beyond, 503 with Retry-After
    max_input_chars: int = 4096  # OpenAI's limit on ``input``
    max_body_bytes: int = 64 * 1024
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
    """An error answered as OpenAI's JSON error body."""

    def __init__(self, status: int, message: str, param: str | None = None, headers=None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers

    def body(self) -> dict:
        kind = {401: "authentication_error", 503: "server_busy"}.get(
            self.status, "invalid_request_error" if self.status < 500 else "server_error"
        )
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": None}}

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
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
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
    """A validated ``POST /v1/audio/speech`` body."""

    input: str
    voice: Blend  # Kokoro voice names and weights
    response_format: str
    speed: float
    stream_format: str = "audio"
    markdown: bool = True  # our extension: false reads the input as written


def parse_speech(body: bytes, voices: VoiceDirectory, options: ServerOptions) -> SpeechRequest:
    """Validate a request body; HTTPError(400), or the BadInput of the voice, naming the
    field and what is allowed, whatever the body's shape."""
    payload = _parse_json(body)
    if not isinstance(payload, dict):
        raise HTTPError(400, "the body must be a JSON object")
    return _speech_fields(payload, voices, options)


@dataclass
class CaptionedRequest:
    """A validated ``POST /dev/captioned_speech`` body: the speech fields and how to answer."""

    speech: SpeechRequest
    stream: bool = True  # JSON lines chunk by chunk, else one JSON object at the end
    timestamps: bool = True  # False: each object's "timestamps" is empty


def parse_captioned(body: bytes, voices: VoiceDirectory, options: ServerOptions) -> CaptionedRequest:
    """Kokoro-FastAPI's captioned speech body: the speech fields (``model`` optional,
    ``stream_format`` not taken) with ``stream`` and ``return_timestamps``; ``lang_code``,
    ``volume_multiplier``, ``normalization_options`` and ``return_download_link`` are
    accepted and ignored (the voice's name picks the language)."""
    payload = _parse_json(body)
    if not isinstance(payload, dict):
        raise HTTPError(400, "the body must be a JSON object")
    if "stream_format" in payload:
        raise HTTPError(400, "'stream_format' is not taken here: use 'stream'", "stream_format")
    flags = {}
    for name, default in (("stream", True), ("return_timestamps", True)):
        flags[name] = _optional(payload, name, default)
        if not isinstance(flags[name], bool):
            raise HTTPError(400, f"'{name}' must be true or false, got {_show(flags[name])}", name)
    spec = _speech_fields({"model": MODELS[0], **payload}, voices, options)
    return CaptionedRequest(spec, flags["stream"], flags["return_timestamps"])


def _speech_fields(payload: dict, voices: VoiceDirectory, options: ServerOptions) -> SpeechRequest:
    for name in ("model", "input", "voice"):
        if name not in payload:
            raise HTTPError(400, f"missing required field {name!r}", name)
    model = payload["model"]
    if model not in MODELS:
        raise HTTPError(400, f"unknown model {_show(model)}; one of {', '.join(MODELS)}", "model")
    text = payload["input"]
    if not isinstance(text, str) or not text.strip():
        raise HTTPError(400, "'input' must be a non-empty string", "input")
    if len(text) > options.max_input_chars:
        raise HTTPError(
            400,
            f"'input' has {len(text)} characters; at most {options.max_input_chars} are allowed",
            "input",
        )
    voice = payload["voice"]
    if isinstance(voice, dict) and set(voice) == {"id"}:  # OpenAI's {"id": "voice_..."} form
        voice = voice["id"]
    # by name, OpenAI's alias or a blend of those only, never a path
    blend = voices.blend(voice)
    # optional fields: absent or null take OpenAI's default.  instructions are taken and
    # not followed: Kokoro has no prompt
    instructions = payload.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise HTTPError(400, "'instructions' must be a string", "instructions")
    response_format = _optional(payload, "response_format", "mp3")
    if response_format not in audio.FORMATS:
        raise HTTPError(
            400,
            f"unknown response_format {_show(response_format)}; one of {', '.join(audio.FORMATS)}",
            "response_format",
        )
    speed = _optional(payload, "speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or speed != speed:
        raise HTTPError(400, f"'speed' must be a number, got {_show(speed)}", "speed")
    try:
        speed = float(speed)
    except OverflowError:  # a JSON integer past float's range: out of range, said so below
        speed = math.inf if speed > 0 else -math.inf
    # the range is the Synthesizer's (kokoro_ext.run.synthesizer.SPEED_RANGE), checked there
    stream_format = _optional(payload, "stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise HTTPError(
            400,
            f"unknown stream_format {_show(stream_format)}; one of {', '.join(STREAM_FORMATS)}",
            "stream_format",
        )
    markdown = _optional(payload, "markdown", True)
    if not isinstance(markdown, bool):
        raise HTTPError(400, f"'markdown' must be true or false, got {_show(markdown)}", "markdown")
    return SpeechRequest(text, blend, response_format, speed, stream_format, markdown)


def _optional(payload: dict, name: str, default: Any) -> Any:
    value = payload.get(name)
    return default if value is None else value


def _parse_json(body: bytes) -> Any:
    """``body`` as JSON, HTTPError(400) if it is not JSON or nests deeper than MAX_DEPTH."""
    try:
        payload = json.loads(body)
    except RecursionError:  # json's own nesting bound is the interpreter's stack
        raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:  # JSONDecodeError, bad UTF-8, an integer of over 4300 digits
        raise HTTPError(400, f"the body is not valid JSON: {str(error)[:200]}") from None
    # checked without recursion, so that nothing later (repr in a message) meets the depth
    level = [payload]
    for _ in range(MAX_DEPTH + 1):
        level = [
            inner for value in level if isinstance(value, (dict, list))
            for inner in (value.values() if isinstance(value, dict) else value)
        ]
        if not level:
            return payload
    raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels")


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
    """

    def __init__(self, job: Job, scheduler: Scheduler, response_format: str, send_timeout: float,
                 sse: bool = False, captioned: CaptionedRequest | None = None):
        self.job, self.scheduler = job, scheduler
        self.format, self.send_timeout, self.sse = response_format, send_timeout, sse
        self.captioned = captioned

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.ensure_future(_disconnected(receive))
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
            headers = [(b"content-type", media.encode())]
            if self.sse:
                headers.append((b"cache-control", b"no-cache"))
            if self.format in ("pcm", "wav"):
                # what OpenAI's pcm is, for clients that cannot guess
                headers.append((b"x-sample-rate", str(audio.SAMPLE_RATE).encode()))
            await self._send(send, {"type": "http.response.start", "status": 200, "headers": headers})
            encoder = audio.encoder(self.format)
            chunk, tokens, frames = first, 0, 0
            while chunk is not END:
                tokens, frames = tokens + chunk.trace.tokens, frames + chunk.trace.frames
                data = await _encode(encoder.feed, chunk.joined(), self.format)
                await self._body(send, self._delta(data) if self.sse else data)
                chunk = await self._next(gone)
                if chunk is None:
                    return  # gone
                if isinstance(chunk, Exception):  # too late for an error status
                    _log_failure(chunk, "speech response cut short")
                    if self.sse:  # a raw stream can only be cut short
                        error = {"type": "error", **_as_http_error(chunk).body()}
                        await self._body(send, _event(error), more=False)
                    return
            tail = await _encode(lambda _: encoder.finish(), None, self.format)
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

    async def _captioned(self, send: Send, first: Any, gone: asyncio.Future) -> None:
        """Kokoro-FastAPI's captioned speech: a JSON object per piece of encoded audio,
        ``{"audio": base64, "audio_format": media type, "timestamps": [{"word",
        "start_time", "end_time"}]}`` on a line each (``stream``), or one object of all the
        audio and words at the end.  Words of a chunk whose encoding gave no bytes yet
        (an encoder's buffering) go with the next piece; a failure after the start can only
        cut the response short."""
        media = audio.MEDIA_TYPES[self.format]
        headers = [(b"content-type", b"application/json")]
        await self._send(send, {"type": "http.response.start", "status": 200, "headers": headers})
        encoder = audio.encoder(self.format)
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
                pending += [{"word": w.text, "start_time": w.start, "end_time": w.end}
                            for w in chunk.words]
            await out(await _encode(encoder.feed, chunk.joined(), self.format))
            chunk = await self._next(gone)
            if chunk is None:
                return
            if isinstance(chunk, Exception):
                _log_failure(chunk, "captioned speech response cut short")
                return
        await out(await _encode(lambda _: encoder.finish(), None, self.format), last=True)
        if not stream:
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
    accepts requests; ``app.state`` holds ``synthesizer``, ``scheduler`` and ``voices``.
    """
    if options.chunk_phonemes < 1 or options.first_chunk_phonemes < 1:
        raise ValueError("chunk_phonemes and first_chunk_phonemes must be at least 1")
    # default: the fetched voices (kokoro_ext.run.cache.voices_dir())
    voices = VoiceDirectory(options.voices, aliases=OPENAI_VOICES)
    api_key = options.api_key or os.environ.get(API_KEY_ENV) or None

    async def speech(request: Request, captioned: bool = False):
        state = request.app.state
        try:
            try:  # a client that trickles its body holds a connection, not the worker
                body = await asyncio.wait_for(
                    _read_body(request, options.max_body_bytes), options.send_timeout
                )
            except asyncio.TimeoutError:
                raise HTTPError(408, f"the body did not arrive within {options.send_timeout} s") from None
            if captioned:
                wanted = parse_captioned(body, voices, options)
                spec = wanted.speech
            else:
                wanted, spec = None, parse_speech(body, voices, options)
            # the Synthesizer checks the speed and the text here, before any chunk
            chunks = state.synthesizer.stream(
                spec.input, voices.voice(spec.voice), spec.speed,
                chunk_limit=lambda index: chunk_phonemes(index, options),
                # only when asked: a synthesizer without the option still serves the rest
                **({} if spec.markdown else {"markdown": False}),
            )
            try:
                job = state.scheduler.submit(chunks, size=len(spec.input))
            except QueueFull as error:
                retry = state.scheduler.retry_after()
                raise HTTPError(503, f"server busy: {error}; retry in {retry} s",
                                headers={"Retry-After": str(retry)}) from None
        except Exception as error:
            return _error_response(error)
        return SpeechStream(job, state.scheduler, spec.response_format, options.send_timeout,
                            sse=spec.stream_format == "sse", captioned=wanted)

    async def captioned_speech(request: Request):
        return await speech(request, captioned=True)

    async def list_voices(request: Request):
        return JSONResponse({"voices": voices.names, "openai": OPENAI_VOICES})

    async def list_models(request: Request):
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "kokoro-tvm-ext"} for m in MODELS]}
        )

    async def health(request: Request):
        stats = asdict(request.app.state.scheduler.stats())
        return JSONResponse({"status": "ok", "voices": len(voices.names), **stats})

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
        if options.warmup:
            await _warm_up(app.state.scheduler, synth)
        try:
            yield
        finally:
            await asyncio.to_thread(app.state.scheduler.close)

    return Starlette(
        routes=[
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/dev/captioned_speech", captioned_speech, methods=["POST"]),
            Route("/v1/audio/voices", list_voices, methods=["GET"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        middleware=[Middleware(APIKeyMiddleware, api_key=api_key)] if api_key else [],
        lifespan=lifespan,
    )


def app_from_env() -> Starlette:
    """``create_app`` with the ServerOptions in $KOKORO_EXT_SERVE_OPTIONS (JSON, fields of
    ServerOptions; missing ones default): the factory each of uvicorn's workers calls."""
    fields = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
    for name in ("artifacts", "voices"):
        if fields.get(name) is not None:
            fields[name] = Path(fields[name])
    return create_app(ServerOptions(**fields))
