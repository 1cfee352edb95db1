"""Kokoro voice packs: float32 [510, 1, 256], one style vector per phoneme count.

A voice is given as a file or by name:

* ``.bin``: raw little-endian float32, 510 x 256 values (kokoro-js's ``voices/*.bin``);
* ``.npy``: a numpy array of that shape (what a build stores as its default voice);
* ``.pt``: a torch tensor (kokoro's ``voices/*.pt``);
* a name such as ``af_heart``: ``<name>.bin`` (or ``.npy``/``.pt``) in the voices
  directory that ``python -m kokoro_ext.build.fetch`` fills (kokoro_ext.run.cache.voices_dir()).

Loading needs numpy (and torch only for ``.pt``); not the compiler.  A voice that is not
there raises UnknownVoice (kokoro_ext.run.errors: the caller's mistake); a file that is
there but is no voice pack (wrong size or shape, NaN or Inf) a plain ValueError.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from kokoro_ext.run import cache
from kokoro_ext.run.errors import UnknownVoice

VOICE_SHAPE = (510, 1, 256)
SUFFIXES = (".bin", ".npy", ".pt")
_NAME = re.compile(r"^[a-z]{2}_[a-z0-9]+$")


def list_voices(directory: str | Path | None = None) -> list[str]:
    """Names of the voices in ``directory`` (default: the fetched voices), sorted.

    Only files whose stem is a voice name count: those are what a name can reach.
    """
    directory = Path(directory) if directory is not None else cache.voices_dir()
    if not directory.is_dir():
        return []
    return sorted({p.stem for p in directory.iterdir() if p.suffix in SUFFIXES and is_voice_name(p.stem)})


def is_voice_name(spec: str) -> bool:
    """Whether ``spec`` looks like a voice name (``af_heart``) rather than a path."""
    return bool(_NAME.match(spec))


def _named_file(name: str, directory: Path) -> Path | None:
    # a name has no dots or slashes (is_voice_name), so this stays inside ``directory``
    for suffix in SUFFIXES:
        candidate = directory / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def resolve_voice(spec: str | Path, directory: str | Path | None = None) -> Path:
    """The file of a voice given as a path or a name; UnknownVoice naming what is missing."""
    path = Path(spec)
    if path.is_file() or not (isinstance(spec, str) and is_voice_name(spec)):
        if not path.is_file():
            raise UnknownVoice(f"voice file {path} does not exist")
        return path
    directory = Path(directory) if directory is not None else cache.voices_dir()
    found = _named_file(spec, directory)
    if found is not None:
        return found
    known = list_voices(directory)
    if not known:
        raise UnknownVoice(f"no voice {spec!r}: there are no voices in {directory}; {cache.FETCH_HINT}")
    raise UnknownVoice(
        f"no voice {spec!r} in {directory}; the voices are: {', '.join(known)} "
        "(or pass a .bin, .npy or .pt file)"
    )


def _read(path: Path) -> np.ndarray:
    if path.suffix == ".bin":
        data = np.fromfile(path, dtype="<f4")
        if data.size != int(np.prod(VOICE_SHAPE)):
            raise ValueError(
                f"voice file {path} holds {data.size} float32 values; a .bin voice pack holds "
                f"{int(np.prod(VOICE_SHAPE))} ({' x '.join(map(str, VOICE_SHAPE))})"
            )
        return data.reshape(VOICE_SHAPE)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix == ".pt":
        import torch

        voice = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(voice, torch.Tensor):
            raise ValueError(f"voice file {path} holds a {type(voice).__name__}, not a tensor")
        return voice.detach().float().numpy()
    raise ValueError(f"voice file {path}: unknown kind {path.suffix!r}, expected one of {SUFFIXES}")


def load_voice_array(spec: str | Path, directory: str | Path | None = None) -> np.ndarray:
    """A voice pack as float32 [510, 1, 256], from a file or by name (see the module doc).

    Raises UnknownVoice (a ValueError) for a missing file or name, and ValueError naming
    the file for an unreadable one, a wrong shape or NaN/Inf values.
    """
    return load_voice_file(resolve_voice(spec, directory))


def load_voice_file(path: Path) -> np.ndarray:
    """The checked voice pack in the file ``path`` (.bin, .npy or .pt)."""
    try:
        voice = _read(path)
    except ValueError:
        raise
    except Exception as err:  # numpy and torch raise many types for a bad file
        raise ValueError(f"cannot read voice pack {path}: {err}") from err
    return check_voice_pack(voice, f"voice pack {path}")


def check_voice_pack(pack: np.ndarray, source: str) -> np.ndarray:
    """``pack`` as contiguous float32 if it is a finite [510, 1, 256] voice pack, else a
    ValueError naming ``source``; the one check for voices from files, names and arrays."""
    if tuple(np.shape(pack)) != VOICE_SHAPE:
        raise ValueError(
            f"{source} must have shape {list(VOICE_SHAPE)}, got {list(np.shape(pack))} "
            "(one style vector per phoneme count)"
        )
    pack = np.ascontiguousarray(pack, dtype=np.float32)
    if not np.isfinite(pack).all():
        raise ValueError(f"{source} holds NaN or Inf values")
    return pack


class VoiceDirectory:
    """The voices of one directory, by name only, each read and checked on first use.

    For callers that take a voice from someone else (kokoro_ext.serve's clients): a voice
    is looked up among the names listed when this is made, never taken as a path, so
    ``../x`` or ``/etc/passwd`` cannot reach a file.  ``aliases`` maps other names onto
    voices (OpenAI's ``alloy`` onto ``af_alloy``).
    """

    def __init__(self, directory: str | Path | None = None, aliases: Mapping[str, str] | None = None):
        self.directory = Path(directory) if directory is not None else cache.voices_dir()
        self.aliases = dict(aliases or {})
        self.names = list_voices(self.directory)
        self._known = frozenset(self.names)
        self._packs: dict[str, np.ndarray] = {}  # 0.5 MB each: 28 MB once all 54 are used

    def resolve(self, voice: object) -> str:
        """The voice name ``voice`` (a name or an alias) stands for; UnknownVoice if none."""
        name = self.aliases.get(voice, voice) if isinstance(voice, str) else None
        if name not in self._known:
            raise UnknownVoice(f"unknown voice {voice!r}; {self._choices()}")
        return name

    def load(self, voice: object) -> np.ndarray:
        """The voice pack ``voice`` stands for, float32 [510, 1, 256].

        UnknownVoice if it is no voice here; ValueError if its file is no longer there or
        is not a finite voice pack (the directory's fault, not the caller's).
        """
        name = self.resolve(voice)
        if name not in self._packs:
            path = _named_file(name, self.directory)
            if path is None:
                raise ValueError(f"voice {name!r} was listed in {self.directory} but its file is gone")
            self._packs[name] = load_voice_file(path)
        return self._packs[name]

    def _choices(self) -> str:
        # no directory in the message: it may go to a client
        if not self.names:
            return "there are no voices"
        aliases = [f"{alias} ({name})" for alias, name in self.aliases.items() if name in self._known]
        return f"one of {', '.join(self.names)}" + (f" or {', '.join(aliases)}" if aliases else "")
