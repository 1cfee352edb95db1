"""Kokoro voice packs: float32 [510, 1, 256], one style vector per phoneme count.

A voice is given as a file or by name:

* ``.bin``: raw little-endian float32, 510 x 256 values (kokoro-js's ``voices/*.bin``);
* ``.npy``: a numpy array of that shape (what a build stores as its default voice);
* ``.pt``: a torch tensor (kokoro's ``voices/*.pt``);
* a name such as ``af_heart``: ``<name>.bin`` (or ``.npy``/``.pt``) in the voices
  directory that ``python -m kokoro_ext.build.fetch`` fills (kokoro_ext.run.cache.voices_dir()).

Loading needs numpy (and torch only for ``.pt``); not the compiler.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from kokoro_ext.run import cache

VOICE_SHAPE = (510, 1, 256)
SUFFIXES = (".bin", ".npy", ".pt")
_NAME = re.compile(r"^[a-z]{2}_[a-z0-9]+$")


def list_voices(directory: str | Path | None = None) -> list[str]:
    """Names of the voices in ``directory`` (default: the fetched voices), sorted."""
    directory = Path(directory) if directory is not None else cache.voices_dir()
    if not directory.is_dir():
        return []
    return sorted({p.stem for p in directory.iterdir() if p.suffix in SUFFIXES})


def is_voice_name(spec: str) -> bool:
    """Whether ``spec`` looks like a voice name (``af_heart``) rather than a path."""
    return bool(_NAME.match(spec))


def resolve_voice(spec: str | Path, directory: str | Path | None = None) -> Path:
    """The file of a voice given as a path or a name; ValueError naming what is missing."""
    path = Path(spec)
    if path.is_file() or not (isinstance(spec, str) and is_voice_name(spec)):
        if not path.is_file():
            raise ValueError(f"voice file {path} does not exist")
        return path
    directory = Path(directory) if directory is not None else cache.voices_dir()
    for suffix in SUFFIXES:
        candidate = directory / f"{spec}{suffix}"
        if candidate.is_file():
            return candidate
    known = list_voices(directory)
    if not known:
        raise ValueError(f"no voice {spec!r}: there are no voices in {directory}; {cache.FETCH_HINT}")
    raise ValueError(
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

    Raises ValueError naming the file for a missing or unreadable file, a wrong shape,
    or NaN/Inf values.
    """
    path = resolve_voice(spec, directory)
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
