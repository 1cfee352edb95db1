"""What ``python -m kokoro_ext.build --target X`` writes for each target, against the
reference tests/data/target_builds.json (tests/target_builds.py recorded it): the manifest
but for its times, and every module lowered to code (the Relax module after the pipeline
with its TIR: the libraries' code) the same.  And a target kind of a test's own, one
class registered, built without anything of the driver or the compiler knowing it.

Each target builds the stages the reference holds (the ``source`` stage: the phase
scan, weights, and a weight transform compiled apart where the target has one), in a
process of its own with the reference's PYTHONHASHSEED.  A change that changes what a
build writes on purpose records the reference again:
``PYTHONHASHSEED=0 python tests/target_builds.py --stages source``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest
import tvm

from kokoro_ext.build.backend import CpuTarget, register, resolve, unregister
from kokoro_ext.build.target import parse_target
from target_builds import HASH_SEED, TARGETS, load_reference, record

QUICK_STAGES = ("source",)
TOOLS = {
    "rpi5": "aarch64-linux-gnu-gcc",
    "wasm": "emcc",
    "webgpu": "emcc",
    "cuda": "nvcc",
    "cuda-sm90": "nvcc",
}


@pytest.mark.parametrize("name", list(TARGETS))
def test_a_target_builds_what_it_built(name, tmp_path):
    tool = TOOLS.get(name)
    if tool and shutil.which(tool) is None and not os.environ.get("CI"):
        pytest.skip(f"needs {tool}")
    want = load_reference()[name]
    out = tmp_path / "built.json"
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(filter(None, [os.path.dirname(here), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, os.path.join(here, "target_builds.py"), name, "--out", str(out),
         "--stages", ",".join(want["modules"])],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads(out.read_text())[name]
    assert got["manifest"] == want["manifest"]
    assert got["modules"] == want["modules"]


def test_the_reference_holds_every_target():
    reference = load_reference()
    assert set(reference) == set(TARGETS)
    for name, built in reference.items():
        assert set(built["modules"]) == set(built["manifest"]["stages"]) >= set(QUICK_STAGES)
        assert all(m["script_sha256"] for ms in built["modules"].values() for m in ms), name


# -- a kind of the test's own ------------------------------------------------------------

PASSES_RUN: list[str] = []
LINKED: list[str] = []


@tvm.transform.module_pass(opt_level=0, name="tests.Toy")
def _toy_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    PASSES_RUN.append(", ".join(sorted(g.name_hint for g in mod.get_global_vars())))
    return mod


@dataclass(frozen=True)
class ToyTarget(CpuTarget):
    """An llvm variant: any x86-64 CPU, TVM's own lowering of everything (no native
    kernels), its own pipeline (a pass of its own before the CPU's), its own library
    suffix and link."""

    options: ClassVar = {**CpuTarget.options, "dense": ("tvm",), "lstm_backend": ("tir",)}
    library_suffix: ClassVar[str] = ".toy.so"

    @classmethod
    def named(cls):
        return {"toy": cls("toy", "a toy", parse_target("llvm -mcpu=x86-64"), {"toy": True})}

    @classmethod
    def claim(cls, target, text, host=None):
        return None  # by its word only

    def pipeline(self, options):
        return tvm.transform.Sequential([_toy_pass, super().pipeline(options)])

    def fcompile(self):
        from tvm.support import cc

        def link(output, objects, options=None, **kwargs):
            LINKED.append(os.path.basename(output))
            return cc.create_shared(output, objects, options, **kwargs)

        link.output_format = "so"
        return link


@pytest.fixture
def toy():
    register(ToyTarget)
    yield
    unregister(ToyTarget)
    PASSES_RUN.clear()
    LINKED.clear()


def test_a_new_target_kind_is_one_class(toy, tmp_path):
    target = resolve("toy")
    assert isinstance(target, ToyTarget) and target.target["mcpu"] == "x86-64"
    with pytest.raises(ValueError, match="--dense native: a build for toy takes --dense tvm"):
        target.choose(dense="native")
    built = record("toy", tmp_path, QUICK_STAGES)
    manifest = built["manifest"]
    assert manifest["target"] == {"kind": "llvm", "mcpu": "x86-64"}
    assert manifest["requires"] == {"toy": True}
    assert manifest["dense"] == "tvm" and manifest["lstm_backend"] == "tir"
    entry = manifest["stages"]["source"]
    assert entry["file"] == "source.toy.so" and LINKED == ["source.toy.so"]
    # its pipeline ran, once, on the source stage's module as imported (the weight
    # transform is lifted out of main later, by the CPU pipeline it runs after its pass)
    assert PASSES_RUN == ["main"]
    (module,) = built["modules"]["source"]  # no transform apart: the library's own runs
    assert json.loads(module["target"])["mcpu"] == "x86-64"
    assert (tmp_path / "artifacts" / "source.toy.so").read_bytes()[:4] == b"\x7fELF"
