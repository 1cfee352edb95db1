"""What Kokoro-FastAPI's clients send and expect, as this server takes it: model names,
OpenAI's voice names, ``normalization_options``, download links and voice files.

Kokoro-FastAPI (remsky/Kokoro-FastAPI, ``api/src/core/openai_mappings.json``,
``api/src/structures/schemas.py``) is where most people run Kokoro as a service; Open
WebUI, SillyTavern and home-assistant setups point at its URL.  Taking its names and
defaults makes a switch to this server a change of host.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import struct
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_ext.text.normalize import Normalization

#: Model names accepted in ``model``, in Kokoro-FastAPI's order: all mean the one build.
MODELS = ("tts-1", "tts-1-hd", "kokoro", "gpt-4o-mini-tts")
#: Kokoro-FastAPI's "created" of every model (a fixed date in its model list).
MODEL_CREATED = 1686935002
DEFAULT_MODEL = "kokoro"
DEFAULT_VOICE = "af_heart"

#: OpenAI's voice names -> Kokoro voices as Kokoro-FastAPI maps them (its
#: openai_mappings.json): what its clients' voice settings mean.
KOKORO_FASTAPI_VOICES = {
    "alloy": "am_adam",
    "ash": "af_nicole",
    "coral": "bf_emma",
    "echo": "af_bella",
    "fable": "af_sarah",
    "onyx": "bm_george",
    "nova": "bf_isabella",
    "sage": "am_michael",
    "shimmer": "af_sky",
}
#: OpenAI's voice names -> the Kokoro v1.0 voice of the same name (or, for shimmer, a
#: bright American female voice): ``--openai-voices namesake``.
NAMESAKE_VOICES = {
    "alloy": "af_alloy",
    "echo": "am_echo",
    "fable": "bm_fable",
    "onyx": "am_onyx",
    "nova": "af_nova",
    "shimmer": "af_bella",
}
#: ``--openai-voices``: the name of each mapping.
VOICE_MAPPINGS = {"kokoro-fastapi": KOKORO_FASTAPI_VOICES, "namesake": NAMESAKE_VOICES}


# --- normalization_options --------------------------------------------------------------

#: Kokoro-FastAPI's normalization options and their defaults (NormalizationOptions).
NORMALIZATION_DEFAULTS = {
    "normalize": True,
    "unit_normalization": False,
    "url_normalization": True,
    "email_normalization": True,
    "optional_pluralization_normalization": True,
    "phone_normalization": True,
    "replace_remaining_symbols": True,
}
#: Each option -> the switch of kokoro_ext.text.normalize.Normalization that does what it
#: does in Kokoro-FastAPI's normalizer (api/src/services/text_processing/normalizer.py).
NORMALIZATION_SWITCHES = {
    "normalize": "enabled",  # every rule: off, the text goes to the G2P as written
    "unit_normalization": "units",  # "10KB", "5 km": units after numbers
    "url_normalization": "urls",
    "email_normalization": "emails",
    "optional_pluralization_normalization": "plurals",  # "(s)" -> "s"
    "phone_normalization": "phones",
    "replace_remaining_symbols": "symbols",  # "&", "+", "=", "@", "#" as words
}


def normalization(options: dict) -> Normalization:
    """The text passes' Normalization for ``normalization_options`` (a dict of bools,
    checked): each option given, else Kokoro-FastAPI's default; other keys are ignored,
    as Kokoro-FastAPI ignores them."""
    chosen = {**NORMALIZATION_DEFAULTS, **{k: v for k, v in options.items() if k in NORMALIZATION_DEFAULTS}}
    return Normalization(**{NORMALIZATION_SWITCHES[name]: value for name, value in chosen.items()})


#: A request without ``normalization_options``: Kokoro-FastAPI's defaults, units after
#: numbers left as written (the Synthesizer's own default spells them out).
DEFAULT_NORMALIZATION = normalization({})


# --- voice files --------------------------------------------------------------------------


def torch_file(pack: np.ndarray) -> bytes:
    """``pack`` (float32) as the file ``torch.save`` writes for a CPU tensor (its zip
    format), written without torch: what Kokoro-FastAPI's ``/v1/audio/voices/combine``
    returns and kokoro's ``.pt`` voices are.  ``torch.load(..., weights_only=True)``
    reads it (it names only _rebuild_tensor_v2, FloatStorage and OrderedDict)."""
    pack = np.ascontiguousarray(pack, dtype="<f4")
    shape = pack.shape
    stride = tuple(s // pack.itemsize for s in pack.strides)

    def text(value: str) -> bytes:
        data = value.encode()
        return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE

    def integer(value: int) -> bytes:
        return b"J" + struct.pack("<i", value)  # BININT

    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(integer(v) for v in values) + b"t"  # MARK ... TUPLE

    pickle = b"".join([
        b"\x80\x02",  # PROTO 2
        b"ctorch._utils\n_rebuild_tensor_v2\n",  # GLOBAL
        b"(",  # MARK: the arguments
        b"(", text("storage"), b"ctorch\nFloatStorage\n", text("0"), text("cpu"),
        integer(pack.size), b"t", b"Q",  # the storage's persistent id: BINPERSID
        integer(0), ints(shape), ints(stride), b"\x89",  # offset, size, stride, NEWFALSE
        b"ccollections\nOrderedDict\n)R",  # backward hooks: OrderedDict()
        b"tR.",  # TUPLE, REDUCE, STOP
    ])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickle)
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/data/0", pack.tobytes())
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


# --- download links -----------------------------------------------------------------------

#: A download's file name: what ``Downloads.new`` makes, never a path.
_DOWNLOAD_NAME = re.compile(r"speech-[0-9a-f]{16}\.(?:mp3|opus|aac|flac|wav|pcm)(?:\.json)?")
# Kokoro-FastAPI's save-as sanitizing (_resolve_download_name)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,5}$")


@dataclass
class DownloadFile:
    """One download being written: ``write`` its bytes, then ``finish`` (or ``abandon``)."""

    name: str
    path: Path  # the name with ".part" until finished: never served before it is whole
    downloads: "Downloads"

    def __post_init__(self) -> None:
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by finish or abandon

    def write(self, data: bytes) -> None:
        if data:
            self._file.write(data)

    def finish(self, fixups: list[tuple[int, bytes]] = ()) -> None:
        """Apply the encoder's header fix-ups (a WAV or FLAC then states its length) and
        publish the file under its name."""
        for offset, data in fixups:
            self._file.seek(offset)
            self._file.write(data)
        self._file.close()
        os.replace(self.path, self.downloads.directory / self.name)

    def abandon(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def sidecar(self, data: object) -> None:
        """``data`` as JSON beside the finished file, under its name and ``.json``
        (Kokoro-FastAPI's ``return_timing`` file); it goes when its file goes."""
        path = self.downloads.directory / f"{self.name}.json"
        part = path.with_name(path.name + ".part")
        part.write_text(json.dumps(data))
        os.replace(part, path)


class Downloads:
    """The files of ``return_download_link``, in one directory, bounded: at most
    ``max_files`` (the oldest go first) and none older than ``max_age`` seconds.

    ``directory`` None: a new temporary directory, removed by ``close``.  Workers of one
    server share one (``python -m kokoro_ext.serve --workers``), so that a link works
    whichever worker the download reaches.
    """

    def __init__(self, directory: Path | None, max_files: int = 16, max_age: float = 3600.0):
        self.owned = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="kokoro-ext-downloads-")) if directory is None else directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_files, self.max_age = max_files, max_age
        self._lock = threading.Lock()

    def new(self, response_format: str) -> DownloadFile:
        name = f"speech-{secrets.token_hex(8)}.{response_format}"
        self._prune(keep=self.max_files - 1)
        return DownloadFile(name, self.directory / f"{name}.part", self)

    def path(self, name: str) -> Path | None:
        """The finished download ``name``, or None (never a path outside the directory)."""
        if not _DOWNLOAD_NAME.fullmatch(name):
            return None
        self._prune(keep=self.max_files)
        path = self.directory / name
        return path if path.is_file() else None

    def _prune(self, keep: int) -> None:
        with self._lock:
            now = time.time()
            files = []
            for path in self.directory.iterdir():
                try:
                    files.append((path.stat().st_mtime, path))
                except FileNotFoundError:
                    continue
            files.sort(reverse=True)  # newest first
            finished = 0
            for mtime, path in files:
                if now - mtime > self.max_age:
                    path.unlink(missing_ok=True)
                elif path.suffix not in (".part", ".json"):  # one being written stays until it is old
                    finished += 1
                    if finished > max(keep, 0):
                        path.unlink(missing_ok=True)
            for _, path in files:  # a sidecar goes with its file
                if path.suffix == ".json" and not path.with_suffix("").exists():
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.directory, ignore_errors=True)


def save_as(requested: str | None, stored: str) -> str:
    """The file name a download is saved as: ``requested`` cut to safe characters, with
    the stored file's extension (Kokoro-FastAPI's ``?name=``), else the stored name."""
    if not requested:
        return stored
    stem = _EXTENSION.sub("", _UNSAFE.sub("_", requested)).strip("._-")[:100].strip("._-")
    return f"{stem}{os.path.splitext(stored)[1]}" if stem else stored
