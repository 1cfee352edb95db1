"""Build the compiled stages: ``python -m kokoro_ext.build --target llvm [options]``.

Compiles every stage (kokoro_ext.stages) for each token and frame bucket and writes the
libraries, the config, the default voice and a manifest to ``--out``.  The weights are
the real Kokoro-82M v1.0 that ``python -m kokoro_ext.fetch`` downloaded, unless
``--weights FILE`` or ``--random-weights`` says otherwise.  The directory is
replaced only when the whole build succeeded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

import kokoro_ext
from kokoro_ext import artifacts, cache, environment
from kokoro_ext.cache import DEFAULT_VOICE
from kokoro_ext.compiler import compile_module
from kokoro_ext.frontend import LSTM_BACKENDS
from kokoro_ext.model import build_model, load_config, load_voice, random_voice, resolve_voice
from kokoro_ext.model.voices import is_voice_name
from kokoro_ext.stages import STAGES, Geometry
from kokoro_ext.target import instruction_features, parse_target, target_features

DEFAULT_TOKEN_BUCKETS = (32, 64, 128)
DEFAULT_FRAME_BUCKETS = (128, 256, 512)
DEFAULT_OUT = Path("artifacts")


def _buckets(text: str) -> list[int]:
    sizes = sorted({int(v) for v in text.replace(",", " ").split()})
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"buckets must be positive integers, got {text!r}")
    return sizes


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--target",
        default="llvm",
        help="TVM target: llvm (this host's CPU, the default), 'llvm -mcpu=<cpu>' or a JSON "
        "dict; e.g. 'llvm -mcpu=x86-64-v2' for artifacts that run on any recent x86-64",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="artifacts directory (default: ./artifacts)"
    )
    parser.add_argument(
        "--tokens",
        type=_buckets,
        default=list(DEFAULT_TOKEN_BUCKETS),
        help="token buckets, e.g. '32,64,128' (boundary tokens included)",
    )
    parser.add_argument(
        "--frames",
        type=_buckets,
        default=list(DEFAULT_FRAME_BUCKETS),
        help="frame buckets (40 frames = 1 s of audio)",
    )
    parser.add_argument(
        "--config", type=Path, help="Kokoro config.json (default: the shipped Kokoro-82M)"
    )
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument(
        "--weights",
        type=Path,
        help="kokoro-v1_0.pth checkpoint or kokoro-v1.0 ONNX export (.onnx, int8 or float32); "
        "default: the Kokoro-82M v1.0 int8 model `python -m kokoro_ext.fetch` downloaded",
    )
    weights.add_argument(
        "--random-weights",
        action="store_true",
        help="deterministic random weights and voice (--seed) instead: noise, not speech "
        "(for tests and other configs)",
    )
    parser.add_argument(
        "--voice",
        help=f"default voice of the build: a name ({DEFAULT_VOICE}, ...) or a .bin/.npy/.pt "
        f"voice pack [510, 1, 256] (default: {DEFAULT_VOICE}; random with --random-weights)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random weights/voice with --random-weights",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="stages compiled at once, one process each (default: the number of cores)",
    )
    parser.add_argument("--lstm-backend", choices=LSTM_BACKENDS, default="native")
    parser.add_argument(
        "--dense",
        choices=("native", "tvm"),
        default="native",
        help="conv1d/addmm on the native BLAS kernels (default) or TVM's own lowering",
    )
    return parser.parse_args(argv)


def _source(path: Path | None, seed: int, name: str | None = None) -> dict[str, Any]:
    if path is None:
        return {"random_seed": seed}
    source = {"path": str(path), "sha256": artifacts.sha256(path)}
    return {"name": name, **source} if name else source


def resolve_sources(args: argparse.Namespace) -> tuple[Path | None, Path | None, str | None]:
    """(weights file, voice file, voice name) of a build: None for random ones.

    Without --weights the fetched Kokoro-82M model (ValueError saying how to fetch it if
    it is missing); without --voice the fetched af_heart, or a random voice with
    --random-weights.
    """
    if args.random_weights:
        weights = None
    else:
        weights = args.weights if args.weights is not None else cache.default_weights()
    spec = args.voice
    if spec is None and weights is None:
        return None, None, None
    spec = spec or DEFAULT_VOICE
    name = spec if is_voice_name(spec) and not Path(spec).is_file() else None
    return weights, resolve_voice(spec), name


def build(args: argparse.Namespace, log=print) -> Path:
    """Run the build described by ``args``; returns the artifacts directory."""
    target = parse_target(args.target)
    config = load_config(args.config)
    weights, voice_file, voice_name = resolve_sources(args)
    if weights is None:
        log(
            "note: --random-weights: building Kokoro with deterministic RANDOM weights "
            f"(seed {args.seed}); the result is noise, not speech"
        )
    else:
        log(f"weights: {weights}")
    model = build_model(config, weights=weights, seed=args.seed)
    voice = load_voice(voice_file) if voice_file else random_voice(args.seed)
    log(f"default voice: {voice_name or voice_file or f'random (seed {args.seed})'}")
    log(f"target: {json.dumps(target)}")
    # Biggest first, so that the last job to finish is a short one.
    jobs = sorted(
        (
            (name, b)
            for name, spec in STAGES.items()
            for b in (args.tokens if spec.axis == "tokens" else args.frames)
        ),
        key=lambda job: (_COST[job[0]], job[1]),
        reverse=True,
    )
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    _recover_killed_build(out)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{out.name}.building-{os.getpid()}-", dir=out.parent)
    )
    try:
        stages = {}
        started = time.perf_counter()
        options = (target, args.lstm_backend, args.dense, staging)
        workers = max(1, min(args.jobs, len(jobs)))
        source = (config, weights, args.seed)
        for i, entry in enumerate(_run_jobs(jobs, model, source, options, workers), 1):
            stages[f"{entry['stage']}-{entry['bucket']}"] = entry
            took = " ".join(f"{k} {v:.1f}s" for k, v in entry["seconds"].items())
            log(
                f"[{i}/{len(jobs)}] {entry['stage']} @ {entry['bucket']} "
                f"{STAGES[entry['stage']].axis}: {took}, {entry['ir_lines']} IR lines"
            )
        (staging / artifacts.CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False))
        np.save(staging / artifacts.VOICE, voice.numpy())
        env = environment.describe()
        artifacts.write_manifest(
            staging,
            {
                "kokoro_ext": kokoro_ext.__version__,
                "tvm": env.tvm_version,
                "patches": {p.patch: p.state for p in env.patches},
                "target": target,
                # what the compiled code may use, for a person or tool deciding where
                # the build can go; the load check derives it from "target" itself
                "cpu_features": sorted(instruction_features(target_features(target))),
                "lstm_backend": args.lstm_backend,
                "dense": args.dense,
                "buckets": {"tokens": args.tokens, "frames": args.frames},
                "geometry": Geometry.from_model(model).__dict__,
                "config_sha256": artifacts.sha256(staging / artifacts.CONFIG),
                "weights": _source(weights, args.seed),
                "voice": _source(voice_file, args.seed, voice_name),
                "voice_sha256": artifacts.sha256(staging / artifacts.VOICE),
                "stages": stages,
                "build_seconds": round(time.perf_counter() - started, 1),
            },
        )
        _replace_directory(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"wrote {len(jobs)} compiled stages to {out}")
    return out


# Relative compile cost of a stage, to start the long jobs first.
_COST = {"decoder": 3, "text": 2, "prosody": 1, "source": 0}

_worker: dict[str, Any] = {}


def _set_worker(model, target, lstm_backend, dense, staging) -> None:
    _worker.update(
        model=model,
        target=target,
        lstm_backend=lstm_backend,
        native_dense=dense == "native",
        staging=staging,
    )


def _init_worker(config, weights, seed, *options) -> None:
    import torch

    torch.set_num_threads(1)  # export only traces; the cores belong to the other workers
    _set_worker(build_model(config, weights=weights, seed=seed), *options)


def _compile_stage(job: tuple[str, int]) -> dict[str, Any]:
    name, bucket = job
    spec, model = STAGES[name], _worker["model"]
    compiled = compile_module(
        spec.module(model),
        spec.example(model, bucket),
        _worker["target"],
        _worker["lstm_backend"],
        native_dense=_worker["native_dense"],
    )
    file = artifacts.stage_file(name, bucket)
    path = _worker["staging"] / file
    compiled.executable.export_library(str(path))
    return {
        "stage": name,
        "bucket": bucket,
        "file": file,
        "sha256": artifacts.sha256(path),
        "ir_lines": compiled.ir_lines,
        "seconds": {k: round(v, 2) for k, v in compiled.seconds.items()},
    }


def _run_jobs(jobs, model, source, options, workers: int):
    """Compile every (stage, bucket) job, yielding manifest entries as they finish.

    Stages compile independently and TVM's compile is single-threaded, so ``workers``
    processes (spawned: TVM and torch do not survive fork) build ``workers`` at a time,
    each from its own copy of the model (``source``: config, weights, seed).  One worker
    compiles in this process, on ``model``.
    """
    if workers == 1:
        _set_worker(model, *options)
        try:
            yield from map(_compile_stage, jobs)
        finally:
            _worker.clear()
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, context, _init_worker, (*source, *options)) as pool:
        futures = [pool.submit(_compile_stage, job) for job in jobs]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _dead(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, PermissionError):
        return False
    return False


def _recover_killed_build(out: Path) -> None:
    """Clean up after a build that was killed outright (SIGKILL, power loss).

    Its staging directory is removed; if it died between the two renames of
    ``_replace_directory``, the previous artifacts are moved back to ``out``.
    """
    for path in out.parent.glob(f".{out.name}.building-*"):
        if _dead(path.name.rsplit(".building-", 1)[1].split("-")[0]):
            shutil.rmtree(path, ignore_errors=True)
    for path in out.parent.glob(f".{out.name}.old-*"):
        if _dead(path.name.rsplit(".old-", 1)[1]):
            if out.exists():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.rename(out)


def _replace_directory(new: Path, out: Path) -> None:
    # Rename-based swap: an interrupted build never leaves `out` half-written.
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    new.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
