"""Loading refuses a build it cannot run faithfully; an interrupted build changes nothing."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from kokoro_ext.build import driver, environment, target
from kokoro_ext.build.cli import parse_args
from kokoro_ext.run import artifacts, cpu
from kokoro_ext.build.compiler import CompiledStage, Parameter
from kokoro_ext.run.manifest import FORMAT, Source
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.build.stages import MAX_TOKENS
from kokoro_ext.tools.validate import main as validate_main
from kokoro_ext.tools.validate import validate

from small_build import build_small


def _link_or_copy(source, destination):
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


@pytest.fixture
def copy(build_dir, tmp_path):
    """A scratch copy of the small build (half a gigabyte: hard links where possible).

    Change its files only through _rewrite, which never writes into a shared inode.
    """
    return shutil.copytree(build_dir[0], tmp_path / "artifacts", copy_function=_link_or_copy)


def _rewrite(path, data: bytes):
    path.unlink()
    path.write_bytes(data)


def _edit_manifest(directory, **changes):
    manifest = json.loads((directory / artifacts.MANIFEST).read_text())
    manifest.update(changes)
    _rewrite(directory / artifacts.MANIFEST, json.dumps(manifest).encode())


def test_the_copy_loads(copy):
    assert Synthesizer(copy).manifest.limits.tokens == MAX_TOKENS


@pytest.mark.parametrize(
    "file", [artifacts.CONFIG, artifacts.VOICE, "text.so", "decoder.so", "decoder.weights"]
)
def test_a_changed_byte_names_the_file(copy, file):
    path = copy / file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    _rewrite(path, bytes(data))
    with pytest.raises(ValueError, match=rf"{file} does not match manifest.json.*rebuild with"):
        Synthesizer(copy).load()  # a stage's files are hashed when it is loaded


@pytest.mark.parametrize("file", [artifacts.VOICE, "prosody.so", "text.weights"])
def test_a_missing_file_is_named(copy, file):
    (copy / file).unlink()
    with pytest.raises(ValueError, match=rf"{file} is listed in manifest.json but missing"):
        Synthesizer(copy)


def test_another_tvm_version_is_refused(copy):
    _edit_manifest(copy, tvm="0.19.0")
    with pytest.raises(ValueError, match="built with TVM 0.19.0, this is TVM"):
        Synthesizer(copy)


def test_another_patch_series_is_refused_by_validation_not_by_loading(copy):
    here = environment.installed_patches()
    assert here, "the tests run from a source checkout with the patch series"
    applied = next(p for p, state in here.items() if state == "already applied")
    _edit_manifest(copy, patches={**here, applied: "not applied"})
    with pytest.raises(ValueError, match=rf"patch {applied} 'not applied', but here it is "):
        environment.check_build_compiler(copy)
    assert validate_main(["--artifacts", str(copy)]) == 2
    Synthesizer(copy)  # the patches change the compiler only: the build still loads
    _edit_manifest(copy, patches={**here, "0099-new.patch": "already applied"})
    message = "0099-new.patch 'already applied', but here it is 'not in this series'"
    with pytest.raises(ValueError, match=message):
        environment.check_build_compiler(copy)


def test_patch_comparison_names_a_patch_the_build_did_not_have():
    with pytest.raises(ValueError, match=r"0002-b.patch 'not in the series then'.*apply.sh"):
        environment.check_patches(
            {"0001-a.patch": "already applied"},
            {"0001-a.patch": "already applied", "0002-b.patch": "not applied"},
            "dir",
        )
    environment.check_patches({"p": "already applied"}, {"p": "already applied"}, "dir")


def test_a_build_for_a_cpu_this_host_is_not_is_refused(copy, monkeypatch):
    # Simulate a host with only x86-64-v2 (no AVX): a build for znver3 needs AVX2.
    v2 = target.cpu_model_features("x86-64-v2")
    known = target.llvm_host().features
    host = cpu.HostCPU("x86-64-v2", {f: f in v2 for f in known})
    monkeypatch.setattr(cpu.HostCPU, "detect", staticmethod(lambda: host))
    znver3 = target.parse_target("llvm -mcpu=znver3")
    features = sorted(target.instruction_features(target.target_features(znver3)))
    _edit_manifest(copy, target=znver3, cpu_features=features)
    with pytest.raises(ValueError, match=r"compiled for CPU 'znver3'.*avx2.*Rebuild on this"):
        Synthesizer(copy)


def _tree(directory):
    return {p.name: artifacts.sha256(p) for p in sorted(directory.iterdir())}


def test_an_interrupted_build_leaves_the_previous_one_in_place(copy, monkeypatch):
    before = _tree(copy)
    calls = []
    signature = artifacts.read_manifest(copy).stages["decoder"].signature

    class Partial:  # the first stage "compiles" and is written to the staging directory
        def export_library(self, path, fcompile=None, fpack_imports=None):
            with open(path, "wb") as f:
                f.write(b"half a build")

    def second_stage_fails(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("interrupted")
        return CompiledStage(
            Partial(), 0, {}, [np.zeros(3, np.float32)], [Parameter("w", (3,), "float32")],
            signature,
        )

    monkeypatch.setattr(driver, "compile_stage", second_stage_fails)
    monkeypatch.setattr(driver, "load_library", lambda path: None)
    monkeypatch.setattr(driver, "transform_weights", lambda library, w: w)
    with pytest.raises(RuntimeError, match="interrupted") as failed:  # in-process: patched
        build_small(copy.parent, log=lambda line: None, jobs=1)
    assert len(calls) == 2
    assert _tree(copy) == before
    assert not [p.name for p in copy.parent.iterdir() if p.name.startswith(".")]
    # the log of the failed build is kept beside the directory, named in the error
    log = copy.parent / f"{copy.name}.failed-{artifacts.LOG}"
    assert failed.value.__notes__ == [f"the build's log: {log}"]
    assert "RuntimeError: interrupted" in log.read_text()
    audio = Synthesizer(copy).synthesize_phonemes("hˈI ðˈɛɹ.").audio
    assert audio.size and np.isfinite(audio).all()


def test_a_killed_build_is_recovered_by_the_next_one(copy):
    # A build killed between its two renames leaves only .artifacts.old-PID, and a killed
    # build leaves its staging directory; the next build puts the old one back first.
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    before = _tree(copy)
    staging = copy.with_name(f".{copy.name}.building-{dead.pid}-x1y2")
    staging.mkdir()
    (staging / "decoder.so").write_bytes(b"half")
    copy.rename(copy.with_name(f".{copy.name}.old-{dead.pid}"))
    driver._recover_killed_build(copy)
    assert _tree(copy) == before
    assert not [p.name for p in copy.parent.iterdir() if p.name.startswith(".")]
    Synthesizer(copy)  # verifies every file against the manifest


def _weights_only(directory, *flags):
    options = parse_args(["--weights-only", "--out", str(directory), *flags])
    return driver.build(options, log=lambda line: None)


def test_weights_only_repoints_a_build_without_compiling(copy):
    before = artifacts.read_manifest(copy)
    _weights_only(copy, "--random-weights", "--seed", "1")
    after = artifacts.read_manifest(copy)
    assert after.weights == Source(random_seed=1)
    for name, entry in after.stages.items():
        assert entry.sha256 == before.stages[name].sha256  # the same libraries
        assert entry.signature == before.stages[name].signature
        assert entry.weights.sha256 != before.stages[name].weights.sha256
    # validate rebuilds the PyTorch model from the manifest (seed 1): the stages agree
    results = validate(Synthesizer(copy), "hˈI ðˈɛɹ.", seed=0)
    stages = [r for r in results if r.name.startswith(("text.", "prosody.", "source.", "decoder."))]
    assert stages and all(r.max_abs <= 1e-4 for r in stages), stages


def test_weights_only_refuses_a_checkpoint_of_another_architecture(copy):
    manifest = json.loads((copy / artifacts.MANIFEST).read_text())
    manifest["stages"]["text"]["parameters"].append(["bert.no_such.weight", "float32", [3]])
    _rewrite(copy / artifacts.MANIFEST, json.dumps(manifest).encode())
    with pytest.raises(ValueError, match="bert.no_such.weight.*build it from scratch"):
        _weights_only(copy, "--random-weights")


def test_a_manifest_without_cpu_features_is_refused(copy):
    manifest = json.loads((copy / artifacts.MANIFEST).read_text())
    del manifest["cpu_features"]
    _rewrite(copy / artifacts.MANIFEST, json.dumps(manifest).encode())
    with pytest.raises(ValueError, match="records no 'cpu_features'.*rebuild"):
        Synthesizer(copy)


def test_a_build_of_the_previous_format_is_refused(copy):
    _edit_manifest(copy, format=FORMAT - 1)
    with pytest.raises(ValueError, match=rf"has format {FORMAT - 1}.*rebuild"):
        Synthesizer(copy)


def test_the_weights_files_hold_what_main_takes(build_dir):
    # the build ran each library's weight transform on the checkpoint's parameters: the
    # stored arrays are its outputs, which the runtime passes to main as they are
    from kokoro_ext.build.compiler import transform_weights
    from kokoro_ext.build.model import build_model
    from kokoro_ext.build.stages import STAGES
    from kokoro_ext.run.runner import load_library
    from kokoro_ext.run.weights import load_weights

    directory = build_dir[0]
    manifest = artifacts.read_manifest(directory)
    config = json.loads((directory / artifacts.CONFIG).read_text())
    model = build_model(config, weights=None, seed=manifest.weights.random_seed)
    for name, entry in manifest.stages.items():
        module = dict(STAGES[name].module(model).named_parameters())
        checkpoint = [module[p.name].detach().numpy() for p in entry.parameters]
        expected = transform_weights(load_library(directory / entry.file), checkpoint)
        stored = load_weights(directory / entry.weights.file, entry.weights.tensors)
        assert len(stored) == len(expected)
        assert all(np.array_equal(s, e) for s, e in zip(stored, expected)), name


def test_a_truncated_weights_file_is_refused_when_loaded(copy):
    path = copy / "decoder.weights"
    _rewrite(path, path.read_bytes()[:-100])
    manifest = json.loads((copy / artifacts.MANIFEST).read_text())
    manifest["stages"]["decoder"]["weights"]["sha256"] = artifacts.sha256(path)  # as if so built
    _rewrite(copy / artifacts.MANIFEST, json.dumps(manifest).encode())
    with pytest.raises(ValueError, match="decoder.weights holds .* truncated or from another build"):
        Synthesizer(copy).load()
