"""A CUDA build on an NVIDIA GPU against PyTorch float32 on the same GPU and weights.

Made for a GPU machine without network that has Python, torch (CUDA) and the CUDA
runtime wheels but not this project's build side: build here, carry, run one command.

1. Here (the build machine):

     python -m kokoro_ext.build --target cuda --out artifacts-cuda     # or cuda-sm90
     python bench/gpu.py prepare --artifacts artifacts-cuda --out gpu-bundle

   ``prepare`` writes ``gpu-bundle/``: this checkout's ``kokoro_ext`` (Python; no native
   kernels: a CUDA build runs none), TVM's runtime libraries (``libtvm_runtime.so``,
   ``libtvm_runtime_cuda.so`` and the version record: kokoro_ext/lib, as a runtime wheel
   lays them out), the tvm-ffi wheel's package, the build, this script, the model's
   parameters as a torch state dict (``model.pt``: the GPU machine need not read the
   ONNX checkpoint) and the phonemes of bench/user.py's texts cut in chunks as
   ``Synthesizer.stream`` cuts them (``inputs.json``: no G2P there).

2. There:  ``cd gpu-bundle && python gpu.py run [--repeat 5] [--out results.json]``

   * the device: name, architecture, driver check (kokoro_ext.run.cuda refuses a machine
     the build does not run on, naming why);
   * each stage against PyTorch float32 on the same GPU (and float64), and the waveform
     against kokoro's own forward on the same noise: kokoro_ext.tools.validate's table
     and its float32 bound;
   * warm times per text (median of ``--repeat``): the build's stages and PyTorch's
     stage modules on the GPU (eager), chunk by chunk through the same host steps
     (kokoro_ext.run.pipeline.synthesize_ids), and the time to the first chunk;
   * device memory: what the CUDA driver reports in use after the runs (both engines'
     weights and pools), and torch's own peak.

``run --dry-run`` runs the same steps on the CPU (a CPU build, torch on the CPU, first
text only): a check of the script where no GPU is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def prepare(artifacts: Path, out: Path) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    from user import TEXTS  # bench/user.py's texts

    from kokoro_ext.build.model import build_model
    from kokoro_ext.run import artifacts as files
    from kokoro_ext.run import native
    from kokoro_ext.run.cuda import RUNTIME_NAME
    from kokoro_ext.text.pipeline import Chunking, Progress, TextPipeline

    manifest = files.read_manifest(artifacts)
    out.mkdir(parents=True, exist_ok=True)
    root = HERE.parent
    shutil.copytree(root / "kokoro_ext", out / "kokoro_ext", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.cpu.json"))  # fmt: skip
    lib = out / "kokoro_ext" / "lib"
    lib.mkdir(exist_ok=True)
    runtime = native.runtime_library()
    for name in (native.RUNTIME_NAME, RUNTIME_NAME):
        shutil.copy2(runtime.path.with_name(name), lib / name)
    (lib / native.RUNTIME_RECORD).write_text(json.dumps({"version": runtime.version}) + "\n")
    ffi = Path(importlib.util.find_spec("tvm_ffi").origin).parent
    shutil.copytree(ffi, out / "tvm_ffi", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copytree(artifacts, out / "artifacts", dirs_exist_ok=True)
    shutil.copy2(Path(__file__), out / "gpu.py")
    config = json.loads((artifacts / files.CONFIG).read_text())
    source = manifest.weights
    model = build_model(config, weights=source.path, seed=source.random_seed or 0)
    torch.save(model.state_dict(), out / "model.pt")
    pipeline = TextPipeline("a")
    limit = manifest.limits.tokens - 2
    inputs = {}
    for name, text in TEXTS.items():
        chunks = pipeline.run(text, chunking=Chunking(lambda _: limit, limit, Progress()))
        inputs[name] = [c.piece.phonemes for c in chunks.chunks]
    (out / "inputs.json").write_text(json.dumps(inputs, ensure_ascii=False, indent=1))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 1e6:.1f} MB): carry it and run `python gpu.py run` in it")


def run(directory: Path, repeat: int, out: Path | None, dry_run: bool) -> dict:
    sys.path.insert(0, str(directory))
    import numpy as np
    import torch

    from kokoro_ext.build.model import build_model
    from kokoro_ext.run.pipeline import synthesize_ids, voice_style
    from kokoro_ext.run.synthesizer import Synthesizer
    from kokoro_ext.text import phonemes_to_ids
    from kokoro_ext.tools.engines import torch_provider
    from kokoro_ext.tools.validate import format_table, verdict, validate

    device = "cpu" if dry_run else "cuda"
    synth = Synthesizer(directory / "artifacts")  # refuses a machine it cannot run on
    if importlib.util.find_spec("kokoro") is None:
        # the PyTorch reference is kokoro's KModel (kokoro_ext.build.model)
        raise SystemExit(
            "the PyTorch reference needs the kokoro package (0.9.4) and its dependencies "
            "(transformers, misaki, ...) on this machine; the bundle does not carry them"
        )
    report: dict = {"device": device, "manifest_target": dict(synth.manifest.target)}
    if device == "cuda":
        from kokoro_ext.run import cuda

        name, arch = cuda.device_architecture(0)
        report.update(gpu=name, architecture=arch, torch=torch.__version__)
        print(f"GPU: {name} ({arch}); torch {torch.__version__}")
    model = build_model(synth.config, weights=None, seed=0)
    model.load_state_dict(torch.load(directory / "model.pt"))
    inputs = json.loads((directory / "inputs.json").read_text())
    if dry_run:
        inputs = dict(list(inputs.items())[:1])

    # every stage against PyTorch float32 on the same device, and the waveform's SNR
    phonemes = inputs[next(iter(inputs))][0]
    results = validate(synth, phonemes, seed=0, device=device, model=model)
    table = format_table(results)
    passed, rule = verdict(synth.manifest.weight_dtype, results, synth.manifest.precision)
    print(table, "\n", rule, sep="")
    report["stages"] = [r.__dict__ for r in results]
    report["float32_bound"] = {"passed": passed, "rule": rule}

    # warm times per text: the build and PyTorch eager, chunk by chunk, same host steps
    eager = torch_provider(model, device=device)
    engines = {"tvm": synth._stage, "torch-eager": eager}

    def speak(stages, chunks):
        first = None
        start = time.perf_counter()
        for phon in chunks:
            ids = phonemes_to_ids(phon, synth.vocab)
            style = voice_style(synth.voice, len(ids) - 2)
            synthesize_ids(stages, synth.geometry, ids, style, synth.limits, 1.0, 0)
            if device == "cuda":
                torch.cuda.synchronize()
            first = first if first is not None else time.perf_counter() - start
        return time.perf_counter() - start, first

    for stages in engines.values():  # warm-up: loads, first-call allocations
        speak(stages, inputs[next(iter(inputs))])
    times: dict = {}
    for text, chunks in inputs.items():
        times[text] = {}
        for engine, stages in engines.items():
            runs = [speak(stages, chunks) for _ in range(repeat)]
            total = statistics.median(r[0] for r in runs)
            first = statistics.median(r[1] for r in runs)
            times[text][engine] = {"seconds": total, "first_chunk_seconds": first}
        ratio = times[text]["tvm"]["seconds"] / times[text]["torch-eager"]["seconds"]
        times[text]["tvm_over_eager"] = ratio
        print(f"{text:<10} tvm {times[text]['tvm']['seconds'] * 1e3:9.1f} ms "
              f"(first {times[text]['tvm']['first_chunk_seconds'] * 1e3:7.1f})  eager "
              f"{times[text]['torch-eager']['seconds'] * 1e3:9.1f} ms  x{ratio:.2f}")  # fmt: skip
    report["warm"] = times
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        report["memory"] = {
            "device_used_bytes": total - free,
            "torch_peak_bytes": torch.cuda.max_memory_allocated(),
        }
        print(f"device memory in use: {(total - free) / 2**20:.0f} MiB "
              f"(torch's peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB)")  # fmt: skip
    if out is not None:
        out.write_text(json.dumps(report, indent=1, default=str))
    _ = np  # numpy is the runner's; imported here so that a missing one fails first
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: write the bundle to carry")
    p.add_argument("--artifacts", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("gpu-bundle"))
    r = sub.add_parser("run", help="there: run the bundle this script is in")
    r.add_argument("--bundle", type=Path, default=HERE)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--out", type=Path)
    r.add_argument("--dry-run", action="store_true", help="on the CPU: a check of the script")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.artifacts, args.out)
    else:
        run(args.bundle, args.repeat, args.out, args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
