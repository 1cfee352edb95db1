"""Build the compiled stages: ``python -m kokoro_ext.build --target llvm [options]``.

Compiles every stage (kokoro_ext.build.stages) once, for every length, and writes one library
per stage, the stage's weights (in the layout the library's ``main`` takes: the
checkpoint's parameters through the library's own weight transform, run here once and
stored once: kokoro_ext.run.weights), the config, the default voice and a manifest to
``--out``.  The weights are the real Kokoro-82M v1.0 that ``python -m kokoro_ext.build.fetch``
downloaded, unless ``--weights FILE`` or ``--random-weights`` says otherwise.
``--weights-only`` re-points an existing build at other weights of the same architecture
without compiling (the built libraries transform them).  The directory is replaced only
when the whole build succeeded.
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
from kokoro_ext.build import environment
from kokoro_ext.run import artifacts, cache
from kokoro_ext.run.cache import DEFAULT_VOICE
from kokoro_ext.build.compiler import Parameter, compile_stage, transform_weights
from kokoro_ext.build.frontend import LSTM_BACKENDS
from kokoro_ext.build.model import build_model, load_config, load_voice, random_voice, resolve_voice
from kokoro_ext.run.voices import is_voice_name
from kokoro_ext.build.stages import MAX_FRAMES, MAX_TOKENS, STAGES, Geometry
from kokoro_ext.build.target import instruction_features, parse_target, target_features
from kokoro_ext.run.runner import load_library
from kokoro_ext.run.weights import entries_from_json, write_weights

DEFAULT_OUT = Path("artifacts")


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
        "--config", type=Path, help="Kokoro config.json (default: the shipped Kokoro-82M)"
    )
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument(
        "--weights",
        type=Path,
        help="kokoro-v1_0.pth checkpoint or kokoro-v1.0 ONNX export (.onnx, int8 or float32); "
        "default: the Kokoro-82M v1.0 int8 model `python -m kokoro_ext.build.fetch` downloaded",
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
        "--weights-only",
        action="store_true",
        help="keep the compiled stages of --out and store the weights of --weights (or the "
        "default model) for them: another Kokoro v1.0 checkpoint without compiling",
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


def resolve_weights(args: argparse.Namespace) -> Path | None:
    """The weights file of a build, None for random weights: without --weights the fetched
    Kokoro-82M model (ValueError saying how to fetch it if it is missing)."""
    if args.random_weights:
        return None
    return args.weights if args.weights is not None else cache.default_weights()


def resolve_sources(args: argparse.Namespace) -> tuple[Path | None, Path | None, str | None]:
    """(weights file, voice file, voice name) of a build: None for random ones.

    Weights as ``resolve_weights``; without --voice the fetched af_heart, or a random voice
    with --random-weights.
    """
    weights = resolve_weights(args)
    spec = args.voice
    if spec is None and weights is None:
        return None, None, None
    spec = spec or DEFAULT_VOICE
    name = spec if is_voice_name(spec) and not Path(spec).is_file() else None
    return weights, resolve_voice(spec), name


def build(args: argparse.Namespace, log=print) -> Path:
    """Run the build described by ``args``; returns the artifacts directory."""
    if args.weights_only:
        return rebuild_weights(args, log)
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
    jobs = sorted(STAGES, key=_COST.__getitem__, reverse=True)
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
            stages[entry["stage"]] = entry
            took = " ".join(f"{k} {v:.1f}s" for k, v in entry["seconds"].items())
            size = entry["weights"]["bytes"] / 1e6
            log(
                f"[{i}/{len(jobs)}] {entry['stage']}: {took}, {entry['ir_lines']} IR lines, "
                f"{size:.1f} MB of weights"
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
                "limits": {"tokens": MAX_TOKENS, "frames": MAX_FRAMES},
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


def rebuild_weights(args: argparse.Namespace, log=print) -> Path:
    """``--weights-only``: store other weights for the compiled stages of ``args.out``.

    The libraries stay: they take any weights of the build's architecture (its config).
    Each library's own weight transform turns the checkpoint's parameters, in the order
    the manifest records, into the layout its ``main`` takes.
    """
    out = args.out.resolve()
    manifest = artifacts.read_manifest(out)
    config = json.loads((out / artifacts.CONFIG).read_text())
    weights = resolve_weights(args)  # the build's voice stays
    log(f"weights: {weights or f'random (seed {args.seed})'} for the stages in {out}")
    model = build_model(config, weights=weights, seed=args.seed)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.weights-", dir=out.parent))
    try:
        for name, entry in manifest["stages"].items():
            arrays = _checkpoint_parameters(name, entry, model, out)
            # the library's code runs on them: it must be the one the manifest lists
            artifacts.verify(out, manifest, [entry["file"]])
            transformed = transform_weights(load_library(out / entry["file"]), arrays)
            stored = entries_from_json(entry["weights"]["tensors"])
            layout = [(tuple(a.shape), str(a.dtype)) for a in transformed]
            if layout != [(e.shape, e.dtype) for e in stored]:
                raise ValueError(
                    f"the weight transform of {out / entry['file']} gives arrays other than "
                    f"{artifacts.MANIFEST} records for {name}; build it from scratch instead"
                )
            entry["weights"] = _write_stage_weights(staging, name, transformed)
        manifest["weights"] = _source(weights, args.seed)
        for name, entry in manifest["stages"].items():
            os.replace(staging / entry["weights"]["file"], out / entry["weights"]["file"])
        artifacts.write_manifest(out, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"stored the new weights of {len(manifest['stages'])} stages in {out}")
    return out


def _checkpoint_parameters(name: str, entry: dict, model, out: Path) -> list[np.ndarray]:
    """The parameters of ``model``'s stage ``name`` that the library of ``entry`` takes, in
    its order; ValueError naming one it lacks or that has another shape."""
    module = dict(STAGES[name].module(model).named_parameters())
    parameters = [Parameter.from_json(p) for p in entry["parameters"]]
    missing = [p.name for p in parameters if p.name not in module]
    if missing:
        raise ValueError(
            f"the {name} stage of {out} takes parameters this model lacks "
            f"({', '.join(missing[:3])}): the checkpoint is not Kokoro v1.0 with "
            "this build's config; build it from scratch instead"
        )
    arrays = [module[p.name].detach().numpy() for p in parameters]
    for p, a in zip(parameters, arrays):
        if Parameter.of(p.name, a) != p:
            raise ValueError(
                f"parameter {p.name} of the {name} stage is {a.dtype}{list(a.shape)} in "
                f"the checkpoint but {p.dtype}{list(p.shape)} in {out}: another "
                "architecture; build it from scratch instead"
            )
    return arrays


def _write_stage_weights(directory: Path, stage: str, arrays: list) -> dict[str, Any]:
    file = artifacts.weights_file(stage)
    entries = write_weights(directory / file, arrays)
    return {
        "file": file,
        "sha256": artifacts.sha256(directory / file),
        "bytes": (directory / file).stat().st_size,
        "tensors": [e.to_json() for e in entries],
    }


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


def _compile_stage(name: str) -> dict[str, Any]:
    compiled = compile_stage(
        STAGES[name],
        _worker["model"],
        _worker["target"],
        _worker["lstm_backend"],
        native_dense=_worker["native_dense"],
    )
    file = artifacts.stage_file(name)
    path = _worker["staging"] / file
    compiled.executable.export_library(str(path))
    # the weights as the library that ships computes with them, by its own transform
    start = time.perf_counter()
    weights = transform_weights(load_library(path), compiled.weights)
    compiled.seconds["transform"] = time.perf_counter() - start
    return {
        "stage": name,
        "file": file,
        "sha256": artifacts.sha256(path),
        "weights": _write_stage_weights(_worker["staging"], name, weights),
        "parameters": [p.to_json() for p in compiled.parameters],
        "ir_lines": compiled.ir_lines,
        "seconds": {k: round(v, 2) for k, v in compiled.seconds.items()},
    }


def _run_jobs(jobs, model, source, options, workers: int):
    """Compile every stage in ``jobs``, yielding manifest entries as they finish.

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
