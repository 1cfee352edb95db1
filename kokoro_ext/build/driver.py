"""The build, given its ``BuildOptions``: compile the stages, store their weights, write
the manifest, swap the directory in.

Every stage (kokoro_ext.build.stages) compiles once, for every length, in a pool of
processes; each writes its library and its weights (the checkpoint's parameters through
the library's own weight transform: kokoro_ext.run.weights) to a staging directory, and
the manifest (kokoro_ext.run.manifest) is written last.  The output directory is
replaced only when the whole build succeeded.  ``--weights-only`` re-points an existing
build at other weights of the same architecture without compiling.

The terminal gets a line per stage; what the compiler and torch say on the way (Python
warnings, TVM's C++ log lines on stderr) goes to ``build.log`` in the output directory,
or beside it when the build fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from torch import nn

import kokoro_ext
from kokoro_ext.build import environment
from kokoro_ext.build.backend import FLAGS, BuildTarget, Choices, resolve
from kokoro_ext.build.compiler import compile_stage, transform_weights
from kokoro_ext.build.frontend import LstmBackend
from kokoro_ext.build.model import build_model, load_config, load_voice, random_voice, resolve_voice
from kokoro_ext.build.precision import Precision, Products, WeightDtype
from kokoro_ext.build.stages import MAX_FRAMES, MAX_TOKENS, STAGES, Geometry
from kokoro_ext.run import artifacts, cache
from kokoro_ext.run.cache import DEFAULT_VOICE
from kokoro_ext.run.manifest import Limits, Manifest, Source, StageEntry, TensorSpec, WeightsFile
from kokoro_ext.run.runner import load_library
from kokoro_ext.run.voices import is_voice_name
from kokoro_ext.run.weights import write_weights
from kokoro_ext.run.wire import WireFormat, write_wire_weights

DEFAULT_OUT = Path("artifacts")
Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    """What to build, from what, and where: the flags of ``python -m kokoro_ext.build``."""

    out: Path = DEFAULT_OUT
    target: str = "llvm"  # a --target: kokoro_ext.build.backend.resolve reads it
    config: Path | None = None  # None: the shipped Kokoro-82M config
    weights: Path | None = None  # None: the fetched Kokoro-82M (or random_weights)
    random_weights: bool = False
    voice: str | None = None  # a name or pack file; None: af_heart (random with random_weights)
    weights_only: bool = False
    seed: int = 0  # of the random weights and voice
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    # what the target decides (BuildTarget.choose), None: the target's default; a value
    # the target cannot honour is refused, naming the option and the target
    lstm_backend: LstmBackend | None = None
    dense: Literal["native", "tvm"] | None = None
    weight_dtype: WeightDtype | None = None  # which weights are stored as int8 (build.precision)
    precision: Precision | None = None  # what layers on int8 weights multiply in (build.precision)
    wire: WireFormat | None = None  # a browser build's large weights on the wire (run.wire)


def resolve_weights(options: BuildOptions) -> Path | None:
    """The weights file of a build, None for random weights: without ``weights`` the fetched
    Kokoro-82M model (ValueError saying how to fetch it if it is missing)."""
    if options.random_weights:
        return None
    return options.weights if options.weights is not None else cache.default_weights()


def resolve_sources(options: BuildOptions) -> tuple[Path | None, Path | None, str | None]:
    """(weights file, voice file, voice name) of a build: None for random ones.

    Weights as ``resolve_weights``; without ``voice`` the fetched af_heart, or a random
    voice with random weights.
    """
    weights = resolve_weights(options)
    spec = options.voice
    if spec is None and weights is None:
        return None, None, None
    spec = spec or DEFAULT_VOICE
    name = spec if is_voice_name(spec) and not Path(spec).is_file() else None
    return weights, resolve_voice(spec), name


def build(options: BuildOptions, log: Log = print) -> Path:
    """Run the build ``options`` describe; returns the artifacts directory."""
    if options.weights_only:
        return rebuild_weights(options, log)
    target = resolve(options.target)
    # an option the target cannot take, or its missing toolchain, fails here, before
    # minutes of compiling
    choices = target.choose(**{option: getattr(options, option) for option in FLAGS})
    chosen = target.products(choices)
    target.prepare()
    config = load_config(options.config)
    weights, voice_file, voice_name = resolve_sources(options)
    if weights is None:
        log(
            "note: --random-weights: building Kokoro with deterministic RANDOM weights "
            f"(seed {options.seed}); the result is noise, not speech"
        )
    else:
        log(f"weights: {weights}")
    log(
        f"default voice: {voice_name or voice_file or f'random (seed {options.seed})'}; "
        f"target: {json.dumps(dict(target.target))}; products: {chosen}"
    )
    out = options.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    _recover_killed_build(out)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{out.name}.building-{os.getpid()}-", dir=out.parent)
    )
    started = time.perf_counter()
    # Biggest first, so that the last job to finish is a short one.
    jobs = sorted(STAGES, key=_COST.__getitem__, reverse=True)
    try:
        with _kept_log(staging / artifacts.LOG, _failed_log(out)), _quiet(staging / artifacts.LOG):
            model = _model(options)
            voice = load_voice(voice_file) if voice_file else random_voice(options.seed)
            stages = {}
            compiled = _compile_all(options, target, choices, chosen, staging, jobs)
            for i, (name, entry) in enumerate(compiled, 1):
                stages[name] = entry
                log(
                    f"[{i}/{len(jobs)}] {name}: {sum(entry.seconds.values()):.1f} s, "
                    f"{entry.weights.bytes / 1e6:.1f} MB of weights"
                )
            stages = target.link_stages(staging, stages)
            (staging / artifacts.CONFIG).write_text(
                json.dumps(config, indent=2, ensure_ascii=False)
            )
            np.save(staging / artifacts.VOICE, voice.numpy())
            target.add_files(staging)
            requires = target.add_libraries(staging)
            env = environment.describe()
            manifest = Manifest(
                kokoro_ext=kokoro_ext.__version__,
                tvm=env.tvm_version,
                patches={p.patch: p.state for p in env.patches},
                target=dict(target.target),
                cpu_features=target.cpu_features(),
                lstm_backend=choices.lstm_backend,
                weight_dtype=choices.weight_dtype,
                precision=chosen if _stores_int8(stages.values()) else "fp32",
                dense=choices.dense,
                limits=Limits(tokens=MAX_TOKENS, frames=target.max_frames or MAX_FRAMES),
                geometry=Geometry.from_model(model),
                config_sha256=artifacts.sha256(staging / artifacts.CONFIG),
                weights=_source(weights, options.seed),
                voice=_source(voice_file, options.seed, voice_name),
                voice_sha256=artifacts.sha256(staging / artifacts.VOICE),
                stages={name: stages[name] for name in STAGES},
                build_seconds=round(time.perf_counter() - started, 1),
                requires=requires,
            )
            artifacts.write_manifest(staging, manifest)
        _replace_directory(staging, out)
        _failed_log(out).unlink(missing_ok=True)  # a failed build's, now out of date
    finally:
        _model.cache_clear()
        shutil.rmtree(staging, ignore_errors=True)
    log(
        f"wrote {len(jobs)} compiled stages to {out} in {time.perf_counter() - started:.0f} s; "
        f"the compiler's messages are in {out / artifacts.LOG}"
    )
    return out


def rebuild_weights(options: BuildOptions, log: Log = print) -> Path:
    """``--weights-only``: store other weights for the compiled stages of ``options.out``.

    The libraries stay: they take any weights of the build's architecture (its config).
    Each library's own weight transform turns the checkpoint's parameters, in the order
    the manifest records, into the layout its ``main`` takes.
    """
    out = options.out.resolve()
    manifest = artifacts.read_manifest(out)
    resolve(dict(manifest.target)).refuse_weights_only(out)
    config = json.loads((out / artifacts.CONFIG).read_text())
    weights = resolve_weights(options)  # the build's voice stays
    log(f"weights: {weights or f'random (seed {options.seed})'} for the stages in {out}")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.weights-", dir=out.parent))
    try:
        if (out / artifacts.LOG).is_file():  # the log goes on; the old file may be shared
            shutil.copyfile(out / artifacts.LOG, staging / artifacts.LOG)
        with _kept_log(staging / artifacts.LOG, _failed_log(out)), _quiet(staging / artifacts.LOG):
            model = build_model(config, weights=weights, seed=options.seed)
            stages = {}
            for name, entry in manifest.stages.items():
                arrays = _checkpoint_parameters(name, entry, model, out)
                # the library's code runs on them: it must be the one the manifest lists
                artifacts.verify(out, manifest, [entry.file])
                transformed = transform_weights(load_library(out / entry.file), arrays)
                layout = [(tuple(a.shape), str(a.dtype)) for a in transformed]
                if layout != [(e.shape, e.dtype) for e in entry.weights.tensors]:
                    raise ValueError(
                        f"the weight transform of {out / entry.file} gives arrays other "
                        f"than {artifacts.MANIFEST} records for {name}; build it from "
                        "scratch instead"
                    )
                # a CPU build's arrays as they are (the targets with a wire refuse above)
                stages[name] = dataclasses.replace(
                    entry, weights=_write_stage_weights(staging, name, transformed, None)
                )
        manifest = dataclasses.replace(
            manifest, weights=_source(weights, options.seed), stages=stages
        )
        for entry in stages.values():
            os.replace(staging / entry.weights.file, out / entry.weights.file)
        os.replace(staging / artifacts.LOG, out / artifacts.LOG)
        artifacts.write_manifest(out, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"stored the new weights of {len(manifest.stages)} stages in {out}")
    return out


def _source(path: Path | None, seed: int, name: str | None = None) -> Source:
    if path is None:
        return Source(random_seed=seed)
    return Source(path=str(path), sha256=artifacts.sha256(path), name=name)


def _checkpoint_parameters(
    name: str, entry: StageEntry, model: nn.Module, out: Path
) -> list[np.ndarray]:
    """The parameters of ``model``'s stage ``name`` that the library of ``entry`` takes, in
    its order; ValueError naming one it lacks or that has another shape."""
    module = dict(STAGES[name].module(model).named_parameters())
    missing = [p.name for p in entry.parameters if p.name not in module]
    if missing:
        raise ValueError(
            f"the {name} stage of {out} takes parameters this model lacks "
            f"({', '.join(missing[:3])}): the checkpoint is not Kokoro v1.0 with "
            "this build's config; build it from scratch instead"
        )
    arrays = [module[p.name].detach().numpy() for p in entry.parameters]
    for p, a in zip(entry.parameters, arrays):
        if _parameter(p.name, a) != p:
            raise ValueError(
                f"parameter {p.name} of the {name} stage is {a.dtype}{list(a.shape)} in "
                f"the checkpoint but {p.dtype}{list(p.shape)} in {out}: another "
                "architecture; build it from scratch instead"
            )
    return arrays


def _parameter(name: str, array: np.ndarray) -> TensorSpec:
    return TensorSpec(name, str(array.dtype), tuple(int(d) for d in array.shape))


def _write_stage_weights(
    directory: Path, stage: str, arrays: list, wire: WireFormat | None
) -> WeightsFile:
    file = artifacts.weights_file(stage)
    path = directory / file
    if wire is None:
        entries = write_weights(path, arrays)
    else:
        entries = write_wire_weights(path, arrays, wire)
    return WeightsFile(
        file=file,
        sha256=artifacts.sha256(directory / file),
        bytes=(directory / file).stat().st_size,
        tensors=tuple(entries),
    )


# -- compiling the stages ---------------------------------------------------------------

# Relative compile cost of a stage, to start the long jobs first.
_COST = {"decoder": 3, "text": 2, "prosody": 1, "source": 0}


def _stores_int8(entries: Iterable[StageEntry]) -> bool:
    """Whether any of the stages stores int8 weights (the low precisions multiply those)."""
    return any(t.dtype == "int8" for e in entries for t in e.weights.tensors)


@functools.cache
def _model(options: BuildOptions) -> nn.Module:
    """The model ``options`` describe, built once per process: a worker compiles several
    stages of it, and a build of one job compiles on the model the build itself reads."""
    config = load_config(options.config)
    return build_model(config, weights=resolve_weights(options), seed=options.seed)


def _compile_stage(
    options: BuildOptions, target: BuildTarget, choices: Choices, chosen: Products,
    staging: Path, name: str,
) -> tuple[str, StageEntry]:
    """Compile stage ``name`` for ``target`` into ``staging``: its library and its
    weights; its entry."""  # fmt: skip
    compiled = compile_stage(
        STAGES[name], _model(options), target, choices, target.layer_products(chosen, name)
    )
    file = artifacts.stage_file(name, target.library_suffix)
    path = staging / file
    compiled.executable.export_library(
        str(path), fcompile=target.fcompile(), fpack_imports=target.fpack_imports()
    )
    # the weights as the library that ships computes with them, by its own transform (a
    # cross build's, compiled for this machine: the library does not run here)
    start = time.perf_counter()
    library = compiled.transform if compiled.transform is not None else load_library(path)
    weights = transform_weights(library, compiled.weights)
    compiled.seconds["transform"] = time.perf_counter() - start
    return name, StageEntry(
        file=file,
        sha256=artifacts.sha256(path),
        weights=_write_stage_weights(staging, name, weights, choices.wire),
        parameters=tuple(TensorSpec(p.name, p.dtype, p.shape) for p in compiled.parameters),
        signature=compiled.signature,
        ir_lines=compiled.ir_lines,
        seconds={k: round(v, 2) for k, v in compiled.seconds.items()},
    )


def _compile_all(
    options: BuildOptions, target: BuildTarget, choices: Choices, chosen: Products,
    staging: Path, jobs: Sequence[str],
) -> Iterator[tuple[str, StageEntry]]:
    """Compile every stage in ``jobs``, yielding (name, entry) as each finishes.

    Stages compile independently and TVM's compile is single-threaded, so ``options.jobs``
    processes (spawned: TVM and torch do not survive fork) build that many at a time,
    each from its own model of ``options``.  One job compiles in this process.
    """
    workers = max(1, min(options.jobs, len(jobs)))
    if workers == 1:
        for name in jobs:
            yield _compile_stage(options, target, choices, chosen, staging, name)
        return
    context = multiprocessing.get_context("spawn")
    log = staging / artifacts.LOG
    with ProcessPoolExecutor(workers, context, _start_worker, (log,)) as pool:
        futures = [
            pool.submit(_compile_stage, options, target, choices, chosen, staging, name)
            for name in jobs
        ]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _start_worker(log: Path) -> None:
    import torch

    torch.set_num_threads(1)  # export only traces; the cores belong to the other workers
    # for the worker's life: TVM's and torch's C++ logging write to fd 2, Python's
    # warnings to sys.stderr, which is fd 2 in a spawned process
    os.close(_stderr_to(log))


# -- the build's messages ---------------------------------------------------------------


def _stderr_to(log: Path) -> int:
    """Point file descriptor 2 at ``log`` (appended to); returns a copy of the old one."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """This process's stderr and Python warnings go to ``log`` meanwhile.

    At the descriptor, so that what C++ writes is caught too; ``warnings`` explicitly,
    as sys.stderr need not be descriptor 2 (pytest replaces it).
    """
    saved = _stderr_to(log)
    try:
        with open(log, "a") as file, warnings.catch_warnings():

            def show(message, category, filename, lineno, f=None, line=None):
                file.write(warnings.formatwarning(message, category, filename, lineno, line))
                file.flush()

            warnings.showwarning = show
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _failed_log(out: Path) -> Path:
    return out.with_name(f"{out.name}.failed-{artifacts.LOG}")


@contextlib.contextmanager
def _kept_log(log: Path, kept: Path) -> Iterator[None]:
    """If the block fails, append its traceback to ``log``, move ``log`` to ``kept`` (the
    staging directory is about to go) and name it in the error."""
    try:
        yield
    except Exception as err:
        with open(log, "a") as file:
            file.write(traceback.format_exc())
        os.replace(log, kept)
        err.add_note(f"the build's log: {kept}")
        raise


# -- the output directory ---------------------------------------------------------------


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
