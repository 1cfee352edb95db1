"""The server's audio formats: the streaming encoders of kokoro_ext.run.encode (shared
with the say command) and the Content-Type each is sent as."""

from __future__ import annotations

from kokoro_ext.run.encode import FORMATS, WAV_STREAM_FRAMES, Encoder, encoder
from kokoro_ext.run.wav import SAMPLE_RATE

#: response_format -> Content-Type.
MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
}

__all__ = ["FORMATS", "MEDIA_TYPES", "SAMPLE_RATE", "WAV_STREAM_FRAMES", "Encoder", "encoder"]
