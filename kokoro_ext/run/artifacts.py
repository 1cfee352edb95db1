"""The build output: compiled stage libraries, their weights, the model's config and voice,
a manifest.

<dir>/manifest.json          what was built, from what, for what (see write_manifest)
<dir>/config.json            the model config (vocab and dimensions the runtime needs)
<dir>/voice.npy              the default voice pack, float32 [510, 1, 256]
<dir>/<stage>.so             one compiled library per stage, code only, any length
<dir>/<stage>.weights        its weights in the layout its ``main`` takes (kokoro_ext.run.weights)

The manifest records the SHA-256 of every file, and of the checkpoint the weights were
made from (``weights``: its path and SHA-256, or the seed of random weights).  Per stage
it records the checkpoint parameters the library's weight transform takes
(``parameters``: what ``build --weights-only`` feeds it) and the layout of the
transformed arrays in ``<stage>.weights``.

FORMAT 3: the weights files hold the transformed weights (format 2 held the
checkpoint's arrays and had the runtime transform them at every load).  FORMAT 4: the
Winograd and direct-convolution filters among them are packed for the native kernels'
own products (cpp/include/kokoro_ext/products.h), which format 3's are not.  FORMAT 5:
the 7- and 11-tap Winograd filters are F(4, 7) and F(6, 6) transforms (format 4's were
F(4, 4) in chunks; cpp/src/winograd.cc).  FORMAT 6: the stage libraries take their
buffers from the native library's storage pool (``kokoro_ext.alloc_storage``,
cpp/src/storage.cc), which format 5's native library does not have.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kokoro_ext.run import stamps

MANIFEST = "manifest.json"
CONFIG = "config.json"
VOICE = "voice.npy"
FORMAT = 6


def stage_file(stage: str) -> str:
    """File name of the compiled library of ``stage``."""
    return f"{stage}.so"


def weights_file(stage: str) -> str:
    """File name of the weights of ``stage``."""
    return f"{stage}.weights"


def sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` with the format version."""
    manifest = {"format": FORMAT, **manifest}
    # a new file renamed over the old: a reader never sees half a manifest, and a build
    # that shares files with another by hard links never writes into the other's
    staging = directory / f".{MANIFEST}.{os.getpid()}"
    staging.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(staging, directory / MANIFEST)


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """Read and check an artifacts directory's manifest; ValueError saying what is wrong."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise ValueError(
            f"{directory} holds no {MANIFEST}: not a kokoro_ext build; "
            "run `python -m kokoro_ext.build --out DIR` first"
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); rebuild the artifacts") from err
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{path} has format {manifest.get('format')!r}, this kokoro_ext reads format "
            f"{FORMAT}; rebuild the artifacts"
        )
    return manifest


def listed_files(manifest: dict[str, Any]) -> dict[str, str]:
    """File name -> SHA-256 the manifest records: config, voice, every stage library and its
    weights."""
    files = {CONFIG: manifest.get("config_sha256"), VOICE: manifest.get("voice_sha256")}
    for entry in manifest["stages"].values():
        files[entry["file"]] = entry["sha256"]
        files[entry["weights"]["file"]] = entry["weights"]["sha256"]
    return files


def verify(
    directory: str | Path,
    manifest: dict[str, Any],
    names: Iterable[str] | None = None,
    check_bytes: bool = True,
    trust_stamps: bool = True,
) -> None:
    """ValueError naming the first listed file (of ``names``, default all) that is missing,
    has no SHA-256 in the manifest, or (``check_bytes``) whose bytes changed.

    A stage library or weights file that is not what was built can crash the process or
    produce noise, so the runtime checks every file before it loads it.  A file this user
    has verified before and that is unchanged since (kokoro_ext.run.stamps) is not hashed
    again unless ``trust_stamps`` is false; one that is hashed and matches is stamped.
    """
    directory = Path(directory)
    rebuild = f"rebuild with `python -m kokoro_ext.build --out {directory}`"
    listed = listed_files(manifest)
    verified: dict[Path, tuple[stamps.FileStamp, str]] = {}
    for name in listed if names is None else names:
        expected = listed[name]
        path = directory / name
        if not path.is_file():
            raise ValueError(f"{path} is listed in {MANIFEST} but missing; {rebuild}")
        if expected is None:
            raise ValueError(f"{directory / MANIFEST} records no SHA-256 for {name}; {rebuild}")
        if not check_bytes or (trust_stamps and stamps.is_verified(path, expected)):
            continue
        before = stamps.FileStamp.of(path)
        if sha256(path) != expected:
            raise ValueError(
                f"{path} does not match {MANIFEST} (SHA-256 differs): the file was changed or "
                f"corrupted after the build; {rebuild}"
            )
        verified[path] = (before, expected)
    stamps.record_verified(verified)
