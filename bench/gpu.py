"""A CUDA build on an NVIDIA GPU against PyTorch float32 on the same GPU and weights.

Made for a GPU machine without network that has Python (3.12 there), torch (CUDA),
numpy and the CUDA runtime wheels, but neither TVM, nor kokoro, nor transformers, and
that takes at most 64 MiB with a call (the bundle and the rest of the repository's
working tree together): build here, carry, run one command.

1. Here (the build machine), the real config with random weights (their values do not
   travel: see Weights):

     python -m kokoro_ext.build --target cuda-sm90 --random-weights --out artifacts-cuda-sm90
     python bench/gpu.py prepare --artifacts artifacts-cuda-sm90 --out gpu-bundle

   ``prepare`` writes ``gpu-bundle/`` (19 MiB for the real config's sm_90 build; it
   prints the size, with the repository's other files, and refuses past 64 MiB):

   * this checkout's ``kokoro_ext`` (Python) with, in ``kokoro_ext/lib`` as a runtime
     wheel lays them out, TVM's runtime libraries (``libtvm_runtime.so``,
     ``libtvm_runtime_cuda.so``, the version record) and the native kernel library built
     for portable x86-64 levels (``KERNEL_VARIANTS``: the machine there is another CPU
     than this one), with OpenBLAS (scipy-openblas32), which it links: the host steps
     draw the source noise with it (kokoro_ext.run.noise);
   * the tvm-ffi package, with the compiled core of every Python it was given besides
     this one's (``--tvm-ffi-wheel``; by default prepare downloads the cp312 wheel of
     the installed version with pip, as ``pip download --no-deps --only-binary=:all:
     --python-version 3.12 --platform manylinux_2_28_x86_64 apache-tvm-ffi==VERSION``);
   * the build without its weights files (the libraries, manifest, config and voice);
   * ``transforms/<stage>.so``: each stage's weight transform (``main_transform_params``:
     the checkpoint's parameters to the layout ``main`` takes) compiled alone for the
     x86-64 host, with the VM's own allocator (it needs TVM's runtime library alone):
     a CUDA build's libraries keep no transform (kokoro_ext.build.compiler
     ``compile_host_transform``).  prepare runs each on the build's own model and checks
     that it gives exactly the weights the build stored;
   * ``kokoro/``: kokoro 0.9.4's model code (``model.py``, ``modules.py``,
     ``istftnet.py``, ``custom_stft.py``: about 40 kB, Apache-2.0, copied from the
     installed package with its LICENSE) with its imports of transformers' ALBERT pointed
     at kokoro_ext.tools.albert (the same modules in torch alone), of loguru at logging,
     and of huggingface_hub and attrs removed: the PyTorch reference without
     transformers (129 MB installed) or kokoro's other dependencies;
   * this script, and the phonemes of bench/user.py's texts cut in chunks as
     ``Synthesizer.stream`` cuts them (``inputs.json``: no G2P there).

   A CPU build (``--target llvm``) can be prepared too, for ``run --dry-run``: its
   libraries keep their own transform and call the native kernels.

2. There (``gpu-bundle`` an ignored folder of the repository's root, named in the
   device call's ``carry``):

     cd gpu-bundle && python3 gpu.py run --repeat 5 --out $OUT/gpu.json

   * Weights: the model is built from the bundle's config with weights drawn from
     ``--seed`` (default 0) on the CPU (kokoro_ext.build.model.build_model: PyTorch's
     default initialization after ``torch.manual_seed``; ALBERT's as transformers
     initializes it), the same values for both engines.  Each stage's parameters go
     through its transform (``transforms/``, or a CPU build's own library) into
     ``artifacts/<stage>.weights``, and the manifest is rewritten to match them.
     Durations (garbage but the same for both engines, and bounded): the duration
     head's bias is set to -2.75 and each row of its weight scaled to an L1 norm of at
     most 1; its input is an LSTM's output, in (-1, 1), so every logit lies in
     [-3.75, -1.75] and a token lasts round(50 sigmoid(logit)), 1 to 7 frames (3 on
     the seed-0 model, whose LSTM output is small: Kokoro speaks about 3): at most
     7 x 512 = 3584 frames a chunk, under the build's limit (8192), which run checks
     before anything runs.
   * the device: name, architecture, driver check (kokoro_ext.run.cuda refuses a machine
     the build does not run on, naming why);
   * each stage against PyTorch float32 on the same GPU (and float64), and the waveform
     against kokoro's own forward on the same noise (on the CPU): kokoro_ext.tools.
     validate's table and its float32 bound, on the first chunk of the first text;
   * a CUDA build's device steps (``steps_check``): its kernels against their numpy
     references and their times beside the host steps', one chunk on the device
     against the host path on the same noise;
   * warm times per text (median of ``--repeat``): the build's stages and PyTorch's
     stage modules on the GPU (eager), chunk by chunk through the same host steps
     (kokoro_ext.run.pipeline.synthesize_ids), a CUDA build beside that with its device
     steps (kokoro_ext.run.resident: the durations and audio the only downloads), and
     the time to the first chunk;
   * device memory: what the CUDA driver reports in use after the runs (both engines'
     weights and pools), and torch's own peak.

``run --dry-run`` runs the same steps on the CPU (a CPU build's bundle, torch on the
CPU, first text only): a check of the script where no GPU is.  tests/test_gpu_bundle.py
prepares the small config's CPU build and runs it so in a process that sees only the
bundle, torch and numpy.

Real weights (``prepare --real-weights [ONNX]``, default the fetched
kokoro-v1.0.int8.onnx; tests/test_gpu_weights.py):

* Here, the export is imported into the builds' config's KModel
  (kokoro_ext.build.model.onnx_import) and each state dict tensor kept in the least
  that gives it back bit for bit with numpy alone (compact_state): the int8 weights as
  their codes (``q - zero_point``, in the state's layout) and float32 scales
  (onnx_import.quantized_codes, checked element by element), a tensor of one repeated
  value as that value, float16 where exact, else float32; deflated in ``.npz`` parts.
  The parts are as many as the device calls that carry them (plan_parts): every call
  carries the repository's tracked files, the last the bundle and its own part, the
  others only theirs, each under 64 MiB, measured on the files written.  They go to
  ``gpu-weights/<n>/part-<n>.npz``; prepare prints each call's ``carry`` and command:
  the calls before the last copy their part to DEVICE_PARTS (``/tmp``, kept while the
  machine is warm), the last runs ``gpu.py run --weights real --parts DEVICE_PARTS
  ../gpu-weights/<n>``, which refuses, naming the call to repeat, if a part is missing.
  The bundle also gets bench/quality.py's two sets (24 plain sentences and 16 written
  ones) as its engines get them: the offline G2P's phonemes, the spoken form the WER
  counts against, the voice's rows (af_heart).
* There, the state dict is rebuilt from the parts (numpy, then torch) and goes through
  the builds' transforms as the random weights do; then, before the other checks, each
  build and kokoro's KModel on the GPU speak the quality sets (seed 0): ``audio-<engine>.npz``
  beside ``--out``, 16-bit PCM at 24 kHz per sentence with an index.
* Here again, ``score DIR`` transcribes them with pocketsphinx (bench/quality.py's
  Recognizer) and prints each engine's WER per set against the CPU float32 build's in
  bench/results/quality*.json on the same sentences: pass within 0.01.  Writes
  bench/results/gpu-quality.{txt,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: what a device call carries at most: the bundle and the rest of the working tree
CARRY_LIMIT = 64 * 2**20
#: the native kernel library's variants a bundle carries (kokoro_ext.run.native.VARIANTS):
#: x86-64-v3 for the GPU machines' Xeons, x86-64 for any other
KERNEL_VARIANTS = ("avx2", "baseline")
#: the bundle's folders: the builds (each in its own, by its folder's name here), their
#: host-compiled weight transforms (``transforms/<build>/<stage>.so``)
BUILDS, TRANSFORMS = "builds", "transforms"
#: a real model's weights (``prepare --real-weights``): ``<n>/part-<n>.npz``, one folder
#: per device call; the calls before the last copy theirs to DEVICE_PARTS, the last
#: carries its own with the bundle (see Real weights)
WEIGHTS_DIR, PART_FORMAT = Path("gpu-weights"), 1
DEVICE_PARTS = "/tmp/kokoro-weights"
#: what a call's size is kept under CARRY_LIMIT by (the zip members' headers, the tool's own)
CARRY_MARGIN = 2 * 2**20
#: what comes back from a call: at most 8 files of at most 16 MiB each
RETURN_FILES, RETURN_LIMIT = 8, 16 * 2**20
#: bench/quality.py's sets as the bundle carries them (phonemes made here, no G2P there),
#: the voice's rows, and the engines' audio there: ``audio-<engine>.npz``
QUALITY_INPUTS, QUALITY_VOICE, AUDIO_PREFIX = "quality.json", "quality-voice.npy", "audio-"
#: score: a GPU engine passes where its WER is within this of the CPU float32 build's
WER_TOLERANCE = 0.01
#: score's baseline: bench/quality.py's results per set, the engine of its --artifacts
#: build (bench/results' were made with the float32-products CPU build)
BASELINES, BASELINE_ENGINE = {"plain": "quality.json", "written": "quality-written.json"}, "tvm"
#: the duration head of the random model: its bias, and the L1 norm of each weight row at
#: most (see the docstring: 1 to 7 frames a token, 3 where the LSTM's output is small)
DURATION_BIAS, DURATION_ROW_L1 = -2.75, 1.0
#: kokoro's model code the reference needs, and the lines of it that change: imports of
#: what the GPU machine lacks (transformers, huggingface_hub, loguru, attrs)
KOKORO_FILES = {
    "model.py": [
        ("from huggingface_hub import hf_hub_download\n", "hf_hub_download = None  # bundle: no hub\n"),
        ("from loguru import logger\n", "import logging\nlogger = logging.getLogger('kokoro')\n"),
        ("from transformers import AlbertConfig\n", "from kokoro_ext.tools.albert import AlbertConfig\n"),
    ],
    "modules.py": [
        ("from transformers import AlbertModel\n", "from kokoro_ext.tools.albert import AlbertModel\n"),
    ],
    "istftnet.py": [],
    "custom_stft.py": [("from attr import attr\n", "")],
}  # fmt: skip


# -- here: the bundle -------------------------------------------------------------------


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _repository_size(root: Path, bundle: Path, which: str) -> int | None:
    """Bytes of the files besides ``bundle`` that a device call carries from the checkout
    at ``root``: ``which`` "tracked", or "untracked" (those git does not ignore, which a
    call carries too); None outside a git checkout."""
    flags = ["--cached"] if which == "tracked" else ["--others", "--exclude-standard"]
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", *flags],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    files = (root / n for n in listed.decode().split("\0") if n)
    inside = bundle.resolve()
    return sum(
        p.stat().st_size for p in files
        if p.is_file() and inside not in p.resolve().parents
    )  # fmt: skip


def vendor_kokoro(out: Path) -> None:
    """kokoro's model code in ``out/kokoro`` without transformers (module doc)."""
    spec = importlib.util.find_spec("kokoro")
    if spec is None or spec.origin is None:
        raise SystemExit("prepare copies kokoro's model code: install kokoro (0.9.4) here")
    source = Path(spec.origin).parent
    target = out / "kokoro"
    target.mkdir(parents=True, exist_ok=True)
    version = importlib.metadata.version("kokoro")
    for name, rewrites in KOKORO_FILES.items():
        text = (source / name).read_text()
        for old, new in rewrites:
            if old not in text:
                raise SystemExit(f"kokoro {version}'s {name} has no line {old.strip()!r}: "
                                 "bench/gpu.py's KOKORO_FILES are for kokoro 0.9.4")  # fmt: skip
            text = text.replace(old, new)
        (target / name).write_text(text)
    (target / "__init__.py").write_text(
        f'"""kokoro {version}\'s model code, its imports of transformers, huggingface_hub, '
        'loguru and attrs replaced (bench/gpu.py)."""\n\n'
        f"__version__ = {version!r}\n\nfrom .model import KModel\n"
    )
    dist = importlib.metadata.distribution("kokoro")
    for file in dist.files or []:
        if Path(str(file)).name.upper().startswith("LICENSE"):
            shutil.copy2(Path(dist.locate_file(file)), target / "LICENSE")


def copy_tvm_ffi(out: Path, wheels: list[Path], python: str) -> None:
    """The tvm-ffi package this process runs, in ``out/tvm_ffi``, with the compiled core
    of each wheel in ``wheels`` beside its own (one package for several Pythons); without
    wheels, the one for ``python`` (``3.12``) downloaded by pip, when it is not this
    Python."""
    package = Path(importlib.util.find_spec("tvm_ffi").origin).parent
    shutil.copytree(package, out / "tvm_ffi", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "3rdparty", "include", "src"))  # fmt: skip
    version = importlib.metadata.version("apache-tvm-ffi")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not wheels and python != here:
        cache = Path.home() / ".cache" / "kokoro-tvm-ext" / "wheels"
        cache.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
                   "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                   "-d", str(cache), f"apache-tvm-ffi=={version}"]  # fmt: skip
        tag = f"cp{python.replace('.', '')}"
        found = sorted(cache.glob(f"apache_tvm_ffi-{version}-{tag}-*.whl"))
        if not found:
            subprocess.run(command, check=True)
            found = sorted(cache.glob(f"apache_tvm_ffi-{version}-{tag}-*.whl"))
        if not found:
            raise SystemExit(f"pip gave no {tag} wheel of apache-tvm-ffi {version}: "
                             "pass one with --tvm-ffi-wheel")  # fmt: skip
        wheels = found[:1]
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            wheel_version = next(
                (n.split("/")[0].removesuffix(".dist-info").split("-")[1]
                 for n in names if ".dist-info/" in n), None,
            )  # fmt: skip
            if wheel_version != version:
                raise SystemExit(f"{wheel} is tvm-ffi {wheel_version}, this Python's {version}")
            cores = [n for n in names if n.startswith("tvm_ffi/core.") and n.endswith(".so")]
            for name in cores:
                (out / name).write_bytes(z.read(name))
            shared = "tvm_ffi/lib/libtvm_ffi.so"
            if z.read(shared) != (package / "lib" / "libtvm_ffi.so").read_bytes():
                raise SystemExit(f"{wheel}'s libtvm_ffi.so differs from this Python's: "
                                 "one package cannot serve both")  # fmt: skip


def prepare(
    artifacts: Path | list[Path], out: Path, ffi_wheels: list[Path] | None = None,
    python: str = "3.12", log=print, real_weights: Path | None = None,
    weights_out: Path = WEIGHTS_DIR, carry_limit: int = CARRY_LIMIT,
) -> Path:  # fmt: skip
    """The bundle of the builds ``artifacts`` (one or several, of one config: timed side
    by side there) in ``out``; with ``real_weights`` (an int8 ONNX export), its weights
    in parts under ``weights_out`` (prepare_real_weights) and the quality sets'
    inputs in the bundle."""
    sys.path.insert(0, str(HERE))
    from user import TEXTS  # bench/user.py's texts

    from kokoro_ext.run import artifacts as files
    from kokoro_ext.run import native
    from kokoro_ext.run.cuda import RUNTIME_NAME
    from kokoro_ext.text.pipeline import Chunking, Progress, TextPipeline
    from kokoro_ext.tools.wheel import cached_kernels

    builds = [Path(a) for a in ([artifacts] if isinstance(artifacts, (str, Path)) else artifacts)]
    if len({b.name for b in builds}) != len(builds):
        raise SystemExit("the builds of a bundle are named by their folders: give each its own name")
    if len({(b / files.CONFIG).read_text() for b in builds}) != 1:
        raise SystemExit("the builds of a bundle must be of one config (one model is made there)")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    root = HERE.parent
    shutil.copytree(root / "kokoro_ext", out / "kokoro_ext",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.cpu.json"))  # fmt: skip
    lib = out / "kokoro_ext" / "lib"
    lib.mkdir(exist_ok=True)
    runtime = native.runtime_library()
    for name in (native.RUNTIME_NAME, RUNTIME_NAME):
        shutil.copy2(runtime.path.with_name(name), lib / name)
    (lib / native.RUNTIME_RECORD).write_text(json.dumps({"version": runtime.version}) + "\n")
    # the native kernels: a CPU build's stages and transform call them, and every build's
    # host steps draw the source noise with them (kokoro_ext.run.noise); the variants of a
    # runtime wheel, for portable x86-64 levels (the machine there is another CPU than
    # this one), each with its CPU record; the loader takes the best one that runs there
    for kernels in cached_kernels("x86_64", KERNEL_VARIANTS):
        shutil.copy2(kernels, lib / kernels.name)
        shutil.copy2(native.record_path(kernels), lib / native.record_path(kernels).name)
    openblas = native.openblas_library().parents[1]
    shutil.copytree(openblas, out / openblas.name,
                    ignore=shutil.ignore_patterns("__pycache__", "include", "*.a"))  # fmt: skip
    copy_tvm_ffi(out, list(ffi_wheels or []), python)
    vendor_kokoro(out)
    shutil.copy2(Path(__file__), out / "gpu.py")
    for build in builds:
        shutil.copytree(build, out / BUILDS / build.name,
                        ignore=shutil.ignore_patterns("*.weights", files.LOG))  # fmt: skip
        _host_transforms(build, out / TRANSFORMS / build.name, log)
    manifest = files.read_manifest(builds[0])

    pipeline = TextPipeline("a")
    limit = manifest.limits.tokens - 2
    inputs = {}
    for name, text in TEXTS.items():
        chunks = pipeline.run(text, chunking=Chunking(lambda _: limit, limit, Progress()))
        inputs[name] = [c.piece.phonemes for c in chunks.chunks]
    (out / "inputs.json").write_text(json.dumps(inputs, ensure_ascii=False, indent=1))
    if real_weights is not None:
        config = json.loads((builds[0] / files.CONFIG).read_text())
        quality_inputs(out, config["vocab"], manifest.limits.tokens)

    # the limit is checked on the bundle and the tracked files, which a clean checkout
    # has too; untracked files a user keeps are named, since a call carries them as well
    size = _tree_size(out)
    tracked = _repository_size(root, out, "tracked")
    total = size + (tracked or 0)
    log(f"wrote {out}: {size / 2**20:.1f} MiB"
        + (f"; with the repository's tracked files {total / 2**20:.1f} MiB" if tracked else "")
        + f" of the {carry_limit / 2**20:.0f} MiB a device call carries")  # fmt: skip
    if total > carry_limit:
        raise SystemExit(f"{out} does not fit a device call: {total / 2**20:.1f} MiB")
    untracked = _repository_size(root, out, "untracked")
    if untracked and total + untracked > carry_limit:
        log(f"warning: this checkout's untracked files that git does not ignore "
            f"({untracked / 2**20:.1f} MiB) would travel with a device call too and take it "
            f"over {carry_limit / 2**20:.0f} MiB: move them away or ignore them")  # fmt: skip
    if real_weights is not None:
        prepare_real_weights(Path(real_weights), config, weights_out, out, root, carry_limit, log)
    return out


def _host_transforms(artifacts: Path, out: Path, log=print) -> None:
    """A CUDA build's weight transforms, compiled for this host into ``out``; each checked
    on the build's own model against the weights the build stored.  Nothing for a CPU
    build (its libraries keep their own)."""
    import numpy as np

    from kokoro_ext.build.compiler import compile_host_transform
    from kokoro_ext.build.backend import CpuTarget, resolve
    from kokoro_ext.build.model import build_model
    from kokoro_ext.build.stages import STAGES
    from kokoro_ext.run import artifacts as files
    from kokoro_ext.run.manifest import TensorSpec
    from kokoro_ext.run.weights import load_weights

    manifest = files.read_manifest(artifacts)
    gpu = resolve(dict(manifest.target))
    if isinstance(gpu, CpuTarget):
        return
    if not gpu.is_cuda:
        raise SystemExit(f"{artifacts} is a {gpu.name} build: a bundle is for a CUDA or CPU one")
    config = json.loads((artifacts / files.CONFIG).read_text())
    source = manifest.weights
    model = build_model(config, weights=source.path, seed=source.random_seed or 0)
    out.mkdir(parents=True)
    for name, entry in manifest.stages.items():
        start = time.perf_counter()
        executable, parameters = compile_host_transform(STAGES[name], model, gpu)
        taken = tuple(TensorSpec(p.name, p.dtype, p.shape) for p in parameters)
        if taken != entry.parameters:
            raise SystemExit(f"the {name} transform compiled here takes other parameters "
                             f"than {artifacts / files.MANIFEST} records")  # fmt: skip
        if executable is None:
            continue
        path = out / f"{name}.so"
        executable.export_library(str(path))
        got = _transform(path, stage_parameters(name, entry, model), kernels=False)
        want = load_weights(artifacts / entry.weights.file, entry.weights.tensors)
        same = len(got) == len(want) and all(
            g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
            for g, w in zip(got, want)
        )
        if not same:
            raise SystemExit(f"the {name} transform compiled here does not give the "
                             f"weights {artifacts} stored")  # fmt: skip
        log(f"{artifacts.name} {name}: weight transform {path.stat().st_size / 1e6:.2f} MB, "
            f"{time.perf_counter() - start:.0f} s, the build's weights exactly")  # fmt: skip


# -- here: the real model's weights in parts, the quality sets --------------------------


@dataclasses.dataclass(frozen=True)
class DeviceCall:
    """One device call of a real-weights run: what it carries (paths from the repository's
    root) and their bytes, the repository's tracked files included."""

    number: int
    carry: tuple[str, ...]
    bytes: int
    command: str


def compact_state(state: dict, quantized: dict) -> dict[str, dict]:
    """Each tensor of ``state`` (float32) in the least that gives it back bit for bit
    (expand_entry): its one-byte codes and scales (and offset) where ``quantized``
    (onnx_import.quantized_codes) has it, one value where all its elements are one
    (the parameters the export lacks: identity norms, ALBERT's zero pooler), float16
    where that is exact, else float32."""
    import numpy as np

    entries = {}
    for key, tensor in state.items():
        value = tensor.detach().cpu().contiguous().numpy()
        if value.dtype != np.float32:
            raise SystemExit(f"{key} is {value.dtype}: the parts hold float32 tensors")
        bits = value.view(np.uint32)
        if key in quantized:
            q = quantized[key]
            entries[key] = {"codes": q.codes, "scale": q.scale}
            if q.offset:
                entries[key]["offset"] = np.array(q.offset, np.float32)
        elif value.size and np.all(bits == bits.flat[0]):
            entries[key] = {"fill": value.reshape(-1)[:1].copy()}
        else:
            half = value.astype(np.float16)
            exact = np.array_equal(half.astype(np.float32).view(np.uint32), bits)
            entries[key] = {"float16": half} if exact else {"float32": value}
    return entries


def _stored_bytes(key: str, entry: dict) -> int:
    """About what ``entry``'s arrays take in a part (np.savez_compressed: deflate, a zip
    and an .npy header per array)."""
    import zlib

    return sum(len(zlib.compress(a.tobytes(), 6)) + 2 * len(key) + 256 for a in entry.values())


def plan_parts(sizes: dict[str, int], bundle: int, tracked: int,
               limit: int = CARRY_LIMIT, margin: int = CARRY_MARGIN) -> list[list[str]]:
    """The keys of ``sizes`` (bytes each takes in a part) per device call, packed first
    fit, largest first, the last call first: every call carries the repository's
    ``tracked`` bytes, the last the ``bundle`` too, and none over ``limit`` less
    ``margin``."""
    room = limit - margin - tracked
    if room - bundle < 0:
        raise SystemExit(f"the bundle ({bundle / 2**20:.1f} MiB) and the tracked files "
                         f"({tracked / 2**20:.1f} MiB) do not fit a device call")  # fmt: skip
    calls: list[list] = [[room - bundle, []]]  # the last call first
    for key in sorted(sizes, key=lambda k: -sizes[k]):
        for call in calls:
            if sizes[key] <= call[0]:
                call[0] -= sizes[key]
                call[1].append(key)
                break
        else:
            if sizes[key] > room:
                raise SystemExit(f"{key} ({sizes[key] / 2**20:.1f} MiB) fits no device call")
            calls.append([room - sizes[key], [key]])
    order = {key: i for i, key in enumerate(sizes)}
    return [sorted(keys, key=order.__getitem__) for _, keys in calls[1:] + calls[:1]]


def write_parts(entries: dict[str, dict], shapes: dict[str, list[int]], calls: list[list[str]],
                out: Path, source: dict) -> list[Path]:  # fmt: skip
    """``entries`` (of tensors of ``shapes``) in one part per call of ``calls``:
    ``out/<n>/part-<n>.npz``, each with an index of every tensor's shape, its own tensors
    and the ``source`` (the ONNX's name and SHA-256), so that the run there can tell a
    part missing or of another model."""
    import numpy as np

    if out.exists():
        shutil.rmtree(out)
    paths = []
    for number, keys in enumerate(calls, 1):
        index = {"format": PART_FORMAT, "source": source, "part": number, "parts": len(calls),
                 "shapes": shapes, "keys": keys}  # fmt: skip
        arrays = {f"{key}:{kind}": array for key in keys for kind, array in entries[key].items()}
        path = out / str(number) / f"part-{number}.npz"
        path.parent.mkdir(parents=True)
        np.savez_compressed(path, __index__=np.array(json.dumps(index)), **arrays)
        paths.append(path)
    return paths


def prepare_real_weights(onnx: Path, config: dict, out: Path, bundle: Path, root: Path,
                         limit: int = CARRY_LIMIT, log=print) -> list[DeviceCall]:
    """The weights of the int8 export ``onnx`` (for ``config``'s KModel) in parts under
    ``out``, as many as the device calls take that carry them: each call its part and
    the repository's tracked files, the last the bundle too, each under ``limit``
    (measured on the files written).  Returns the calls, with their commands."""
    from kokoro_ext.build.model import build_model
    from kokoro_ext.build.model.onnx_import import import_onnx, quantized_codes
    from kokoro_ext.run import artifacts as files

    start = time.perf_counter()
    model = build_model(config, weights=None, seed=0)
    try:
        imported = import_onnx(onnx, model)
    except ValueError as error:
        raise SystemExit(f"--real-weights: {error}") from None
    if not imported.quantized:
        raise SystemExit(f"--real-weights takes an int8 export (its codes travel): {onnx} is float32")
    entries = compact_state(imported.state_dict, quantized_codes(onnx, model, imported))
    sizes = {key: _stored_bytes(key, entry) for key, entry in entries.items()}
    bundle_bytes = _tree_size(bundle)
    tracked = _repository_size(root, bundle, "tracked") or 0
    calls = plan_parts(sizes, bundle_bytes, tracked, limit)
    source = {"path": onnx.name, "sha256": files.sha256(onnx)}
    shapes = {key: list(tensor.shape) for key, tensor in imported.state_dict.items()}
    paths = write_parts(entries, shapes, calls, out, source)
    kinds = {}
    for entry in entries.values():
        kind = next(iter(entry))
        kinds[kind] = kinds.get(kind, 0) + 1
    log(f"{onnx.name}: {len(entries)} tensors ({', '.join(f'{n} {k}' for k, n in kinds.items())}) "
        f"in {len(paths)} parts, {sum(p.stat().st_size for p in paths) / 2**20:.1f} MiB, "
        f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    # a device call carries paths of the repository (absolute ones elsewhere: a test's)
    where, bundle_at = (p.resolve() for p in (out, bundle))
    if root.resolve() in where.parents and root.resolve() in bundle_at.parents:
        where, bundle_at = where.relative_to(root.resolve()), bundle_at.relative_to(root.resolve())
    plan = []
    for number, path in enumerate(paths, 1):
        last = number == len(paths)
        carry = (str(bundle_at),) * last + (str(where / str(number)),)
        size = path.stat().st_size + tracked + (bundle_bytes if last else 0)
        if size > limit:
            raise SystemExit(f"device call {number} would carry {size / 2**20:.1f} MiB, "
                             f"over {limit / 2**20:.0f} MiB")  # fmt: skip
        if last:
            own = where / str(number) if where.is_absolute() else Path("..") / where / str(number)
            parts = " ".join([DEVICE_PARTS] * (len(paths) > 1) + [str(own)])
            command = (f"cd {bundle_at} && PYTHONUNBUFFERED=1 timeout 540 python3 gpu.py run "
                       f"--weights real --parts {parts} --repeat 3 --out $OUT/gpu.json 2>&1 "
                       "| tee $OUT/gpu.log")  # fmt: skip
        else:
            command = (f"mkdir -p {DEVICE_PARTS} && cp {where}/{number}/*.npz {DEVICE_PARTS}/ "
                       f"&& ls -l {DEVICE_PARTS}")  # fmt: skip
        plan.append(DeviceCall(number, carry, size, command))
        log(f"device call {number} of {len(paths)}: carry {list(carry)} "
            f"({size / 2**20:.1f} MiB with the tracked files)\n  {command}")  # fmt: skip
    return plan


def quality_inputs(out: Path, vocab: dict, tokens: int, voice: str = "af_heart") -> dict:
    """bench/quality.py's two sets as its engines get them (the phonemes of the text front
    end a build's Synthesizer.phonemize runs, numbers and abbreviations spelled out; the
    spoken form the WER counts against) in ``out/QUALITY_INPUTS``, and ``voice``'s rows
    in ``out/QUALITY_VOICE``; each sentence checked to fit ``tokens``."""
    import numpy as np

    from quality import SENTENCES, WRITTEN, spoken

    from kokoro_ext.run.voices import load_voice_array
    from kokoro_ext.text import phonemes_to_ids
    from kokoro_ext.text.pipeline import TextPipeline

    front = TextPipeline("a")  # American English: the voice's language
    sets = {}
    for name, texts in (("plain", SENTENCES), ("written", WRITTEN)):
        rows = []
        for text in texts:
            phonemes = front.phonemize(text, True)
            if len(phonemes_to_ids(phonemes, vocab)) > tokens:
                raise SystemExit(f"{text!r} is over the build's {tokens} tokens")
            rows.append({"text": text, "said": spoken(text, name == "written"), "phonemes": phonemes})
        sets[name] = rows
    spec = {"voice": voice, "seed": 0, "sets": sets}
    (out / QUALITY_INPUTS).write_text(json.dumps(spec, ensure_ascii=False, indent=1))
    np.save(out / QUALITY_VOICE, load_voice_array(voice).astype(np.float32))
    return spec


# -- there: weights, then the comparisons ------------------------------------------------


def reference_model(config: dict, seed: int):
    """kokoro's model with random weights from ``seed`` and bounded durations (module doc)."""
    import torch

    from kokoro_ext.build.model import build_model

    model = build_model(config, weights=None, seed=seed)
    linear = model.predictor.duration_proj.linear_layer
    with torch.no_grad():
        linear.bias.fill_(DURATION_BIAS)
        l1 = linear.weight.abs().sum(dim=1, keepdim=True)
        linear.weight.mul_((DURATION_ROW_L1 / l1).clamp(max=1.0))
    return model


def most_frames_per_token(config: dict) -> int:
    """The most frames a token of ``reference_model`` lasts: its logits lie within
    DURATION_ROW_L1 of the bias, its duration is their sigmoids summed, rounded."""
    top = 1 / (1 + math.exp(-(DURATION_BIAS + DURATION_ROW_L1)))
    return max(1, round(config["max_dur"] * top))


def stage_parameters(name: str, entry, model) -> list:
    """The parameters of ``model``'s stage ``name`` that its transform takes, in order."""
    from kokoro_ext.build.stages import STAGES

    module = dict(STAGES[name].module(model).named_parameters())
    arrays = []
    for p in entry.parameters:
        array = module[p.name].detach().contiguous().numpy()
        if (str(array.dtype), tuple(array.shape)) != (p.dtype, tuple(p.shape)):
            raise SystemExit(f"{name}: {p.name} is {array.dtype}{list(array.shape)}, the "
                             f"build takes {p.dtype}{list(p.shape)}")  # fmt: skip
        arrays.append(array)
    return arrays


def _transform(library: Path, arrays: list, kernels: bool) -> list:
    """``main_transform_params`` of ``library`` on ``arrays`` (numpy) on this CPU; with
    ``kernels``, after the native kernels (a CPU build's library calls them)."""
    import numpy as np
    import tvm_ffi

    from kokoro_ext.run import native, runner

    if not arrays:
        return []
    if kernels:
        vm = runner.load_vm(runner.load_library(library))
    else:
        native.load_runtime()
        vm = tvm_ffi.load_module(str(library))["vm_load_executable"]()
        vm["vm_initialization"](1, 0, 1)  # kDLCPU, device 0, the naive allocator
    outputs = vm[runner.TRANSFORM_PARAMS]([runner.to_tensor(a) for a in arrays])
    return [np.array(np.from_dlpack(w), copy=True) for w in outputs]


def expand_entry(entry: dict, shape):
    """The float32 tensor of a part's entry (compact_state), bit for bit (numpy alone)."""
    import numpy as np

    if "codes" in entry:  # as onnx_import.QuantizedTensor.values
        value = entry["codes"].astype(np.float32)
        if "offset" in entry:
            value = value + entry["offset"].astype(np.float32)
        value = value * entry["scale"]
    elif "fill" in entry:
        value = np.full(shape, entry["fill"].reshape(()), np.float32)
    else:
        value = entry["float16" if "float16" in entry else "float32"].astype(np.float32)
    if value.shape != tuple(shape):
        raise SystemExit(f"a part's tensor is {list(value.shape)}, its index says {list(shape)}")
    return value


def read_parts(paths: list[Path]) -> tuple[dict, dict]:
    """(the state dict as float32 numpy arrays, the source's record) of the parts in
    ``paths`` (part files or folders of them), refused unless they are every part of one
    export, each once."""
    import numpy as np

    found = []
    for path in map(Path, paths):
        found += sorted(path.glob("part-*.npz")) if path.is_dir() else [path]
    if not found:
        raise SystemExit(f"no weight parts (part-N.npz) in {', '.join(map(str, paths))}")
    state, indexes, seen = {}, {}, {}
    for path in found:
        with np.load(path, allow_pickle=False) as z:
            index = json.loads(str(z["__index__"]))
            if index.get("format") != PART_FORMAT:
                raise SystemExit(f"{path} is not a weight part of format {PART_FORMAT}")
            if index["part"] in seen:
                raise SystemExit(f"{path} and {seen[index['part']]} are both part {index['part']}")
            seen[index["part"]] = path
            indexes[index["part"]] = index
            for key in index["keys"]:
                entry = {name.split(":")[-1]: z[name] for name in z.files
                         if name.rpartition(":")[0] == key}  # fmt: skip
                state[key] = expand_entry(entry, index["shapes"][key])
    first = next(iter(indexes.values()))
    if any(i["source"] != first["source"] or i["parts"] != first["parts"] for i in indexes.values()):
        raise SystemExit("the weight parts are of different exports or splits: prepare them again")
    missing = sorted(set(range(1, first["parts"] + 1)) - set(indexes))
    if missing:
        raise SystemExit(
            f"weight part(s) {missing} of {first['parts']} are not in "
            f"{', '.join(map(str, paths))}: the device calls before the last copy theirs to "
            f"{DEVICE_PARTS}, which lasts while the machine is warm; run them again, then this")  # fmt: skip
    if set(state) != set(first["shapes"]):
        raise SystemExit(f"the parts lack {sorted(set(first['shapes']) - set(state))[:5]}")
    return {key: state[key] for key in first["shapes"]}, first["source"]


def real_model(config: dict, parts: list[Path]):
    """(kokoro's model with the real weights of ``parts``, their Source)."""
    import torch

    from kokoro_ext.build.model import build_model
    from kokoro_ext.run.manifest import Source

    arrays, source = read_parts(parts)
    model = build_model(config, weights=None, seed=0)
    expected = model.state_dict()
    if set(arrays) != set(expected):
        raise SystemExit(f"the parts are of another model than the builds' config: "
                         f"{sorted(set(arrays) ^ set(expected))[:5]} differ")  # fmt: skip
    model.load_state_dict({key: torch.from_numpy(value) for key, value in arrays.items()})
    # the weight-normalized modules' weights, from the loaded g and v without autograd
    # (as a forward under no_grad leaves them): copy.deepcopy takes no other tensor
    from torch.nn.utils.weight_norm import WeightNorm

    with torch.no_grad():
        for module in model.modules():
            for hook in module._forward_pre_hooks.values():
                if isinstance(hook, WeightNorm):
                    setattr(module, hook.name, hook.compute_weight(module))
    return model, Source(path=source["path"], sha256=source["sha256"])


def make_weights(directory: Path, seed: int, parts: list[Path] | None = None, log=print):
    """The reference model of ``seed``, or with ``parts`` the real one (real_model); its
    weights through each stage's transform into each of the bundle's builds, whose
    manifests are rewritten to match them."""
    from kokoro_ext.run import artifacts as files
    from kokoro_ext.run.manifest import Source, WeightsFile
    from kokoro_ext.run.weights import write_weights

    builds = sorted(p for p in (directory / BUILDS).iterdir() if p.is_dir())
    config = json.loads((builds[0] / files.CONFIG).read_text())
    start = time.perf_counter()
    if parts:
        model, source = real_model(config, parts)
    else:
        model, source = reference_model(config, seed), Source(random_seed=seed)
    for build in builds:
        manifest = files.read_manifest(build)
        frames = most_frames_per_token(config) * manifest.limits.tokens
        if not parts and frames > manifest.limits.frames:
            raise SystemExit(f"random durations could reach {frames} frames a chunk, over "
                             f"{build.name}'s limit of {manifest.limits.frames}")  # fmt: skip
        stages = {}
        for name, entry in manifest.stages.items():
            host = directory / TRANSFORMS / build.name / f"{name}.so"
            library = host if host.is_file() else build / entry.file
            outputs = _transform(library, stage_parameters(name, entry, model), not host.is_file())
            layout = [(tuple(a.shape), str(a.dtype)) for a in outputs]
            if layout != [(t.shape, t.dtype) for t in entry.weights.tensors]:
                raise SystemExit(f"the {name} transform gives other arrays than the manifest lists")
            path = build / entry.weights.file
            tensors = tuple(write_weights(path, outputs))
            weights = WeightsFile(entry.weights.file, files.sha256(path), path.stat().st_size, tensors)
            stages[name] = dataclasses.replace(entry, weights=weights)
        files.write_manifest(build, dataclasses.replace(manifest, weights=source, stages=stages))
    what = (f"of {source.path} read from {len(parts)} part path(s)" if parts else
            f"of seed {seed} (at most {most_frames_per_token(config)} frames a token)")  # fmt: skip
    log(f"weights {what} made and transformed for {len(builds)} build(s) in "
        f"{time.perf_counter() - start:.1f} s")  # fmt: skip
    return model


class _tf32:
    """PyTorch's TF32 switches (matmul, cuDNN) set to ``allow`` for a block; None keeps
    PyTorch's defaults."""

    def __init__(self, torch, allow: bool | None):
        self.torch, self.allow = torch, allow

    def __enter__(self):
        backends = self.torch.backends
        self.saved = (backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32)
        if self.allow is not None:
            backends.cuda.matmul.allow_tf32 = backends.cudnn.allow_tf32 = self.allow

    def __exit__(self, *exc):
        self.torch.backends.cuda.matmul.allow_tf32, self.torch.backends.cudnn.allow_tf32 = self.saved


class StageClock:
    """A stage provider that adds each stage's wall time (its outputs are on the host when
    it returns, so the device is done) to ``seconds``."""

    def __init__(self, provider):
        self.provider, self.seconds = provider, {}

    def __call__(self, name: str):
        stage = self.provider(name)

        def timed(**inputs):
            start = time.perf_counter()
            outputs = stage(**inputs)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            return outputs

        return timed


def warm_times(synths: dict, model, inputs: dict, repeat: int, device: str) -> dict:
    """Warm medians of ``repeat`` per text, the engines interleaved in one process:

    * each build of ``synths`` (by name), chunk by chunk through the host steps
      (kokoro_ext.run.pipeline.synthesize_ids), each stage timed, the rest being the
      host steps;
    * each build with device steps (a CUDA build's steps module: kokoro_ext.run.resident)
      chunk by chunk as Synthesizer runs it, its tensors on the GPU, the durations and the
      audio the only downloads: ``builds[name]["device_steps"]`` (the whole chunk timed:
      its stages' kernels are queued, not waited for, until the audio comes down);
    * ``kmodel``: kokoro's whole ``KModel`` forward on the same device, the call a kokoro
      user makes (``model(phonemes, ref_s)``): the baseline of the ratios;
    * ``torch-stages``: PyTorch's stage modules through the same host steps as the
      builds (the per-stage table's reference).
    """
    import copy

    import torch

    from kokoro_ext.run.pipeline import synthesize_ids, voice_style
    from kokoro_ext.text import phonemes_to_ids
    from kokoro_ext.tools.engines import torch_provider

    kmodel = copy.deepcopy(model).to(device).eval()
    first_synth = next(iter(synths.values()))  # the builds share a config and voice

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def styled(phon):
        ids = phonemes_to_ids(phon, first_synth.vocab)
        return ids, voice_style(first_synth.voice, len(ids) - 2)

    def pipeline(provider):
        def speak(chunks, frames):
            for phon in chunks:
                ids, style = styled(phon)
                trace = synthesize_ids(provider, first_synth.geometry, ids, style,
                                       first_synth.limits, 1.0, 0)  # fmt: skip
                frames.append(trace.frames)
                yield
        return speak

    def whole(chunks, frames):
        for phon in chunks:
            _, style = styled(phon)
            with torch.no_grad():
                output = kmodel(phon, torch.from_numpy(style).to(device), return_output=True)
            sync()
            frames.append(int(output.pred_dur.sum()))
            yield

    def resident(synth):
        def speak(chunks, frames):
            for phon in chunks:
                ids, style = styled(phon)
                frames.append(synth.synthesize_ids(ids, style, 1.0, 0).frames)
                yield
        return speak

    clocks = {name: StageClock(synth._stage) for name, synth in synths.items()}
    engines = {name: pipeline(clock) for name, clock in clocks.items()}
    # engine -> build: the device-steps path of each build that has one
    on_device = {f"{name} device-steps": name for name, synth in synths.items()
                 if synth.resident() is not None}  # fmt: skip
    engines.update({engine: resident(synths[name]) for engine, name in on_device.items()})
    engines.update({"kmodel": whole, "torch-stages": pipeline(torch_provider(model, device=device))})

    def once(engine, chunks):
        frames: list[int] = []
        for clock in clocks.values():
            clock.seconds = {}
        start = time.perf_counter()
        first = None
        for _ in engines[engine](chunks, frames):
            sync()
            first = first if first is not None else time.perf_counter() - start
        total = time.perf_counter() - start
        return {"seconds": total, "first_chunk_seconds": first, "frames": frames,
                "stages": dict(clocks[engine].seconds) if engine in clocks else {}}  # fmt: skip

    warm_text = next(iter(inputs))
    for engine in engines:  # loads, first-call allocations
        once(engine, inputs[warm_text])
    times: dict = {}
    ms = lambda v: f"{v * 1e3:.1f}"  # noqa: E731
    for text, chunks in inputs.items():
        runs = {engine: [] for engine in engines}
        for _ in range(repeat):
            for engine in engines:
                runs[engine].append(once(engine, chunks))
        row: dict = {"builds": {}}
        for engine, done in runs.items():
            timing = {
                "seconds": statistics.median(r["seconds"] for r in done),
                "first_chunk_seconds": statistics.median(r["first_chunk_seconds"] for r in done),
                "frames_per_chunk": done[0]["frames"],  # the durations each engine chose
            }
            if engine in clocks:
                timing["stages"] = {name: statistics.median(r["stages"][name] for r in done)
                                    for name in done[0]["stages"]}  # fmt: skip
                timing["host_seconds"] = timing["seconds"] - sum(timing["stages"].values())
                timing["over_kmodel"] = None  # below, once KModel's median is known
                row["builds"][engine] = timing
            elif engine not in on_device:
                row[engine] = timing
        for timing in row["builds"].values():
            timing["over_kmodel"] = timing["seconds"] / row["kmodel"]["seconds"]
            timing["over_torch_stages"] = timing["seconds"] / row["torch-stages"]["seconds"]
        for engine, name in on_device.items():
            done = runs[engine]
            host = row["builds"][name]
            seconds = statistics.median(r["seconds"] for r in done)
            _, transfers = synths[name].resident()
            host["device_steps"] = {
                "seconds": seconds,
                "first_chunk_seconds": statistics.median(r["first_chunk_seconds"] for r in done),
                "frames_per_chunk": done[0]["frames"],
                "over_kmodel": seconds / row["kmodel"]["seconds"],
                "over_host_steps": seconds / host["seconds"],
                # the last chunk's
                "downloads_per_chunk": list(transfers.downloads),
                "uploads_per_chunk": transfers.uploads,
            }  # fmt: skip
        row["frames_per_chunk"] = runs["kmodel"][0]["frames"]
        times[text] = row
        print(f"{text:<10} KModel {ms(row['kmodel']['seconds'])} ms (first "
              f"{ms(row['kmodel']['first_chunk_seconds'])}), stages "
              f"{ms(row['torch-stages']['seconds'])} ms, frames {row['frames_per_chunk']}")  # fmt: skip
        for name, t in row["builds"].items():
            per_stage = " ".join(f"{n} {ms(v)}" for n, v in t["stages"].items())
            print(f"{'':<10} {name}: {ms(t['seconds'])} ms x{t['over_kmodel']:.2f} of KModel "
                  f"(first {ms(t['first_chunk_seconds'])}; {per_stage}; host "
                  f"{ms(t['host_seconds'])})")  # fmt: skip
            if d := t.get("device_steps"):
                print(f"{'':<10} {name} device steps: {ms(d['seconds'])} ms "
                      f"x{d['over_kmodel']:.2f} of KModel, x{d['over_host_steps']:.2f} of the "
                      f"host steps' (first {ms(d['first_chunk_seconds'])}; downloads "
                      f"{d['downloads_per_chunk']})")  # fmt: skip
    return times


def steps_check(synth, inputs: dict, repeat: int) -> dict:
    """A build's device steps (kokoro_ext.run.resident) on its GPU against their numpy
    references: the durations, both alignments and the Philox words exactly, the noise to float32
    rounding (kokoro_ext.run.noise.philox_normal), each kernel's median time beside the
    host step it replaces; then one chunk through the device path against the host path
    on the same noise (torch's CPU draws, uploaded), and the device path's own noise
    against the host path given philox_normal's.  Nothing for a build without them."""
    import numpy as np

    from kokoro_ext.run import cuda
    from kokoro_ext.run.alignment import align
    from kokoro_ext.run.noise import philox_bits, philox_normal, source_noise
    from kokoro_ext.run.pipeline import durations, synthesize_ids, voice_style
    from kokoro_ext.run.runner import to_numpy
    from kokoro_ext.text import phonemes_to_ids

    resident = synth.resident()
    if resident is None:
        return {"skipped": "no device steps (not a CUDA build with a steps module)"}
    steps, transfers = resident

    def host(tensor) -> np.ndarray:  # the steps' outputs are on the GPU
        return to_numpy(cuda.to_host(tensor))

    def median(fn) -> float:
        seconds = []
        for _ in range(max(repeat, 3)):
            start = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - start)
        return statistics.median(seconds)

    def synced(fn):  # a device step, timed to its result on the host
        return lambda: host(fn())

    geometry, rng = synth.geometry, np.random.default_rng(0)
    tokens, channels = 510, 640
    predicted = rng.uniform(0, 8, (1, tokens)).astype(np.float32)
    predicted[0, :4] = [0.5, 1.5, 2.5, 1e-3]  # ties to even, the floor of 1
    report: dict = {}
    up_predicted = transfers.up(predicted)
    on_device, ends = steps.durations(up_predicted, 1.0)
    counts = durations(predicted[0], 1.0)
    report["durations_exact"] = bool(np.array_equal(host(on_device), counts))
    frames = int(counts.sum())
    token_of_frame = steps.frame_tokens(ends, frames)
    values = rng.standard_normal((channels, tokens)).astype(np.float32)
    want = align(values, counts, frames)
    up_first, up_last = transfers.up(values.T[None]), transfers.up(values[None])
    report["align_exact"] = bool(np.array_equal(
        host(steps.align(up_last, token_of_frame, "check"))[0], want))  # fmt: skip
    report["align_tokens_first_exact"] = bool(np.array_equal(
        host(steps.align(up_first, token_of_frame, "check", tokens_first=True))[0], want))  # fmt: skip
    samples = geometry.samples_per_frame * frames
    words = samples * geometry.harmonics
    report["philox_bits_exact"] = bool(np.array_equal(
        host(steps.philox_bits(7, words)), philox_bits(7, words)[:words]))  # fmt: skip
    got = host(steps.noise(7, samples, geometry.harmonics))
    reference = philox_normal(7, samples, geometry.harmonics)
    report["noise"] = {"shape": list(got.shape), "max_abs_difference": float(np.abs(got - reference).max()),
                       "exactly_equal_fraction": float(np.mean(got == reference))}  # fmt: skip
    report["seconds"] = {
        "durations_device": median(synced(lambda: steps.durations(up_predicted, 1.0)[0])),
        "align_device": median(synced(lambda: steps.align(up_last, token_of_frame, "check"))),
        "align_host": median(lambda: align(values, counts, frames)),
        "noise_device": median(synced(lambda: steps.noise(7, samples, geometry.harmonics))),
        "noise_host_torch_cpu_draws": median(lambda: source_noise(7, 1, samples, geometry.harmonics)),
    }  # fmt: skip
    # one chunk both ways
    phon = max((c for chunks in inputs.values() for c in chunks), key=len)
    ids = phonemes_to_ids(phon, synth.vocab)
    style = voice_style(synth.voice, len(ids) - 2)
    host = synthesize_ids(synth._stage, geometry, ids, style, synth.limits, 1.0, 3)
    chunk_samples = geometry.samples_per_frame * host.frames
    given = source_noise(3, 1, chunk_samples, geometry.harmonics)
    device = synth.synthesize_ids(ids, style, 1.0, 3, noise=given)
    own = synth.synthesize_ids(ids, style, 1.0, 3)
    philox_host = synthesize_ids(synth._stage, geometry, ids, style, synth.limits, 1.0, 3,
                                 noise=philox_normal(3, chunk_samples, geometry.harmonics))  # fmt: skip

    def snr(got, want) -> float:
        err = float(np.sum((got.astype(np.float64) - want) ** 2))
        return float("inf") if err == 0 else 10 * math.log10(float(np.sum(want.astype(np.float64) ** 2)) / err)

    report["chunk"] = {
        "tokens": len(ids), "frames": host.frames,
        "durations_equal": bool(np.array_equal(device.durations, host.durations)),
        "same_noise_snr_db": snr(device.audio, host.audio),
        "same_noise_exactly_equal": bool(np.array_equal(device.audio, host.audio)),
        "philox_noise_vs_host_with_its_reference_snr_db": snr(own.audio, philox_host.audio),
        "downloads": list(transfers.downloads),
    }  # fmt: skip
    ok = report["durations_exact"] and report["align_exact"] and report["align_tokens_first_exact"]
    print(f"-- device steps: durations and alignment {'exact' if ok else 'DIFFER'}; Philox "
          f"words {'exact' if report['philox_bits_exact'] else 'DIFFER'}; noise max "
          f"|difference| {report['noise']['max_abs_difference']:.2e} "
          f"({report['noise']['exactly_equal_fraction']:.0%} equal); "
          + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in report["seconds"].items())
          + f"; a {len(ids)}-token chunk on the host's noise: SNR {report['chunk']['same_noise_snr_db']:.1f} "
          f"dB from the host path, on its own: {report['chunk']['philox_noise_vs_host_with_its_reference_snr_db']:.1f} dB; "
          f"downloads {report['chunk']['downloads']}")  # fmt: skip
    return report


def convolution_check(synth, model, phonemes: str, device: str, repeat: int) -> list[dict]:
    """Each of the model's 1-D convolutions at the shapes a synthesis of ``phonemes``
    gives it, through the build's cuDNN library (``kokoro_ext.cudnn.conv1d``, for a build
    whose target's libs name cuDNN) and through PyTorch (``F.conv1d``, TF32 off) on the
    same tensors: the largest difference over the output's largest magnitude, and the
    median time of each.  Without the library (or a GPU), the shapes alone."""
    import torch
    import tvm_ffi

    from kokoro_ext.run import cuda, kernels
    from kokoro_ext.run.pipeline import voice_style
    from kokoro_ext.text import phonemes_to_ids

    import copy

    seen: dict = {}

    def record(module, args, _output):
        x = args[0]
        key = (tuple(x.shape), tuple(module.weight.shape), module.stride, module.padding,
               module.dilation, module.groups)  # fmt: skip
        if module.groups == 1 and isinstance(module.padding, tuple):
            seen.setdefault(key, (module, x.detach().clone()))

    kmodel = copy.deepcopy(model).to(device)
    hooks = [m.register_forward_hook(record) for m in kmodel.modules()
             if isinstance(m, torch.nn.Conv1d)]  # fmt: skip
    ids = phonemes_to_ids(phonemes, synth.vocab)
    style = torch.from_numpy(voice_style(synth.voice, len(ids) - 2)).to(device)
    with torch.no_grad():
        kmodel(phonemes, style)
    for hook in hooks:
        hook.remove()
    print(f"-- {len(seen)} convolution shapes in a synthesis of {len(ids)} tokens")
    if not synth.manifest.requires.get("libraries") or device != "cuda":
        return [{"x": list(k[0]), "w": list(k[1])} for k in seen]
    cuda.load_runtime()
    cuda.load_libraries(synth.directory, synth.manifest.requires)
    conv = tvm_ffi.get_global_func(kernels.CUDNN_CONV1D)

    def timed(fn) -> float:
        times = []
        for _ in range(repeat):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    rows = []
    with _tf32(torch, False), torch.no_grad():
        for (x_shape, w_shape, stride, padding, dilation, _), (module, x) in seen.items():
            w = module.weight.detach().contiguous()
            b = (module.bias.detach() if module.bias is not None
                 else torch.zeros(w.shape[0], device=device)).contiguous()  # fmt: skip
            want = torch.nn.functional.conv1d(x, w, b, stride, padding, dilation)
            got = torch.empty_like(want)
            options = tvm_ffi.Shape([stride[0], padding[0], dilation[0], 0])
            args = [tvm_ffi.from_dlpack(t) for t in (x.contiguous(), w, b, got)]
            ours = lambda: conv(options, *args)  # noqa: E731
            ours()
            torch.cuda.synchronize()
            scale = float(want.abs().max()) or 1.0
            rows.append({
                "x": list(x_shape), "w": list(w_shape), "stride": stride[0],
                "padding": padding[0], "dilation": dilation[0],
                "relative_error": float((got - want).abs().max()) / scale,
                "cudnn_seconds": timed(ours),
                "torch_seconds": timed(lambda: torch.nn.functional.conv1d(
                    x, w, b, stride, padding, dilation)),
            })  # fmt: skip
    worst = max((r["relative_error"] for r in rows), default=0.0)
    ours_total = sum(r["cudnn_seconds"] for r in rows)
    theirs_total = sum(r["torch_seconds"] for r in rows)
    print(f"-- {len(rows)} convolution shapes through the build's cuDNN library against "
          f"F.conv1d (TF32 off): worst relative difference {worst:.2e}; "
          f"{ours_total * 1e3:.1f} ms against {theirs_total * 1e3:.1f} ms")  # fmt: skip
    return rows


def memory_soak(synth, inputs: dict, device: str, requests: int, checkpoint: int) -> dict:
    """Device memory in use after ``checkpoint`` and after ``requests`` requests of mixed
    lengths through the build (each a chunk cut to a length drawn from a fixed seed, so
    most lengths are new), PyTorch's cache emptied before each reading."""
    import random

    import torch

    from kokoro_ext.run.errors import NothingToSay

    chunks = [c for text in inputs.values() for c in text]
    draw = random.Random(0)
    used: dict[int, int | None] = {}
    for request in range(1, requests + 1):
        chunk = draw.choice(chunks)
        try:
            synth.synthesize_phonemes(chunk[: draw.randint(1, len(chunk))])
        except NothingToSay:  # a cut of nothing but spaces
            synth.synthesize_phonemes(chunk)
        if request in (checkpoint, requests):
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                free, total = torch.cuda.mem_get_info()
                used[request] = total - free
            else:
                used[request] = None
    first, last = used[checkpoint], used[requests]
    report = {f"device_used_after_{checkpoint}": first, f"device_used_after_{requests}": last,
              "growth": (last / first) if first else None}  # fmt: skip
    if first:
        print(f"device memory in use: {first / 2**20:.0f} MiB after {checkpoint} requests, "
              f"{last / 2**20:.0f} MiB after {requests} (x{last / first:.2f})")  # fmt: skip
    return report


def speak_quality(synths: dict, model, directory: Path, device: str, out: Path,
                  first: int | None = None, log=print) -> dict:
    """bench/quality.py's sets (the bundle's QUALITY_INPUTS, or the ``first`` shortest of
    each) spoken by each build and by kokoro's KModel on ``device``, the same phonemes,
    voice rows and seed: ``out/audio-<engine>.npz``, 16-bit PCM at 24 kHz per sentence
    with an index, written as each engine finishes (what a call's timeout leaves still
    comes back).  Returns what was written, per engine."""
    import copy

    import numpy as np
    import torch

    from kokoro_ext.run.pipeline import voice_style
    from kokoro_ext.run.wav import SAMPLE_RATE
    from kokoro_ext.text import phonemes_to_ids

    spec = json.loads((directory / QUALITY_INPUTS).read_text())
    voice = np.load(directory / QUALITY_VOICE)
    sentences = []
    for name, rows in spec["sets"].items():
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]["phonemes"]))
        for i in sorted(order[:first]) if first else range(len(rows)):
            sentences.append({"key": f"{name}-{i:02d}", "set": name, **rows[i]})
    vocab = model.vocab  # the builds' config's, which the model was made from
    kmodel = copy.deepcopy(model).to(device).eval()

    def kokoro(phonemes: str):
        ids = phonemes_to_ids(phonemes, vocab)
        style = torch.from_numpy(voice_style(voice, len(ids) - 2)).to(device)
        with torch.random.fork_rng(devices=[0] if device == "cuda" else []), torch.no_grad():
            torch.manual_seed(spec["seed"])
            output = kmodel(phonemes, style, return_output=True)
        return output.audio.float().cpu().numpy().ravel(), int(output.pred_dur.sum())

    def build(synth):
        def speak(phonemes: str):
            trace = synth.synthesize_phonemes(phonemes, voice=voice, seed=spec["seed"])
            return trace.audio, int(trace.frames)
        return speak

    engines = {name: build(synth) for name, synth in synths.items()}
    engines["kmodel"] = kokoro
    if len(engines) + 2 > RETURN_FILES:  # with the report and the log
        raise SystemExit(f"{len(engines)} engines' audio and the report are over the "
                         f"{RETURN_FILES} files a call gives back")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for engine, speak in engines.items():
        start = time.perf_counter()
        arrays, frames = {}, {}
        for s in sentences:
            audio, frames[s["key"]] = speak(s["phonemes"])
            arrays[s["key"]] = (np.clip(audio, -1, 1) * 32767).round().astype("<i2")
        seconds = time.perf_counter() - start
        index = {"engine": engine, "device": device, "rate": SAMPLE_RATE, "voice": spec["voice"],
                 "seed": spec["seed"], "seconds": seconds,
                 "sentences": [{**s, "frames": frames[s["key"]]} for s in sentences]}  # fmt: skip
        path = out / f"{AUDIO_PREFIX}{engine}.npz"
        np.savez_compressed(path, __index__=np.array(json.dumps(index, ensure_ascii=False)), **arrays)
        size = path.stat().st_size
        audio_seconds = sum(len(a) for a in arrays.values()) / SAMPLE_RATE
        log(f"quality audio {engine}: {len(arrays)} sentences, {audio_seconds:.1f} s of audio "
            f"in {seconds:.1f} s, {path.name} {size / 2**20:.2f} MiB")  # fmt: skip
        if size > RETURN_LIMIT:
            log(f"warning: {path.name} is over the {RETURN_LIMIT / 2**20:.0f} MiB a call gives back")
        written[engine] = {"file": path.name, "bytes": size, "sentences": len(arrays),
                           "audio_seconds": audio_seconds, "seconds": seconds}  # fmt: skip
    return written


def run(directory: Path, repeat: int, out: Path | None, dry_run: bool, seed: int = 0,
        parts: list[Path] | None = None, audio: Path | None = None,
        only: list[str] | None = None) -> dict:
    """The checks of the module doc on the bundle ``directory`` (its builds named in
    ``only``, default all); with ``parts`` (the real model's weights, prepare
    --real-weights) the quality sets spoken first, their audio into ``audio`` (default:
    ``out``'s folder).  A check that fails is recorded as its error and the run goes on;
    the report is written after each."""
    # tvm-ffi would JIT-compile a torch extension at import where torch lacks the DLPack
    # exchange API; the torch tensors handed to TVM here (convolution_check) take the
    # plain DLPack protocol
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    directory = directory.resolve()
    sys.path.insert(0, str(directory))
    import torch

    from kokoro_ext.run.synthesizer import Synthesizer
    from kokoro_ext.tools.validate import format_table, verdict, validate

    device = "cpu" if dry_run else "cuda"
    report: dict = {"device": device, "seed": seed, "weights": "real" if parts else "random"}
    if parts and not (directory / QUALITY_INPUTS).is_file():
        raise SystemExit(f"{directory} has no {QUALITY_INPUTS}: prepare it with --real-weights")
    if device == "cuda":
        from kokoro_ext.run import cuda

        name, arch = cuda.device_architecture(0)  # refuses a machine without a GPU
        report.update(gpu=name, architecture=arch, torch=torch.__version__)
        print(f"GPU: {name} ({arch}); torch {torch.__version__}")
    model = make_weights(directory, seed, parts)
    # each refuses a machine it cannot run on
    found = sorted(b for b in (directory / BUILDS).iterdir() if b.is_dir())
    if only and (unknown := set(only) - {b.name for b in found}):
        raise SystemExit(f"no build {sorted(unknown)} in {directory / BUILDS}: "
                         f"it holds {[b.name for b in found]}")  # fmt: skip
    synths = {b.name: Synthesizer(b) for b in found if not only or b.name in only}
    report["builds"] = {name: {"target": dict(synth.manifest.target)}
                        for name, synth in synths.items()}  # fmt: skip

    def save():
        if out is not None:  # after every section: a later one may run out of time
            out.write_text(json.dumps(report, indent=1, default=str))

    def attempt(label: str, into: dict, key: str, fn) -> None:
        """``into[key] = fn()``, or its error as a record: one failing check leaves the
        others to run in the call."""
        try:
            into[key] = fn()
        except Exception as e:  # noqa: BLE001 - recorded in the report and printed
            traceback.print_exc()
            print(f"-- {label} failed: {type(e).__name__}: {e}")
            into[key] = {"error": f"{type(e).__name__}: {e}"}
        save()

    if parts:
        report["weights_source"] = next(iter(synths.values())).manifest.weights.to_json()
        where = audio or (out.parent if out is not None else Path.cwd())
        attempt("quality", report, "quality", lambda: speak_quality(
            synths, model, directory, device, where, first=1 if dry_run else None))
    inputs = json.loads((directory / "inputs.json").read_text())
    if dry_run:
        inputs = dict(list(inputs.items())[:1])
    phonemes = inputs[next(iter(inputs))][0]
    longest = max((c for chunks in inputs.values() for c in chunks), key=len)

    def fidelity(name: str, synth) -> dict:
        # every stage against PyTorch float32 on the same device, and the waveform's SNR:
        # judged with TF32 off (the float32 bound is for float32 products); PyTorch's
        # default (cuDNN's convolutions may use TF32) reported beside it
        modes = {}
        for mode, tf32 in (("tf32_off", False), ("torch_default", None)):
            with _tf32(torch, tf32):
                results = validate(synth, phonemes, seed=0, device=device, model=model)
            passed, rule = verdict(synth.manifest.weight_dtype, results, synth.manifest.precision)
            print(f"-- {name}: fidelity, PyTorch {mode}",
                  format_table(results), rule, sep="\n")  # fmt: skip
            modes[mode] = {"stages": [r.__dict__ for r in results], "passed": passed,
                           "rule": rule}  # fmt: skip
        return modes

    for name, synth in synths.items():
        entry = report["builds"][name]
        attempt(f"{name} fidelity", entry, "fidelity", lambda: fidelity(name, synth))
        attempt(f"{name} convolutions", entry, "convolutions",
                lambda: convolution_check(synth, model, longest, device, repeat))
        attempt(f"{name} device steps", entry, "device_steps",
                lambda: steps_check(synth, inputs, repeat))
    attempt("warm times", report, "warm",
            lambda: warm_times(synths, model, inputs, repeat, device))
    for name, synth in synths.items():
        attempt(f"{name} memory", report["builds"][name], "memory", lambda: memory_soak(
            synth, inputs, device, requests=12 if dry_run else 200,
            checkpoint=4 if dry_run else 10))
    return report


# -- here: the word error rate of the audio that came back --------------------------------


def score(directory: Path, results: Path = HERE / "results", out: Path | None = HERE / "results",
          recognize=None, log=print) -> dict:
    """pocketsphinx's word error rate (bench/quality.py's Recognizer, words and edit
    distance) of each engine's audio in ``directory`` (``audio-<engine>.npz``, as run
    wrote them), per set, against the CPU float32 build's on the same sentences
    (BASELINE_ENGINE of bench/quality.py's results in ``results``); passed where the
    difference is at most WER_TOLERANCE.  Writes ``gpu-quality.{txt,json}`` to ``out``.
    ``recognize(audio, rate) -> text``: pocketsphinx by default."""
    import numpy as np

    sys.path.insert(0, str(HERE))
    from harness import write_results
    from quality import Recognizer, words

    from kokoro_ext.tools.distance import edit_distance

    found = sorted(Path(directory).glob(f"{AUDIO_PREFIX}*.npz"))
    if not found:
        raise SystemExit(f"no {AUDIO_PREFIX}<engine>.npz in {directory}")
    if recognize is None:
        try:
            recognize = Recognizer()
        except ImportError as error:
            raise SystemExit(f"no speech recognizer to score with ({error}); "
                             "pip install pocketsphinx") from None
    baselines = {}
    for name, file in BASELINES.items():
        path = Path(results) / file
        if path.is_file():
            base = json.loads(path.read_text())
            if BASELINE_ENGINE in base.get("engines", []):
                baselines[name] = base
    rows, table = [], {}
    for path in found:
        with np.load(path, allow_pickle=False) as z:
            index = json.loads(str(z["__index__"]))
            clips = {s["key"]: z[s["key"]].astype(np.float32) / 32767 for s in index["sentences"]}
        engine = index["engine"]
        for s in index["sentences"]:
            heard = recognize(clips[s["key"]], index["rate"])
            rows.append({"engine": engine, "set": s["set"], "text": s["text"], "said": s["said"],
                         "phonemes": s["phonemes"], "heard": heard,
                         "errors": edit_distance(words(s["said"]), words(heard))})  # fmt: skip
    for engine in dict.fromkeys(r["engine"] for r in rows):
        for name in dict.fromkeys(r["set"] for r in rows if r["engine"] == engine):
            mine = [r for r in rows if r["engine"] == engine and r["set"] == name]
            said = sum(len(words(r["said"])) for r in mine)
            entry = {"sentences": len(mine), "words": said,
                     "errors": sum(r["errors"] for r in mine),
                     "wer": sum(r["errors"] for r in mine) / said if said else None}  # fmt: skip
            base = baselines.get(name)
            if base is None:
                entry.update(baseline=None, passed=None,
                             note=f"no {BASELINES.get(name, name)} with engine {BASELINE_ENGINE} in {results}")  # fmt: skip
            else:
                by_text = {r["text"]: r for r in base["rows"]}
                absent = [r["text"] for r in mine if r["text"] not in by_text]
                if absent:
                    raise SystemExit(f"{BASELINES[name]} has no row for {absent[0]!r}: "
                                     "run bench/quality.py on the same sentences")  # fmt: skip
                theirs = [by_text[r["text"]] for r in mine]
                base_words = sum(len(words(r["said"])) for r in theirs)
                base_errors = sum(r["errors"][BASELINE_ENGINE] for r in theirs)
                entry["baseline"] = {
                    "file": BASELINES[name], "artifacts": base.get("artifacts"),
                    "target": base.get("target"), "errors": base_errors,
                    "wer": base_errors / base_words if base_words else None,
                    # the G2P may have changed since the baseline ran
                    "other_phonemes": sum(r["phonemes"] != b["phonemes"] for r, b in zip(mine, theirs)),
                }  # fmt: skip
                entry["difference"] = entry["wer"] - entry["baseline"]["wer"]
                entry["passed"] = abs(entry["difference"]) <= WER_TOLERANCE + 1e-12
            table.setdefault(engine, {})[name] = entry
    result = {"directory": str(directory), "tolerance": WER_TOLERANCE,
              "baseline_engine": BASELINE_ENGINE, "wer": table, "rows": rows}  # fmt: skip
    text = format_score(result)
    if out is not None:
        write_results(Path(out), "gpu-quality", result, text, log=log)
    else:
        log(text)
    return result


def format_score(result: dict) -> str:
    """score's table: WER per engine and set, the CPU float32 build's, the difference."""
    lines = [f"GPU audio, pocketsphinx (en-us) at 16 kHz: word error rate against the CPU "
             f"float32 build's (bench/quality.py's {result['baseline_engine']}) on the same "
             f"sentences; pass within {result['tolerance']}", "",
             f"{'engine':<22} {'set':<8} {'sentences':>9} {'WER':>6} {'CPU fp32':>8} "
             f"{'diff':>7}  verdict"]  # fmt: skip
    notes = []
    for engine, sets in result["wer"].items():
        for name, e in sets.items():
            base = e.get("baseline")
            if base is None:
                lines.append(f"{engine:<22} {name:<8} {e['sentences']:>9} {e['wer']:>6.3f} "
                             f"{'-':>8} {'-':>7}  no baseline")  # fmt: skip
                notes.append(e["note"])
                continue
            lines.append(f"{engine:<22} {name:<8} {e['sentences']:>9} {e['wer']:>6.3f} "
                         f"{base['wer']:>8.3f} {e['difference']:>+7.3f}  "
                         f"{'pass' if e['passed'] else 'FAIL'}")  # fmt: skip
            if base["other_phonemes"]:
                notes.append(f"{name}: {base['other_phonemes']} sentences' phonemes differ from "
                             f"{base['file']}'s (the G2P changed since)")  # fmt: skip
    return "\n".join(lines + [""] * bool(notes) + sorted(set(notes)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: write the bundle to carry")
    p.add_argument("--artifacts", type=Path, action="append", required=True,
                   help="a build (repeatable: builds of one config, timed side by side)")
    p.add_argument("--out", type=Path, default=Path("gpu-bundle"))
    p.add_argument("--python", default="3.12", help="the Python there (its tvm-ffi core)")
    p.add_argument("--tvm-ffi-wheel", type=Path, action="append", default=[],
                   help="an apache-tvm-ffi wheel whose compiled core to add (repeatable)")  # fmt: skip
    p.add_argument("--real-weights", nargs="?", const="",
                   help="an int8 ONNX export (default: the fetched kokoro-v1.0.int8.onnx): "
                   "its weights in parts for the device calls, and the quality sets")  # fmt: skip
    p.add_argument("--weights-out", type=Path, default=WEIGHTS_DIR,
                   help="the folder of the parts (in the repository, ignored by git)")  # fmt: skip
    r = sub.add_parser("run", help="there: run the bundle this script is in")
    r.add_argument("--bundle", type=Path, default=HERE)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--seed", type=int, default=0, help="of the random weights")
    r.add_argument("--out", type=Path)
    r.add_argument("--dry-run", action="store_true", help="on the CPU: a check of the script")
    r.add_argument("--weights", choices=("random", "real"), default="random",
                   help="random: drawn from --seed; real: read from --parts")
    r.add_argument("--parts", type=Path, nargs="+", default=[],
                   help="the real weights' parts: part-N.npz files or folders of them")
    r.add_argument("--build", action="append", default=[],
                   help="only this build of the bundle (repeatable; default: all of them)")
    r.add_argument("--audio", type=Path, help="where the quality sets' audio goes "
                   "(default: --out's folder)")  # fmt: skip
    s = sub.add_parser("score", help="here: the word error rate of the audio a real-weights run gave")
    s.add_argument("directory", type=Path, help="the folder of the audio-<engine>.npz files")
    s.add_argument("--results", type=Path, default=HERE / "results",
                   help="bench/quality.py's results, the CPU float32 build's WER")
    s.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        onnx = args.real_weights
        if onnx == "":  # --real-weights alone: the fetched int8 export
            from kokoro_ext.run.cache import default_weights

            onnx = default_weights()
        prepare(args.artifacts, args.out, args.tvm_ffi_wheel, args.python,
                real_weights=Path(onnx) if onnx is not None else None,
                weights_out=args.weights_out)  # fmt: skip
    elif args.command == "run":
        if (args.weights == "real") != bool(args.parts):
            parser.error("--weights real takes --parts, and --parts only --weights real")
        run(args.bundle, args.repeat, args.out, args.dry_run, args.seed, args.parts or None,
            args.audio, args.build or None)
    else:
        score(args.directory, args.results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
