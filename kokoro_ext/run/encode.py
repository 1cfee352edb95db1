"""Streaming audio encoders: float32 chunks at 24 kHz in, bytes out, for the speech
server (kokoro_ext.serve) and the say command alike.

Every format is written as it goes, so that a response or a pipe can start with the
first chunk:

* ``pcm``: raw 16-bit little-endian mono at 24 kHz, as OpenAI sends it;
* ``wav``: the standard library's ``wave`` writer, told the largest length a WAV header
  can hold (the data size is unknown until the end): players read to the end of the
  stream, as is common for streamed WAV;
* ``flac`` and ``opus`` (in Ogg): libsndfile through ``soundfile``, whose wheels bundle it;
  the FLAC header goes out saying "total samples unknown" (0), which FLAC allows;
* ``mp3``: LAME through ``lameenc`` (plain MPEG frames, no Xing header that would give a
  frame count before the end is known);
* ``aac``: FFmpeg's AAC-LC encoder through PyAV (``av``, whose wheels bundle FFmpeg), in
  ADTS framing: each frame carries its own header, so the stream needs no index or length.

Writers that seek back at the end to fix a header (wave, libsndfile) write into a
``_Sink`` whose already-sent bytes cannot change: the fix-up is kept aside as
``Encoder.fixups``, which a seekable file applies (a WAV or FLAC file then states its
length) and a stream drops, which is what "length unknown" means for a stream.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Callable

import numpy as np

from kokoro_ext.run.wav import SAMPLE_RATE, pcm16

#: The frame count a streamed WAV header claims: the most a 32-bit RIFF size allows.
WAV_STREAM_FRAMES = (0xFFFFFFFF - 36) // 2
MP3_KBPS = 64  # ample for 24 kHz mono speech
AAC_KBPS = 64


class _Sink(io.RawIOBase):
    """A seekable file whose new bytes are taken out with ``drain``.

    Writes into bytes already drained (a header fixed up at close) change the copy here
    and are noted in ``fixups``: they were sent already.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._pos = 0
        self._sent = 0
        self.fixups: list[tuple[int, bytes]] = []

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size is None or size < 0 else min(len(self._data), self._pos + size)
        out = bytes(self._data[self._pos : end])
        self._pos = end
        return out

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def write(self, data) -> int:
        data = bytes(data)
        if self._pos < self._sent:
            self.fixups.append((self._pos, data[: self._sent - self._pos]))
        end = self._pos + len(data)
        if end > len(self._data):
            self._data.extend(bytes(end - len(self._data)))
        self._data[self._pos : end] = data
        self._pos = end
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def drain(self) -> bytes:
        """The bytes written past what was drained before."""
        out = bytes(self._data[self._sent :])
        self._sent = len(self._data)
        return out


class Encoder:
    """One stream's encoder: ``feed`` float32 audio, then ``finish``; both return bytes.

    ``fixups``, complete after ``finish``: (offset, bytes) rewrites of bytes returned
    before, the header's length fields; a seekable file applies them, a stream cannot.
    """

    def __init__(
        self,
        feed: Callable[[np.ndarray], bytes],
        finish: Callable[[], bytes],
        fixups: list[tuple[int, bytes]] | None = None,
    ):
        self._feed = feed
        self._finish = finish
        self.fixups: list[tuple[int, bytes]] = [] if fixups is None else fixups

    def feed(self, audio: np.ndarray) -> bytes:
        """Encode the next piece of audio; returns whatever bytes are ready."""
        return self._feed(np.asarray(audio, dtype=np.float32))

    def finish(self) -> bytes:
        """Flush the encoder; returns the last bytes of the stream."""
        return self._finish()


def _pcm() -> Encoder:
    return Encoder(pcm16, lambda: b"")


def _wav() -> Encoder:
    sink = _Sink()
    writer = wave.open(sink, "wb")
    writer.setnchannels(1)
    writer.setsampwidth(2)
    writer.setframerate(SAMPLE_RATE)
    writer.setnframes(WAV_STREAM_FRAMES)
    writer.writeframesraw(b"")  # the header goes out first, before any audio

    def feed(audio: np.ndarray) -> bytes:
        writer.writeframesraw(pcm16(audio))
        return sink.drain()

    def finish() -> bytes:
        writer.close()  # its header fix-up lands in bytes already sent: sink.fixups
        return sink.drain()

    return Encoder(feed, finish, sink.fixups)


def _soundfile(format: str, subtype: str) -> Encoder:
    import soundfile

    sink = _Sink()
    writer = soundfile.SoundFile(sink, "w", SAMPLE_RATE, 1, format=format, subtype=subtype)

    def feed(audio: np.ndarray) -> bytes:
        # the same 16-bit samples as pcm and wav (libsndfile would round floats its own way)
        writer.write(np.frombuffer(pcm16(audio), "<i2"))
        return sink.drain()

    def finish() -> bytes:
        writer.close()
        return sink.drain()

    return Encoder(feed, finish, sink.fixups)


def _mp3() -> Encoder:
    import lameenc

    lame = lameenc.Encoder()
    lame.set_bit_rate(MP3_KBPS)
    lame.set_in_sample_rate(SAMPLE_RATE)
    lame.set_channels(1)
    lame.set_quality(5)  # LAME's -q 5: its default speed/quality trade
    return Encoder(lambda audio: bytes(lame.encode(pcm16(audio))), lambda: bytes(lame.flush()))


def _aac() -> Encoder:
    import av

    sink = _Sink()
    container = av.open(sink, "w", format="adts")
    stream = container.add_stream("aac", rate=SAMPLE_RATE, layout="mono")
    stream.bit_rate = AAC_KBPS * 1000
    samples = 0

    def feed(audio: np.ndarray) -> bytes:
        nonlocal samples
        pcm = np.frombuffer(pcm16(audio), "<i2")  # the same 16-bit samples as the others
        if pcm.size:
            frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
            frame.sample_rate, frame.pts = SAMPLE_RATE, samples
            samples += pcm.size
            for packet in stream.encode(frame):  # PyAV converts to the encoder's fltp
                container.mux(packet)
        return sink.drain()

    def finish() -> bytes:
        for packet in stream.encode(None):
            container.mux(packet)
        container.close()
        return sink.drain()

    return Encoder(feed, finish, sink.fixups)


_FACTORIES: dict[str, Callable[[], Encoder]] = {
    "wav": _wav,
    "pcm": _pcm,
    "flac": lambda: _soundfile("FLAC", "PCM_16"),
    "mp3": _mp3,
    "opus": lambda: _soundfile("OGG", "OPUS"),
    "aac": _aac,
}


FORMATS = tuple(_FACTORIES)
#: A file name's suffix -> the format it names (Ogg is the container opus is written in).
SUFFIXES = {".wav": "wav", ".flac": "flac", ".mp3": "mp3", ".opus": "opus", ".ogg": "opus",
            ".pcm": "pcm", ".aac": "aac"}


def encoder(format: str) -> Encoder:
    """A fresh encoder for ``format`` (one of FORMATS); ValueError otherwise.

    ImportError when the package the format needs (soundfile, lameenc, av: the ``audio``
    extra) is not installed.
    """
    if format not in _FACTORIES:
        raise ValueError(f"unknown audio format {format!r}; one of {', '.join(FORMATS)}")
    return _FACTORIES[format]()
