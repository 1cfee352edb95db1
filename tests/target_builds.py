"""What a small-config build writes for each ``--target``, reduced to what must not change
when the build's code is reorganised: the manifest without its times, and a hash of every
module ``tvm.compile`` generated code from (the Relax module after the pipeline, with its
TIR PrimFuncs: what the VM's code and the libraries' kernels are made of), in the order
the build compiled them (one process: ``--jobs 1``, ``PYTHONHASHSEED=0``).

``PYTHONHASHSEED=0 python tests/target_builds.py [TARGET ...]`` records them into
tests/data/target_builds.json (the reference tests/test_target_builds.py compares
against); record it only from a build whose output is known good.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from tvm.relax import vm_build

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "data" / "target_builds.json"
#: The build's modules differ with Python's string hashing (the order of sets of names
#: some passes walk, and so the names and order of the functions they make): a reference
#: is of one seed.
HASH_SEED = "0"

#: The --target values compared: the CPU (this host, and x86-64-v3 given as a JSON dict),
#: a cross build for ARM, the browser's CPU and GPU, CUDA for every architecture and one.
TARGETS = {
    "llvm": "llvm",
    "x86-64-v3": json.dumps({"kind": "llvm", "mcpu": "x86-64-v3"}),
    "rpi5": "rpi5",
    "wasm": "wasm",
    "webgpu": "webgpu",
    "cuda": "cuda",
    "cuda-sm90": "cuda-sm90",
}


#: The machine a build for ``llvm`` (this host) is made for: the recorded Zen 3 guest of
#: tests/data/host-zen3-kvm.json, whatever machine runs the build, so that the reference
#: holds anywhere (its code must run here: the build runs its weight transform).
PINNED_HOST = HERE / "data" / "host-zen3-kvm.json"


@contextlib.contextmanager
def pinned_host() -> Iterator[None]:
    """Meanwhile, LLVM's host query answers PINNED_HOST's CPU."""
    from kokoro_ext.build import target
    from kokoro_ext.run.cpu import HostCPU

    recorded = json.loads(PINNED_HOST.read_text())
    host = HostCPU(recorded["name"], recorded["features"])
    original = target.llvm_host
    target.llvm_host = lambda: host
    try:
        yield
    finally:
        target.llvm_host = original


_SLOT = re.compile(r"^\s*H\[T\.int64\((\d+)\)\] = ")
_READ = re.compile(r"H\[T\.int64\((\d+)\)\]")


def canonical(script: str) -> str:
    """``script`` with each run of independent shape-slot assignments of the VM's shape
    function (``H[T.int64(k)] = <expression of other slots>``) sorted: TVM's VMShapeLower
    emits them in an order that changes from run to run of the same build (it walks a
    map keyed by object addresses), so the libraries differ in bytes while computing
    the same.  A run in which one reads a slot another of the run writes stays as is."""
    lines = script.splitlines()
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        written = {int(_SLOT.match(line).group(1)) for line in run}
        read = {int(n) for line in run for n in _READ.findall(line.split(" = ", 1)[1])}
        out.extend(sorted(run) if not written & read else run)
        run.clear()

    for line in lines:
        if _SLOT.match(line):
            run.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


@contextlib.contextmanager
def recorded_modules(stages: Collection[str] | None = None) -> Iterator[dict[str, list[dict]]]:
    """Meanwhile, every module ``tvm.compile`` lowers to code in the build's stages (in
    one process), per stage: its target, its number of functions and the sha256 of its
    TVMScript, in the order compiled.  With ``stages``, the build compiles only those."""
    from kokoro_ext.build import driver

    seen: dict[str, list[dict]] = {}
    codegen, link = vm_build._vmcodegen, vm_build._vmlink
    compile_stage, all_stages = driver.compile_stage, driver.STAGES
    current: list[str] = []

    def recording_stage(spec, *args, **kwargs):
        current.append(spec.name)
        return compile_stage(spec, *args, **kwargs)

    def recording_codegen(builder, mod, *args, **kwargs):
        script = mod.script()
        seen.setdefault(current[-1], []).append({
            "functions": len(mod.get_global_vars()),
            "script_sha256": hashlib.sha256(canonical(script).encode()).hexdigest(),
        })  # fmt: skip
        if dump := os.environ.get("TARGET_BUILDS_DUMP"):  # the scripts, to compare by eye
            Path(dump, f"{current[-1]}-{len(seen[current[-1]])}.py").write_text(script)
        return codegen(builder, mod, *args, **kwargs)

    def recording_link(builder, target, *args, **kwargs):
        seen[current[-1]][-1]["target"] = str(target)
        return link(builder, target, *args, **kwargs)

    vm_build._vmcodegen, vm_build._vmlink = recording_codegen, recording_link
    driver.compile_stage = recording_stage
    if stages is not None:
        driver.STAGES = {name: spec for name, spec in all_stages.items() if name in stages}
    try:
        yield seen
    finally:
        vm_build._vmcodegen, vm_build._vmlink = codegen, link
        driver.compile_stage, driver.STAGES = compile_stage, all_stages


def _without_times(manifest: dict) -> dict:
    """``manifest`` without its times, without what says which code made it rather
    than what it made (the package's version, the TVM patches' states), and without the
    stage libraries' sha256, which changes from run to run (``canonical``: the modules'
    hashes stand for the libraries), nor a CUDA build's steps module's, whose bytes are
    the host compiler's and nvcc's of the day (its kernels are tests/test_device_steps.py's)."""
    manifest = dict(manifest)
    for key in ("build_seconds", "kokoro_ext", "patches"):
        manifest.pop(key, None)
    if "steps" in manifest.get("requires", {}):
        steps = {k: v for k, v in manifest["requires"]["steps"].items() if k != "sha256"}
        manifest["requires"] = {**manifest["requires"], "steps": steps}
    manifest["stages"] = {
        name: {k: v for k, v in entry.items() if k not in ("seconds", "sha256")}
        for name, entry in manifest["stages"].items()
    }
    return manifest


def _file_hashes(out: Path) -> dict[str, str]:
    """sha256 of every file of the build but its log and manifest (the manifest lists
    the stage libraries' and weights' own)."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in ("build.log", "manifest.json")
    }


def record(target: str, root: Path, stages: Collection[str] | None = None) -> dict:
    """The reduced build of the small config for ``target`` under ``root`` (of only
    ``stages``, if given)."""
    from small_build import build_small

    with pinned_host(), recorded_modules(stages) as modules:
        out = build_small(root, log=lambda _: None, jobs=1, target=target)
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        "manifest": _without_times(manifest),
        "files": _file_hashes(out),
        "modules": modules,
    }


def load_reference() -> dict:
    return json.loads(REFERENCE.read_text())


def main(
    names: list[str], files: Path | None = None, out: Path = REFERENCE,
    stages: Collection[str] | None = None,
) -> None:
    """Record ``names`` (default: every target) into ``out`` (of ``stages`` only, if
    given); with ``files``, every output file's sha256 into ``files`` too (not kept as
    reference: the page's files and voices change with the page)."""  # fmt: skip
    reference = json.loads(out.read_text()) if out.is_file() else {}
    hashes = json.loads(files.read_text()) if files and files.is_file() else {}
    for name in names or list(TARGETS):
        with tempfile.TemporaryDirectory() as root:
            reduced = record(TARGETS.get(name, name), Path(root), stages)
        hashes[name] = reduced.pop("files")
        reference[name] = reduced
        out.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
        if files:
            files.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(reference[name]['modules'])} modules")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="*", help=f"of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--files", type=Path, help="also every output file's sha256, here")
    parser.add_argument("--out", type=Path, default=REFERENCE, help="default: %(default)s")
    parser.add_argument("--stages", help="only these, comma-separated (default: all)")
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        parser.error(f"run with PYTHONHASHSEED={HASH_SEED}: the build's modules depend on it")
    main(args.targets, args.files, args.out, args.stages.split(",") if args.stages else None)
