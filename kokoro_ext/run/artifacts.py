"""The build output: compiled stage libraries, their weights, the model's config and voice,
a manifest.

<dir>/manifest.json          what was built, from what, for what (kokoro_ext.run.manifest)
<dir>/config.json            the model config (vocab and dimensions the runtime needs)
<dir>/voice.npy              the default voice pack, float32 [510, 1, 256]
<dir>/<stage>.so             one compiled library per stage, code only, any length
                             (a browser build: stages.wasm, the four stages' host code,
                             each under its symbol prefix, and TVM's web runtime)
<dir>/<stage>.weights        its weights in the layout its ``main`` takes (kokoro_ext.run.weights)
<dir>/build.log              the compiler's messages and warnings (not needed to run)

The manifest records the SHA-256 of every file the runtime reads, and of the checkpoint
the weights were made from (its path and SHA-256, or the seed of random weights).  Per
stage it records the checkpoint parameters the library's weight transform takes (what
``build --weights-only`` feeds it), the layout of the transformed arrays in
``<stage>.weights`` and the library's signature.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from kokoro_ext.run import contract, stamps
from kokoro_ext.run.manifest import REBUILD, Manifest

MANIFEST = "manifest.json"
CONFIG = "config.json"
VOICE = "voice.npy"
LOG = "build.log"


def stage_file(stage: str, suffix: str = ".so") -> str:
    """File name of the compiled library of ``stage`` (``suffix``: the target's)."""
    return f"{stage}{suffix}"


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


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Write ``manifest.json``."""
    # a new file renamed over the old: a reader never sees half a manifest, and a build
    # that shares files with another by hard links never writes into the other's
    staging = directory / f".{MANIFEST}.{os.getpid()}"
    staging.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
    os.replace(staging, directory / MANIFEST)


def read_manifest(directory: str | Path) -> Manifest:
    """Read and check an artifacts directory's manifest, its stages' signatures included
    (kokoro_ext.run.contract); ValueError saying what is wrong."""
    path = Path(directory) / MANIFEST
    rebuild = f"(`python -m kokoro_ext.build --out {directory}`)"
    if not path.is_file():
        raise ValueError(
            f"{directory} holds no {MANIFEST}: not a kokoro_ext build; "
            "run `python -m kokoro_ext.build --out DIR` first"
        )
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); {REBUILD} {rebuild}") from err
    try:
        manifest = Manifest.from_json(value)
        contract.check(manifest)
    except ValueError as err:
        raise ValueError(f"{path}: {err} {rebuild}") from None
    return manifest


def listed_files(manifest: Manifest) -> dict[str, str]:
    """File name -> SHA-256 the manifest records: config, voice, every stage library and its
    weights."""
    files = {CONFIG: manifest.config_sha256, VOICE: manifest.voice_sha256}
    for entry in manifest.stages.values():
        files[entry.file] = entry.sha256
        files[entry.weights.file] = entry.weights.sha256
    return files


def verify(
    directory: str | Path,
    manifest: Manifest,
    names: Iterable[str] | None = None,
    check_bytes: bool = True,
    trust_stamps: bool = True,
) -> None:
    """ValueError naming the first listed file (of ``names``, default all) that is missing,
    or (``check_bytes``) whose bytes changed.

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
