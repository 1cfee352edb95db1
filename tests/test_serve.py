"""kokoro_ext.serve against the small build: the real OpenAI client, and raw HTTP for errors."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile
import uvicorn

from kokoro_ext import Synthesizer
from kokoro_ext.run.pipeline import NonFiniteOutput
from kokoro_ext.run.voices import VoiceDirectory
from kokoro_ext.serve import ServerOptions, create_app
from kokoro_ext.serve import audio
from kokoro_ext.serve.app import chunk_phonemes
from kokoro_ext.serve.scheduler import END, QueueFull, Scheduler
from small_build import limit

KEY = "test-key"
# With the small build's limits (small_build.TOKENS) each of these sentences is about
# four chunks (each near a second on two shared cores): TWO is a stream of several chunks,
# LONG of two dozen.
TWO = "This is the first sentence. And here is the second one."
LONG = " ".join(f"This is sentence number {n}, spoken by the server." for n in range(1, 7))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(app, send_buffer: int | None = None):
    """Serve ``app`` with uvicorn in a thread; yields (base URL, app).

    ``send_buffer``: SO_SNDBUF of the listening socket, which the connections it accepts
    inherit (Linux): a small one makes a client that stops reading push back on the
    server after a few kilobytes, not after the megabytes loopback autotuning allows.
    """
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    sockets = None
    if send_buffer is not None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        listener.bind(("127.0.0.1", port))
        sockets = [listener]
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def synth(build_dir):
    return limit(Synthesizer(build_dir[0]))


@pytest.fixture(scope="module")
def voices(build_dir, tmp_path_factory) -> Path:
    """A voices directory with the build's voice under two names (af_alloy is OpenAI's alloy)."""
    directory = tmp_path_factory.mktemp("voices")
    pack = np.load(build_dir[0] / "voice.npy").astype("<f4")
    for name in ("af_heart", "af_alloy"):
        pack.tofile(directory / f"{name}.bin")
    (directory.parent / "secret.bin").write_bytes(pack.tobytes())  # what ../secret would reach
    return directory


def options(voices: Path, **kw) -> ServerOptions:
    return ServerOptions(voices=voices, warmup=False, **kw)


@pytest.fixture(scope="module")
def server(synth, voices):
    # OpenAI's names mean the voices of the same name here (af_alloy is alloy); the
    # default, Kokoro-FastAPI's mapping, is tested in test_serve_fastapi_compat.py
    app = create_app(options(voices, api_key=KEY, max_input_chars=1000, max_body_bytes=4096,
                             openai_voices="namesake"), synth)
    with running(app) as (url, app):
        yield url, app


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)


def post(url: str, body, key: str | None = KEY, **kw) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    return httpx.post(f"{url}/v1/audio/speech", content=body, headers=headers, timeout=60, **kw)


def speech(**kw) -> dict:
    return {"model": "tts-1", "input": "Hello there.", "voice": "af_heart", **kw}


def stats(app) -> dict:
    return vars(app.state.scheduler.stats())


# --- the OpenAI client -----------------------------------------------------------------


def test_openai_client_gets_wav(server):
    url, _ = server
    response = client(url).audio.speech.create(
        model="tts-1", voice="alloy", input="Hello world.", response_format="wav"
    )
    data = response.content
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    with wave.open(io.BytesIO(data)) as w:  # the header claims the longest length: read to EOF
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        frames = w.readframes(w.getnframes())
    assert len(frames) == len(data) - 44 and len(frames) > 2 * 2400  # over 0.1 s of audio


def test_openai_client_streams_pcm(server):
    url, app = server
    before = stats(app)["chunks"]
    pieces, chunks_at_first = [], None
    with client(url).audio.speech.with_streaming_response.create(
        model="kokoro", voice="af_heart", input=TWO, response_format="pcm"
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        for piece in response.iter_bytes():
            if chunks_at_first is None:
                chunks_at_first = stats(app)["chunks"] - before
            pieces.append(piece)
    total = stats(app)["chunks"] - before
    assert len(pieces) > 1
    # the first bytes came while most of the text was still to be synthesized
    assert chunks_at_first is not None and chunks_at_first < total / 2, (chunks_at_first, total)
    data = b"".join(pieces)
    assert len(data) % 2 == 0 and len(data) > 2 * 24000  # 16-bit samples, over a second
    assert total >= 4


def test_voices_models_and_health(server):
    url, _ = server
    auth = {"authorization": f"Bearer {KEY}"}
    voices = httpx.get(f"{url}/v1/audio/voices", headers=auth).json()
    assert voices["voices"] == [{"id": "af_alloy", "name": "af_alloy"}, {"id": "af_heart", "name": "af_heart"}]
    models = [m.id for m in client(url).models.list()]
    assert models == ["tts-1", "tts-1-hd", "kokoro", "gpt-4o-mini-tts"]
    health = httpx.get(f"{url}/health")  # no key needed: load balancers probe it
    assert health.status_code == 200 and health.json()["status"] == "healthy"


def _decode_aac(data: bytes) -> np.ndarray:
    import av

    with av.open(io.BytesIO(data), format="aac") as container:
        frames = [f.to_ndarray() for f in container.decode(audio=0)]
        assert container.streams.audio[0].rate == 24000
    return np.concatenate(frames, axis=-1).ravel()


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac", "aac"])
def test_compressed_formats_decode(server, fmt):
    url, _ = server
    pcm = np.frombuffer(post(url, speech(response_format="pcm")).content, "<i2")
    response = post(url, speech(response_format=fmt))
    assert response.status_code == 200
    assert response.headers["content-type"] == audio.MEDIA_TYPES[fmt]
    data = response.content
    if fmt == "flac":
        # A streamed FLAC header says "total samples unknown" (36 bits from byte 21),
        # in which libsndfile cannot read; fill the count in to decode every frame.
        head = bytearray(data)
        field = int.from_bytes(head[21:26], "big")
        assert head[:4] == b"fLaC" and field & (2**36 - 1) == 0
        head[21:26] = (field | len(pcm)).to_bytes(5, "big")
        decoded = soundfile.read(io.BytesIO(bytes(head)), dtype="int16")[0]
        assert np.array_equal(decoded, pcm)  # lossless: the same samples as pcm
    else:
        if fmt == "aac":
            assert data[:2] == b"\xff\xf1"  # an ADTS frame header: MPEG-4 AAC, no CRC
            decoded = _decode_aac(data)
        else:
            decoded = soundfile.read(io.BytesIO(data), dtype="float32")[0]
        # lossy codecs pad the start and end by a frame or two
        assert abs(len(decoded) - len(pcm)) < 0.1 * len(pcm) + 2048, (len(decoded), len(pcm))


# --- bad input: each a clear 4xx, and the server keeps serving -------------------------


@pytest.mark.parametrize(
    "body, status, words",
    [
        ("{not json", 400, "not valid JSON"),
        ("[1, 2]", 400, "JSON object"),
        (json.dumps({"model": "tts-1", "voice": "af_heart"}), 400, "missing required field 'input'"),
        (json.dumps(speech(model="gpt-9")), 400, "tts-1, tts-1-hd, kokoro, gpt-4o-mini-tts"),
        (json.dumps(speech(voice="zz_nobody")), 400, "af_alloy, af_heart"),
        (json.dumps(speech(voice="../secret")), 400, "unknown voice '../secret'"),
        (json.dumps(speech(voice="af_heart/../../secret")), 400, "unknown voice"),
        (json.dumps(speech(voice="/etc/passwd")), 400, "unknown voice"),
        (json.dumps(speech(voice=["af_heart"])), 400, "unknown voice"),
        (json.dumps(speech(response_format="ogg")), 400, "wav, pcm, flac, mp3, opus, aac"),
        (json.dumps(speech(speed=4.5)), 400, "speed must be in [0.25, 4.0]"),
        (json.dumps(speech(speed=0.2)), 400, "speed must be in [0.25, 4.0]"),
        (json.dumps(speech(speed=10**400)), 400, "speed must be in [0.25, 4.0], got inf"),
        (json.dumps(speech(stream_format="events")), 400, "one of audio, sse"),
        (json.dumps(speech(voice="af_heart+")), 400, "empty part"),
        (json.dumps(speech(speed="fast")), 400, "'speed' must be a number"),
        (json.dumps(speech(input="")), 400, "non-empty string"),
        (json.dumps(speech(input="x" * 1001)), 400, "at most 1000"),
        (json.dumps(speech(input="... !!!")), 400, "nothing to say"),
        (json.dumps(speech(input="a" * 5000)), 413, "at most 4096"),
    ],
)
def test_bad_input_is_a_clear_error(server, body, status, words):
    url, _ = server
    response = post(url, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error["message"]
    assert "Traceback" not in response.text
    assert post(url, speech(input="Hi.", response_format="pcm")).status_code == 200  # still serving


def test_api_key(server):
    url, _ = server
    for key in (None, "wrong"):
        response = post(url, speech(), key=key)
        assert response.status_code == 401
        assert "API key" in response.json()["error"]["message"]
    wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.audio.speech.create(model="tts-1", voice="alloy", input="Hi.")
    assert post(url, speech()).status_code == 200


@pytest.mark.parametrize("path", ["/v1/audio/voices", "/v1/models", "/v1/nothing-here"])
def test_the_api_key_guards_every_path_but_health(server, path):
    url, _ = server
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {KEY}"}):
        response = httpx.get(f"{url}{path}", headers=headers)
        assert response.status_code == 401, (path, headers)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["type"] == "authentication_error"
    authorized = httpx.get(f"{url}{path}", headers={"authorization": f"Bearer {KEY}"})
    assert authorized.status_code == (404 if path == "/v1/nothing-here" else 200)
    assert httpx.get(f"{url}/health").status_code == 200


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"voice": "zz_nobody"}, "voice"),
        ({"voice": "../secret"}, "voice"),
        ({"speed": 4.5}, "speed"),  # the Synthesizer's range, not the server's
        ({"voice": "af_heart(0)+af_alloy"}, "voice"),
        ({"stream_format": "events"}, "stream_format"),
        ({"instructions": ["be cheerful"]}, "instructions"),
        ({"input": "... !!!"}, "input"),  # found by the Synthesizer once it reads the text
        ({"model": "gpt-9"}, "model"),
    ],
)
def test_a_client_error_names_its_field(server, fields, param):
    url, _ = server
    response = post(url, speech(**fields))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error")


def test_the_warm_up_runs_on_the_thread_that_runs_the_requests(synth, voices):
    """The first synthesis on a thread makes its scratch: done at startup by the
    scheduler's worker, the first request does not wait for it."""
    threads = []

    class Recording:
        def stream(self, text, voice=None, speed=1.0, chunk_limit=None, normalization=None):
            for chunk in synth.stream(text, voice, speed, chunk_limit=chunk_limit, normalization=normalization):
                threads.append(threading.current_thread().name)  # where it was synthesized
                yield chunk

    app = create_app(ServerOptions(voices=voices, warmup=True), Recording())
    with running(app) as (url, app):
        assert threads == ["kokoro-scheduler"] and stats(app)["completed"] == 1  # "Ready."
        response = post(url, speech(response_format="pcm"), key=None)
    assert response.status_code == 200
    assert len(threads) > 1 and set(threads) == {"kokoro-scheduler"}


class BrokenBuild:
    """A Synthesizer stand-in failing as a corrupt build would: when the stream is made
    (``at_call``) or when its first chunk is asked for."""

    def __init__(self, error: Exception, at_call: bool):
        self.error, self.at_call = error, at_call

    def stream(self, text, voice, speed, chunk_limit=None, normalization=None):
        if self.at_call:
            raise self.error

        def chunks():
            raise self.error
            yield

        return chunks()


@pytest.mark.parametrize("at_call", [True, False])
@pytest.mark.parametrize(
    "error",
    [
        ValueError("/srv/build/decoder.so: SHA-256 differs from the manifest"),
        RuntimeError("/srv/build/weights.bin is truncated"),
        FileNotFoundError("/srv/build/text.so"),
        NonFiniteOutput("decoder returned NaN (/srv/build)"),
    ],
)
def test_a_broken_build_is_a_500_that_tells_the_client_nothing(voices, caplog, error, at_call):
    app = create_app(options(voices), BrokenBuild(error, at_call))
    with caplog.at_level(logging.ERROR, logger="kokoro_ext.serve.app"), running(app) as (url, app):
        response = post(url, speech(), key=None)
    assert response.status_code == 500
    body = response.json()["error"]
    assert body["type"] == "server_error" and body["param"] is None
    assert "/srv/build" not in response.text and type(error).__name__ not in response.text
    # the details are in the server's log, with the traceback
    logged = [r for r in caplog.records if r.name == "kokoro_ext.serve.app" and "/srv/build" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR
    assert logged[0].exc_info[1] is error


def test_a_voice_with_nan_is_refused(synth, voices, tmp_path, caplog):
    directory = tmp_path / "voices"
    directory.mkdir()
    pack = np.fromfile(voices / "af_heart.bin", "<f4")
    pack.tofile(directory / "af_heart.bin")
    pack[1000] = np.nan
    pack.tofile(directory / "af_broken.bin")
    app = create_app(options(directory), synth)
    with caplog.at_level(logging.ERROR, logger="kokoro_ext.serve.app"), running(app) as (url, app):
        response = post(url, speech(voice="af_broken", input="Hi."), key=None)
        assert response.status_code == 500 and "NaN" not in response.text
        assert post(url, speech(voice="af_heart", input="Hi.", response_format="pcm"), key=None).status_code == 200
    assert any("af_broken.bin holds NaN or Inf" in r.getMessage() for r in caplog.records)


def test_voices_as_npy_are_served(synth, voices, tmp_path):
    directory = tmp_path / "voices"
    directory.mkdir()
    np.save(directory / "af_sky.npy", np.fromfile(voices / "af_heart.bin", "<f4").reshape(510, 1, 256))
    app = create_app(options(directory), synth)
    with running(app) as (url, app):
        assert httpx.get(f"{url}/v1/audio/voices?legacy=1").json()["voices"] == ["af_sky"]
        response = post(url, speech(voice="af_sky", input="Hi.", response_format="pcm"), key=None)
    assert response.status_code == 200 and response.content == _pcm(synth, "Hi.")


def test_body_without_length_is_still_limited(server):
    url, _ = server

    def body():  # chunked transfer: no Content-Length to refuse up front
        for _ in range(10):
            yield b" " * 1000

    response = httpx.post(f"{url}/v1/audio/speech", content=body(),
                          headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 413 and "larger than 4096" in response.text


def _read_response(s: socket.socket) -> bytes:
    """One HTTP/1.1 response with a Content-Length; headers and body may arrive in separate reads."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += s.recv(4096)
    head, body = answer.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += s.recv(4096)
    return head + b"\r\n\r\n" + body


def test_a_body_that_never_arrives_is_408(synth, voices):
    app = create_app(options(voices, send_timeout=1.0), synth)
    with running(app) as (url, app):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"model\": ")  # and then nothing
            answer = _read_response(s)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1.0 s" in answer
        assert post(url, speech(input="Hi."), key=None).status_code == 200


# --- disconnects and admission ----------------------------------------------------------


def _wait(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_disconnect_mid_stream_cancels_the_work(server):
    url, app = server
    before = stats(app)
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=speech(input=LONG, response_format="pcm"),
                      headers={"authorization": f"Bearer {KEY}"}, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # the first audio, then hang up (the iterator is dropped)
    _wait(lambda: stats(app)["cancelled"] == before["cancelled"] + 1 and stats(app)["active"] == 0)
    made = stats(app)["chunks"] - before["chunks"]
    time.sleep(1.0)
    assert stats(app)["chunks"] - before["chunks"] == made  # nothing more pulled from it
    # LONG is two dozen chunks: the cancelled request made only a few of them
    assert made < 10, made
    assert post(url, speech()).status_code == 200


def test_queue_full_is_503_with_retry_after(synth, voices):
    app = create_app(options(voices, max_active=1, max_queue=0), synth)
    with running(app) as (url, app):
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=speech(input=LONG, response_format="pcm"),
                          timeout=60) as held:
            assert held.status_code == 200
            pieces = held.iter_raw()  # kept: a dropped iterator would close the response
            next(pieces)  # it holds the only slot while it streams
            refused = post(url, speech(), key=None)
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) >= 1
            assert "server busy" in refused.json()["error"]["message"]
        _wait(lambda: stats(app)["active"] == 0)
        assert post(url, speech(), key=None).status_code == 200


# --- readers that stall ----------------------------------------------------------------
# A client that stops reading: TCP's window closes, uvicorn's transport buffer fills, its
# send() waits for room, and the request stops taking chunks.  The client's receive buffer
# and the server's send buffer are set small, so that this happens after a few kilobytes
# (loopback would otherwise buffer megabytes of audio in the kernel).


def _open_stalled(port: int, text: str) -> socket.socket:
    """A raw connection that sends a streamed speech request and reads nothing (yet)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.settimeout(60)
    s.connect(("127.0.0.1", port))
    body = json.dumps(speech(input=text, response_format="pcm")).encode()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s


def _read_streamed(s: socket.socket) -> tuple[bytes, bytes, bool]:
    """(head, body, complete) of a chunked HTTP/1.1 response read to its last chunk, or to
    the end of the connection if the server hangs up first (complete False then)."""
    data = b""

    def more() -> bool:
        nonlocal data
        piece = s.recv(65536)
        data += piece
        return bool(piece)

    while b"\r\n\r\n" not in data:
        if not more():
            return data, b"", False
    head, data = data.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head.lower(), head
    body = b""
    while True:
        while b"\r\n" not in data:
            if not more():
                return head, body, False
        size_line, rest = data.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        while len(rest) < size + 2:
            if not more():
                return head, body + rest[:size], False
            rest = data.split(b"\r\n", 1)[1]
        body += rest[:size]
        data = rest[size + 2 :]
        if size == 0:
            return head, body, True


def _settled(app, seconds: float = 1.0) -> bool:
    """Whether the scheduler's counters stay as they are for ``seconds``: with a request
    at max_buffered, that its reader took no chunk meanwhile (so none was made for it)."""
    before = stats(app)
    time.sleep(seconds)
    return stats(app) == before


def _pcm(synth, text: str) -> bytes:
    """What a client that keeps up gets for ``text`` (voice af_heart is the build's voice)."""
    encoder = audio.encoder("pcm")
    return b"".join(encoder.feed(c.joined()) for c in synth.stream(text)) + encoder.finish()


def test_a_stalled_reader_holds_max_buffered_chunks_while_others_are_served(synth, voices):
    text = " ".join(LONG.split(". ")[:3])  # a dozen chunks: far more than the buffers hold
    # send_timeout 30 s: longer than the stall here; and no first chunk is cut short, so
    # that every response is the plain stream's
    app = create_app(options(voices, first_chunk_phonemes=100), synth)
    with running(app, send_buffer=8192) as (url, app):
        scheduler = app.state.scheduler
        stalled = _open_stalled(int(url.rsplit(":", 1)[1]), text)
        with stalled:
            # it took chunks until the buffers filled; then the worker made max_buffered
            # more for it and now skips it
            _wait(lambda: stats(app)["buffered"] == scheduler.max_buffered and _settled(app))
            assert stats(app)["active"] == 1 and stats(app)["cancelled"] == 0
            # meanwhile other clients are served, in full
            for other in ("Hi.", TWO):
                response = post(url, speech(input=other, response_format="pcm"), key=None)
                assert response.status_code == 200 and response.content == _pcm(synth, other)
                # the stalled request is still there, still held to max_buffered chunks
                assert stats(app)["active"] == 1
                assert stats(app)["buffered"] == scheduler.max_buffered
            # reading again, it gets the rest: all of it, as a client that kept up would
            head, body, complete = _read_streamed(stalled)
        assert head.startswith(b"HTTP/1.1 200") and complete
        assert body == _pcm(synth, text)
        assert stats(app)["cancelled"] == 0
        _wait(lambda: stats(app)["active"] == 0)


def test_a_reader_stalled_past_the_send_timeout_has_its_work_cancelled(synth, voices):
    app = create_app(options(voices, send_timeout=1.0), synth)
    with running(app, send_buffer=8192) as (url, app):
        with _open_stalled(int(url.rsplit(":", 1)[1]), LONG) as stalled:
            _wait(lambda: stats(app)["cancelled"] == 1 and stats(app)["active"] == 0)
            made = stats(app)["chunks"]
            # the server hung up on it, the response cut short: no last chunk
            head, body, complete = _read_streamed(stalled)
        assert head.startswith(b"HTTP/1.1 200") and not complete and body
        assert stats(app)["chunks"] == made and stats(app)["buffered"] == 0
        assert made < 10, made  # LONG is two dozen chunks: no more were made for it
        assert post(url, speech(input="Hi."), key=None).status_code == 200


# --- the scheduler and the encoders, without a server -----------------------------------


async def _read_all(job, scheduler) -> list:
    """Every chunk of a scheduler job, as the app's reader takes them."""
    items = []
    while (item := await job.get(scheduler)) is not END:
        items.append(item)
    return items


def test_short_request_is_not_starved_by_a_long_one():
    order: list[str] = []

    def chunks(name: str, n: int):
        for i in range(n):
            time.sleep(0.005)
            order.append(name)
            yield i

    async def main():
        scheduler = Scheduler(max_active=4, max_queue=0)
        try:
            long = scheduler.submit(chunks("long", 50))
            reader = asyncio.create_task(_read_all(long, scheduler))  # a reader that keeps up
            while "long" not in order:
                await asyncio.sleep(0.001)
            short = scheduler.submit(chunks("short", 3))
            assert await _read_all(short, scheduler) == [0, 1, 2]
            with pytest.raises(QueueFull):  # long and three more fill max_active
                for _ in range(4):
                    scheduler.submit(chunks("more", 50))
            assert await reader == list(range(50))
        finally:
            scheduler.close()

    asyncio.run(main())
    # the short request's three chunks came within its first few turns, not after 50
    last_short = max(i for i, name in enumerate(order) if name == "short")
    assert last_short < 10, order[:12]


@pytest.mark.parametrize("aging, first_chunks", [(60.0, ["short", "mid", "long"]),
                                                  (0.0, ["long", "short", "mid"])])
def test_first_chunks_go_shortest_text_first_until_one_has_waited_the_aging(aging, first_chunks):
    order: list[str] = []
    gate = threading.Event()

    def chunks(name: str, n: int):
        for i in range(n):
            if name == "gate":
                gate.wait(10)
            order.append(name)
            yield i

    async def main():
        scheduler = Scheduler(max_active=4, max_queue=0, first_audio_aging=aging)
        try:
            # the worker takes the gate's first chunk and waits there while three arrive;
            # were it slower, the gate would still go first (the smallest, the oldest)
            jobs = [scheduler.submit(chunks("gate", 1), size=1)]
            await asyncio.sleep(0.05)
            jobs += [scheduler.submit(chunks("long", 2), size=900),
                     scheduler.submit(chunks("short", 2), size=12),
                     scheduler.submit(chunks("mid", 2), size=80)]
            gate.set()
            for job in jobs:
                await _read_all(job, scheduler)
        finally:
            scheduler.close()

    asyncio.run(main())
    assert order[0] == "gate"
    assert order[1:4] == first_chunks, order


def test_a_first_chunk_holds_first_chunk_phonemes_and_the_others_chunk_phonemes():
    o = ServerOptions(chunk_phonemes=100, first_chunk_phonemes=16)
    assert [chunk_phonemes(i, o) for i in (0, 1, 2, 9)] == [16, 100, 100, 100]
    # never above chunk_phonemes: equal turns the cut off
    assert chunk_phonemes(0, ServerOptions(chunk_phonemes=10, first_chunk_phonemes=16)) == 10


def test_the_server_cuts_a_first_sentence_at_first_chunk_phonemes(synth, voices):
    text = "This is the first sentence, and it goes on for a while longer."
    first = min(5, synth.chunk_limit - 1)
    app = create_app(options(voices, first_chunk_phonemes=first), synth)
    with running(app) as (url, app):
        response = post(url, speech(input=text, response_format="pcm"), key=None)
    assert response.status_code == 200
    chunks = list(synth.stream(text, chunk_limit=lambda i: first if i == 0 else 100))
    plain = list(synth.stream(text))
    assert len(chunks[0].phonemes) < len(plain[0].phonemes) and len(chunks[0].text) < 20
    encoder = audio.encoder("pcm")
    assert response.content == b"".join(encoder.feed(c.joined()) for c in chunks) + encoder.finish()
    assert response.content != _pcm(synth, text)


def test_the_server_cuts_chunks_at_chunk_phonemes(synth, voices):
    text = "This is the first sentence."
    app = create_app(options(voices, chunk_phonemes=6), synth)
    with running(app) as (url, app):
        response = post(url, speech(input=text, response_format="pcm"), key=None)
    assert response.status_code == 200
    encoder = audio.encoder("pcm")
    chunks = list(synth.stream(text, chunk_limit=6))
    assert len(chunks) > len(list(synth.stream(text)))
    assert response.content == b"".join(encoder.feed(c.joined()) for c in chunks) + encoder.finish()


def test_the_server_imports_nothing_of_the_build_side():
    # the run side is to be torch-free: the server must not be what pulls torch in
    code = (
        "import sys, kokoro_ext.serve, kokoro_ext.serve.__main__; "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('kokoro_ext.compiler', "
        "'kokoro_ext.export', 'kokoro_ext.frontend', 'kokoro_ext.model', 'kokoro_ext.schedule', "
        "'kokoro_ext.dispatch', 'kokoro_ext.kernels', 'tvm'))]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_streamed_wav_header_is_the_largest_length():
    encoder = audio.encoder("wav")
    data = encoder.feed(np.zeros(2400, np.float32)) + encoder.finish()
    assert int.from_bytes(data[40:44], "little") == 2 * audio.WAV_STREAM_FRAMES
    assert len(data) == 44 + 4800  # the close-time fix-up changed nothing already sent


def test_cancelling_a_waiting_request_frees_its_place():
    def forever():
        while True:
            time.sleep(0.01)
            yield 0

    async def main():
        scheduler = Scheduler(max_active=1, max_queue=1)
        try:
            running_job = scheduler.submit(forever())
            waiting = scheduler.submit(forever())
            with pytest.raises(QueueFull):
                scheduler.submit(forever())
            scheduler.cancel(waiting)
            assert await waiting.get(scheduler) is END and waiting.produced == 0
            scheduler.submit(forever())  # its place in the queue is free again
            assert scheduler.stats().cancelled == 1 and scheduler.retry_after() >= 1
            assert await running_job.get(scheduler) == 0
        finally:
            scheduler.close()

    asyncio.run(main())


def test_workers_get_the_options_from_the_environment(build_dir, voices, monkeypatch):
    from kokoro_ext.serve.app import OPTIONS_ENV, app_from_env

    monkeypatch.setenv(OPTIONS_ENV, json.dumps(
        {"artifacts": str(build_dir[0]), "voices": str(voices), "api_key": "k2", "warmup": False}
    ))
    with running(app_from_env()) as (url, app):
        assert httpx.get(f"{url}/health").json()["voices"] == 2
        assert post(url, speech(input="Hi."), key=KEY).status_code == 401
        assert post(url, speech(input="Hi.", response_format="pcm"), key="k2").status_code == 200


# --- blends, OpenAI's speed range, SSE, and bodies of any shape --------------------------


def _encoded(chunks, fmt: str = "pcm") -> bytes:
    encoder = audio.encoder(fmt)
    return b"".join(encoder.feed(c.joined()) for c in chunks) + encoder.finish()


@pytest.fixture(scope="module")
def blend_voices(voices, tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    """(directory, af_heart's pack, af_sky's pack): two American voices that differ, and a
    British one."""
    directory = tmp_path_factory.mktemp("blend-voices")
    heart = np.fromfile(voices / "af_heart.bin", "<f4").reshape(510, 1, 256)
    sky = (heart * 0.5 + np.random.default_rng(0).normal(0, 0.05, heart.shape)).astype("<f4")
    heart.tofile(directory / "af_heart.bin")
    sky.tofile(directory / "af_sky.bin")
    sky.tofile(directory / "bf_emma.bin")
    return directory, heart, sky


@pytest.fixture(scope="module")
def blend_server(synth, blend_voices):
    with running(create_app(options(blend_voices[0]), synth)) as (url, app):
        yield url


def test_a_blend_is_served_as_its_weighted_mean(synth, blend_voices, blend_server):
    directory, heart, sky = blend_voices
    mean = VoiceDirectory(directory).load("af_heart(2)+af_sky(1)")
    np.testing.assert_allclose(mean, (2 * heart.astype(np.float64) + sky) / 3, rtol=1e-6, atol=1e-7)
    want = _encoded(synth.stream("Hi.", mean))
    for voice in ("af_heart(2)+af_sky(1)", " af_heart ( 2 ) + af_sky ", {"id": "af_heart(4)+af_sky(2)"}):
        response = post(blend_server, speech(voice=voice, input="Hi.", response_format="pcm"), key=None)
        assert response.status_code == 200, response.text
        assert response.content == want
    assert want != _encoded(synth.stream("Hi.", heart))
    # and to OpenAI's client, a blend is a voice name like any other
    response = openai.OpenAI(base_url=f"{blend_server}/v1", api_key="-", max_retries=0).audio.speech.create(
        model="tts-1", voice="af_heart(2)+af_sky(1)", input="Hi.", response_format="pcm"
    )
    assert response.content == want
    # the list of voices is the directory's, blends are not listed
    assert httpx.get(f"{blend_server}/v1/audio/voices?legacy=true").json()["voices"] == ["af_heart", "af_sky", "bf_emma"]


@pytest.mark.parametrize(
    "voice, words",
    [
        ("af_heart(0)+af_sky", "must be a positive number, got '0'"),
        ("af_heart(-2)+af_sky", "must be a positive number"),
        ("af_heart(x)+af_sky", "got 'x'"),
        ("af_heart+af_nobody", "unknown voice 'af_nobody'; one of af_heart, af_sky, bf_emma"),
        ("af_heart+../secret", "unknown voice '../secret'"),
        ("af_heart++af_sky", "empty part"),
        ("af_heart-", "empty part"),
        ("af_heart+-af_sky", "empty part"),
        ({"id": ["af_heart"]}, "unknown voice"),
    ],
)
def test_a_bad_blend_is_a_400_naming_the_voice(blend_server, voice, words):
    response = post(blend_server, speech(voice=voice), key=None)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "voice" and words in error["message"], error


def test_speed_takes_openais_range(server, synth):
    url, _ = server
    lengths = {}
    for speed in (0.25, 1.0, 4.0):
        response = post(url, speech(input="Hi there.", response_format="pcm", speed=speed))
        assert response.status_code == 200, response.text
        assert response.content == _encoded(synth.stream("Hi there.", speed=speed))
        lengths[speed] = len(response.content)
    assert lengths[0.25] > 2 * lengths[1.0] and lengths[1.0] > lengths[4.0]
    fast = client(url).audio.speech.create(model="tts-1", voice="alloy", input="Hi there.",
                                           response_format="pcm", speed=4.0)
    assert fast.content == _encoded(synth.stream("Hi there.", speed=4.0))
    with pytest.raises(openai.BadRequestError, match=r"speed must be in \[0.25, 4.0\]"):
        client(url).audio.speech.create(model="tts-1", voice="alloy", input="Hi.", speed=4.01)


def _events(body: bytes) -> list[dict]:
    """The JSON of each Server-Sent Event in ``body`` (``data:`` lines, blank-line ended)."""
    assert body.endswith(b"\n\n")
    events = []
    for block in body.decode().split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, block
        events.append(json.loads(block[len("data: "):]))
    return events


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_sse_carries_the_same_audio_as_openai_events(server, fmt):
    url, _ = server
    raw = post(url, speech(input=TWO, response_format=fmt))
    response = post(url, speech(input=TWO, response_format=fmt, stream_format="sse"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.content)
    *deltas, done = events
    assert len(deltas) > 1 and {e["type"] for e in deltas} == {"speech.audio.delta"}
    assert set(deltas[0]) == {"type", "audio"}
    assert b"".join(base64.b64decode(e["audio"]) for e in deltas) == raw.content
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_openai_client_streams_sse(server):
    url, _ = server
    raw = post(url, speech(input=TWO, response_format="pcm")).content
    with client(url).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TWO, response_format="pcm", stream_format="sse"
    ) as response:
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line]
    assert events[-1]["type"] == "speech.audio.done"
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == raw


def test_sse_errors(server, synth, voices):
    url, _ = server
    # before the first event: an HTTP error as for raw audio
    response = post(url, speech(input="... !!!", stream_format="sse"))
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"

    class FailsAfterOneChunk:
        def stream(self, text, voice, speed, chunk_limit=None, normalization=None):
            yield next(synth.stream("Hi."))
            raise RuntimeError("/srv/build/decoder.so is truncated")

    with running(create_app(options(voices), FailsAfterOneChunk())) as (other, app):
        response = post(other, speech(response_format="pcm", stream_format="sse"), key=None)
    assert response.status_code == 200  # sent with the first event
    *deltas, error = _events(response.content)
    assert [e["type"] for e in deltas] == ["speech.audio.delta"]
    assert error == {"type": "error", "error": {"message": "the server could not synthesize this request",
                                                "type": "server_error", "param": None, "code": None}}
    assert "/srv/build" not in response.text


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "body",
    [
        b"", b"null", b"1", b'"text"', b"[]", b"true", b"\xff\xfe", b"\xef\xbb\xbf{}", b"{",
        b"{}", b'{"model": NaN}', b"1" * 5000, _nested(40).encode(), _nested(1500).encode(),
        json.dumps(speech(input=json.loads(_nested(33)))).encode(),
        json.dumps(speech(voice={"id": {"id": "af_heart"}})).encode(),
        json.dumps({"model": "tts-1", "input": "Hi.", "voice": "af_heart", "x": json.loads(_nested(30))}).encode()[:-1],
    ],
)
def test_every_malformed_body_is_a_4xx_json_error(server, body):
    url, _ = server
    response = post(url, body)
    assert 400 <= response.status_code < 500, (body[:40], response.status_code, response.text[:200])
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("field", ["model", "input", "voice", "response_format", "speed",
                                   "stream_format", "instructions"])
def test_any_value_of_any_field_is_served_or_refused_with_a_4xx(server, field):
    url, _ = server
    values = [None, True, False, 0, -1, 0.5, 1e308, 10**400, float("nan"), "", "x", "\ud800",
              [], {}, ["af_heart"], {"id": None}, json.loads(_nested(20)), {"a": {"b": [1, {}]}}]
    for value in values:
        body = json.dumps(speech(**{"input": "Hi.", "response_format": "pcm", field: value}))
        response = post(url, body)
        assert response.status_code in (200, 400), (field, value, response.status_code, response.text)
        if response.status_code == 400:
            assert response.json()["error"]["param"] in (field, None), (field, value, response.text)


def test_a_body_nested_ten_thousand_deep_is_a_400(synth, voices):
    with running(create_app(options(voices), synth)) as (url, app):  # 64 KB bodies
        for body in (_nested(10_000), '{"a":' * 10_000 + "1" + "}" * 10_000,
                     json.dumps(speech())[:-1] + ', "x": ' + _nested(10_000) + "}"):
            response = post(url, body, key=None)
            assert response.status_code == 400, response.text[:200]
            assert "nests deeper than 32 levels" in response.json()["error"]["message"]
        assert post(url, speech(response_format="pcm"), key=None).status_code == 200


def test_captioned_speech_reports_the_words_as_read_unless_markdown_is_false(server):
    url, _ = server
    body = {"input": "**Bold** move, \x1b[31mred\x1b[0m text.", "voice": "af_heart",
            "response_format": "pcm"}

    def words(**kw) -> list[str]:
        response = httpx.post(f"{url}/dev/captioned_speech", json={**body, **kw}, timeout=120,
                              headers={"authorization": f"Bearer {KEY}"})
        assert response.status_code == 200, response.text
        return [w["word"] for line in response.text.splitlines()
                for w in json.loads(line)["timestamps"]]

    assert words() == ["Bold", "move,", "red", "text."]
    assert words(markdown=False) == ["**Bold**", "move,", "red", "text."]
