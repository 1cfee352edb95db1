"""The typed manifest: JSON round trip, the field at fault named, the stage signatures
checked against what the runtime expects (kokoro_ext.run.contract)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from kokoro_ext.build.stages import STAGES
from kokoro_ext.run import artifacts, contract
from kokoro_ext.run.manifest import FORMAT, Manifest, Source
from kokoro_ext.run.runner import NamedStage
from kokoro_ext.run.synthesizer import Synthesizer

from manifests import example_manifest


def _json_round_trip(manifest: Manifest) -> Manifest:
    return Manifest.from_json(json.loads(json.dumps(manifest.to_json())))


def test_a_manifest_survives_json():
    manifest = example_manifest()
    assert _json_round_trip(manifest) == manifest
    random = example_manifest(weights=Source(random_seed=3))
    assert _json_round_trip(random).weights.random_seed == 3


def test_the_build_writes_what_the_manifest_reads(build_dir):
    path = build_dir[0] / artifacts.MANIFEST
    written = json.loads(path.read_text())
    assert written["format"] == FORMAT
    assert Manifest.from_json(written).to_json() == written
    signature = Manifest.from_json(written).stages["source"].signature
    assert [t.shape for t in signature.inputs] == [
        ("batch", "2*frames"), ("batch",), ("batch", "600*frames", 9)
    ]  # fmt: skip
    assert signature.outputs[0].shape[-1] == "120*frames+1"
    assert signature.axes == {"batch": (1, 16), "frames": (2, None)}


def test_the_build_stages_are_what_the_runtime_expects():
    assert list(STAGES) == list(contract.STAGES)
    for name, spec in STAGES.items():
        expected = contract.STAGES[name]
        assert spec.inputs == tuple(n for n, _ in expected.inputs), name
        assert spec.outputs == tuple(n for n, _ in expected.outputs), name


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda m: m.pop("cpu_features"), r"records no 'cpu_features'"),
        (lambda m: m["stages"]["text"].pop("signature"), r"records no 'stages.text.signature'"),
        (lambda m: m["limits"].update(tokens="many"),
         r"field 'limits.tokens' is 'many', not an integer"),
        (lambda m: m["stages"]["decoder"]["weights"]["tensors"].append([[3], "float32"]),
         r"field 'stages.decoder.weights.tensors\[\d+\]' is .*not \[shape, dtype, offset\]"),
        (lambda m: m.update(format=FORMAT - 1),
         rf"has format {FORMAT - 1}, this kokoro_ext reads format {FORMAT}"),
        (lambda m: m.pop("format"), r"has format None"),
    ],
)  # fmt: skip
def test_a_missing_or_wrong_field_is_named(build_dir, edit, message):
    value = json.loads((build_dir[0] / artifacts.MANIFEST).read_text())
    edit(value)
    with pytest.raises(ValueError, match=message + ".*rebuild the artifacts"):
        Manifest.from_json(value)


@pytest.fixture
def copy(build_dir, tmp_path):
    return shutil.copytree(build_dir[0], tmp_path / "artifacts")


def _edit(directory, edit) -> None:
    path = directory / artifacts.MANIFEST
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value))


def test_swapped_outputs_are_refused_naming_the_stage_and_both(copy):
    def swap(manifest):
        outputs = manifest["stages"]["text"]["signature"]["outputs"]
        outputs[1], outputs[2] = outputs[2], outputs[1]

    _edit(copy, swap)
    message = (
        r"stage 'text': outputs are \('d', 't_en', 'duration'\), this runtime expects "
        r"\('d', 'duration', 't_en'\); rebuild the artifacts"
    )
    with pytest.raises(ValueError, match=message):
        Synthesizer(copy)


def test_another_dtype_is_refused_naming_the_input(copy):
    _edit(copy, lambda m: m["stages"]["prosody"]["signature"]["inputs"][1].__setitem__(1, "int32"))
    with pytest.raises(ValueError, match=r"stage 'prosody': input 'lengths' is int32, this "
                       r"runtime expects int64"):
        Synthesizer(copy)


def test_a_build_of_another_format_is_told_to_rebuild(copy):
    _edit(copy, lambda m: m.update(format=6))
    with pytest.raises(ValueError, match=r"manifest.json: has format 6, this kokoro_ext reads "
                       rf"format {FORMAT}.*rebuild the artifacts \(`python -m kokoro_ext.build"):
        Synthesizer(copy)


def test_stages_are_called_by_name():
    stage = NamedStage(lambda a, b: [a - b, a + b], ("a", "b"), ("difference", "sum"))
    assert stage(b=np.int64(1), a=np.int64(3)) == {"difference": 2, "sum": 4}
    assert stage({"a": 3, "b": 1}) == {"difference": 2, "sum": 4}
    with pytest.raises(TypeError, match=r"missing \['b'\]; unknown \['c'\]"):
        stage(a=1, c=2)
