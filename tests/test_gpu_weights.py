"""bench/gpu.py's real weights where no GPU is: an int8 export's parameters in parts and
back bit for bit (the small config's export, tests/onnx_exports.py), the device calls
that carry them under the limit, ``run --dry-run --weights real`` in a process that sees
only the bundle, torch and numpy, and ``score``'s word error rate table."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from gpu_bundle import gpu_script, run_in_bundle
from kokoro_ext.build.model import build_model, small_config
from kokoro_ext.build.model.onnx_import import import_onnx, quantized_codes
from onnx_exports import write_export

MiB = 2**20


@pytest.fixture(scope="module")
def gpu():
    return gpu_script()


@pytest.fixture(scope="module")
def export(gpu, tmp_path_factory):
    """(path, imported state dict) of an int8 export of the small config's model with the
    bounded random durations (reference_model: a dry run's chunks stay in the frames)."""
    path = tmp_path_factory.mktemp("onnx") / "kokoro-small.int8.onnx"
    write_export(gpu.reference_model(small_config(), seed=3), path, quantized=True)
    target = build_model(small_config(), seed=99)
    imported = import_onnx(path, target)
    return path, imported, quantized_codes(path, target, imported)


def test_parts_give_the_state_dict_back_bit_for_bit(gpu, export, tmp_path):
    path, imported, quantized = export
    state = imported.state_dict
    entries = gpu.compact_state(state, quantized)
    kinds = {key: next(iter(entry)) for key, entry in entries.items()}
    # the int8 weights travel as their codes: every matrix and convolution of the export
    assert sum(k == "codes" for k in kinds.values()) >= 40
    # int8; uint8 and an offset where a uint8 convolution's zero point takes q - zero_point
    # out of int8's range
    codes = {k: entries[k]["codes"].dtype for k in kinds if kinds[k] == "codes"}
    assert set(codes.values()) == {np.dtype(np.int8), np.dtype(np.uint8)}
    assert any("offset" in entries[k] for k in codes)
    assert all(d == np.uint8 for k, d in codes.items() if "offset" in entries[k])
    # the parameters the export lacks are one value each (identity norms, ALBERT's pooler)
    assert kinds["bert.pooler.weight"] == "fill"
    sizes = {key: gpu._stored_bytes(key, entry) for key, entry in entries.items()}
    calls = gpu.plan_parts(sizes, bundle=0, tracked=0, limit=sum(sizes.values()) // 2 + 2 * MiB,
                           margin=MiB)  # fmt: skip
    assert len(calls) >= 2
    shapes = {key: list(tensor.shape) for key, tensor in state.items()}
    paths = gpu.write_parts(entries, shapes, calls, tmp_path / "weights", {"path": path.name, "sha256": "x"})
    stored = sum(p.stat().st_size for p in paths)
    assert stored < 0.3 * 4 * sum(t.numel() for t in state.values())  # of float32
    arrays, source = gpu.read_parts([p.parent for p in paths])
    assert source == {"path": path.name, "sha256": "x"}
    assert list(arrays) == list(state)
    for key, tensor in state.items():
        want = tensor.numpy()
        assert arrays[key].dtype == np.float32 and arrays[key].shape == want.shape, key
        assert np.array_equal(arrays[key].view(np.uint32), want.view(np.uint32)), key
    # a part missing (the first call's copy gone): refused, naming where it should be
    with pytest.raises(SystemExit, match=gpu.DEVICE_PARTS):
        gpu.read_parts([paths[-1].parent])
    with pytest.raises(SystemExit, match="both part 1"):
        gpu.read_parts([paths[0], paths[0].parent, *[p.parent for p in paths[1:]]])


def test_the_device_calls_carry_at_most_the_limit(gpu):
    """The real model's case (docs/cuda.md): a 49.7 MiB bundle, 4.4 MiB of tracked files
    and 60 MiB of parts, in tensors of up to 8 MiB and many small ones."""
    big = [8, 8, 8, 7, 6, 5, 4, 3, 2, 1, 0.5]
    sizes = {f"t{i}": int(s * MiB) for i, s in enumerate(big)}
    sizes.update({f"s{i}": 20_000 + i for i in range(400)})
    bundle, tracked = int(49.7 * MiB), int(4.4 * MiB)
    calls = gpu.plan_parts(sizes, bundle, tracked)
    assert sorted(k for c in calls for k in c) == sorted(sizes)
    room = gpu.CARRY_LIMIT - gpu.CARRY_MARGIN - tracked
    carried = [sum(sizes[k] for k in c) for c in calls]
    assert all(c <= room for c in carried[:-1]) and carried[-1] + bundle <= room
    # as few calls as the bytes need
    assert len(calls) == -(-(sum(sizes.values()) + bundle) // room) == 2
    with pytest.raises(SystemExit, match="do not fit a device call"):
        gpu.plan_parts(sizes, 61 * MiB, tracked)
    with pytest.raises(SystemExit, match="fits no device call"):
        gpu.plan_parts({"huge": 60 * MiB}, bundle, tracked)


def test_bundle_dry_run_with_real_weights(gpu, export, build_dir, tmp_path):
    onnx, imported, _ = export
    artifacts, _ = build_dir
    here = f"{sys.version_info.major}.{sys.version_info.minor}"  # no download in a test
    logged: list[str] = []
    bundle = gpu.prepare([artifacts], tmp_path / "bundle", python=here, log=logged.append,
                         real_weights=onnx, weights_out=tmp_path / "weights")  # fmt: skip
    spec = json.loads((bundle / gpu.QUALITY_INPUTS).read_text())
    assert [len(spec["sets"][s]) for s in ("plain", "written")] == [24, 16]
    assert np.load(bundle / gpu.QUALITY_VOICE).shape == (510, 1, 256)
    folders = sorted((tmp_path / "weights").iterdir())
    assert [f.name for f in folders] == [str(n) for n in range(1, len(folders) + 1)]
    # each call under the limit: the last carries the bundle too, the commands say so
    calls = [line for line in logged if line.startswith("device call")]
    assert len(calls) == len(folders)
    assert f"--parts {gpu.DEVICE_PARTS}" in calls[-1] or len(folders) == 1
    report_path, audio = tmp_path / "report.json", tmp_path / "audio"
    done = run_in_bundle(
        bundle,
        "import gpu; sys.exit(gpu.main(['run', '--dry-run', '--repeat', '1', '--weights', "
        f"'real', '--parts', *{[str(f) for f in folders]!r}, '--out', {str(report_path)!r}, "
        f"'--audio', {str(audio)!r}]))",
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["weights"] == "real"
    assert report["weights_source"]["path"] == onnx.name
    entry = report["builds"][artifacts.name]
    assert entry["fidelity"]["tf32_off"]["passed"], done.stdout
    assert set(report["quality"]) == {artifacts.name, "kmodel"}
    for engine, written in report["quality"].items():
        with np.load(audio / written["file"]) as z:
            index = json.loads(str(z["__index__"]))
            # the shortest sentence of each set, 16-bit at 24 kHz, as long as its frames
            assert [s["set"] for s in index["sentences"]] == ["plain", "written"]
            assert index["sentences"][0]["text"] == "Hello world."
            for s in index["sentences"]:
                assert z[s["key"]].dtype == np.int16
                assert len(z[s["key"]]) == s["frames"] * 600 and np.abs(z[s["key"]]).max() > 0
    # the build and KModel chose the same durations (float32 on one CPU)
    frames = {e: [s["frames"] for s in json.loads(str(np.load(audio / w["file"])["__index__"]))["sentences"]]
              for e, w in report["quality"].items()}  # fmt: skip
    assert frames[artifacts.name] == frames["kmodel"]
    # the weights the builds got are the export's: the manifest names its source
    manifest = json.loads((bundle / gpu.BUILDS / artifacts.name / "manifest.json").read_text())
    assert manifest["weights"]["path"] == onnx.name


def _audio_file(path, engine: str, sentences: list[dict]) -> None:
    """An ``audio-<engine>.npz`` as run writes it, each clip as long as its ``samples``."""
    index = {"engine": engine, "rate": 24000, "sentences": sentences}
    clips = {s["key"]: np.full(s["samples"], 100, np.int16) for s in sentences}
    np.savez_compressed(path / f"audio-{engine}.npz", __index__=np.array(json.dumps(index)), **clips)


def test_score_gives_the_word_error_rate_table(gpu, tmp_path):
    texts = ["Hello world.", "Thank you very much for your help.", "Our team won the game in the last minute."]
    results = tmp_path / "results"
    results.mkdir()
    base_rows = [{"text": t, "said": t, "phonemes": f"p{i}", "errors": {"tvm": e}}
                 for i, (t, e) in enumerate(zip(texts, [1, 0, 0]))]  # fmt: skip
    (results / "quality.json").write_text(json.dumps(
        {"engines": ["tvm"], "artifacts": "artifacts-fp32", "target": {"kind": "llvm"}, "rows": base_rows}))
    sentences = [{"key": f"plain-{i:02d}", "set": "plain", "text": t, "said": t, "phonemes": f"p{i}",
                  "samples": 1000 + i} for i, t in enumerate(texts)]  # fmt: skip
    audio = tmp_path / "audio"
    audio.mkdir()
    _audio_file(audio, "cuda-a", sentences)
    _audio_file(audio, "kmodel", [{**sentences[0], "key": "plain-00"}])
    # what each clip is heard as, told apart by their lengths: cuda-a misses four words of
    # the last sentence, so 4 errors in 18 words against the baseline's 1
    heard = {1000: "hello world", 1001: "thank you very much for your help", 1002: "our team won the game"}
    result = gpu.score(audio, results, tmp_path / "out", recognize=lambda a, rate: heard[len(a)],
                       log=lambda _: None)  # fmt: skip
    a = result["wer"]["cuda-a"]["plain"]
    assert (a["words"], a["errors"], a["baseline"]["errors"]) == (18, 4, 1)
    assert a["wer"] == pytest.approx(4 / 18) and a["difference"] == pytest.approx(3 / 18)
    assert a["passed"] is False  # 0.167 over the 0.01
    k = result["wer"]["kmodel"]["plain"]  # one sentence: against the baseline's one
    assert (k["errors"], k["baseline"]["errors"], k["passed"]) == (0, 1, False)
    assert k["baseline"]["wer"] == pytest.approx(0.5)
    table = (tmp_path / "out" / "gpu-quality.txt").read_text()
    assert "cuda-a" in table and "FAIL" in table and "+0.167" in table
    saved = json.loads((tmp_path / "out" / "gpu-quality.json").read_text())
    assert len(saved["rows"]) == 4 and saved["wer"]["cuda-a"]["plain"]["errors"] == 4
    # within the tolerance: a pass
    heard[1002] = "our team won the game in the last minute"
    heard[1000] = "hello word"
    again = gpu.score(audio, results, None, recognize=lambda a, rate: heard[len(a)], log=lambda _: None)
    assert again["wer"]["cuda-a"]["plain"]["difference"] == 0 and again["wer"]["cuda-a"]["plain"]["passed"]
    with pytest.raises(SystemExit, match="no audio-"):
        gpu.score(tmp_path / "results", results, None, recognize=lambda a, r: "")


def test_score_hears_with_pocketsphinx(gpu, tmp_path):
    """The default recognizer (bench/quality.py's) on silence: nothing heard, every word
    an error."""
    pytest.importorskip("pocketsphinx")
    sentences = [{"key": "plain-00", "set": "plain", "text": "Hello world.", "said": "Hello world.",
                  "phonemes": "p", "samples": 24000}]  # fmt: skip
    _audio_file(tmp_path, "cuda-a", sentences)
    result = gpu.score(tmp_path, tmp_path / "none", None, log=lambda _: None)
    row, = result["rows"]
    assert row["errors"] == 2 and result["wer"]["cuda-a"]["plain"]["baseline"] is None
