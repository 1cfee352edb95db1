"""bench/user.py's logic and bench/harness.py, without timing anything: texts, arguments,
builds, table, skipping, results written before the chart, the peak RSS reset."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", _BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


user = _load("user")
harness = _load("harness")


def _manifest(directory: Path, dtypes=("float32",), **extra) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tensors = [[[4], dtype, 0] for dtype in dtypes]
    manifest = {"weights": {"path": "/x.onnx"},
                "stages": {"text": {"weights": {"tensors": tensors}}}}
    (directory / "manifest.json").write_text(json.dumps(manifest | extra))
    return directory


def test_texts_have_the_promised_lengths():
    count = {k: len(re.findall(r"[A-Za-z']+", t)) for k, t in user.TEXTS.items()}
    assert count == {"word": 1, "hello": 2, "sentence": 20, "paragraph": 100, "page": 400}
    assert not re.search(r"\d", "".join(user.TEXTS.values()))


def test_arguments():
    args = user.parse_args([])
    assert args.engines == list(user.DEFAULT_ENGINES) and "compile" not in args.engines
    assert args.texts == list(user.TEXTS) and args.repeat == 3
    assert args.artifacts == Path("artifacts") and args.builds == [] and not args.skip_rss
    args = user.parse_args(["--engines", "eager,compile", "--texts", "hello",
                            "--skip-fresh-long", "--skip-rss", "--build", "int8=a/b",
                            "--build", "c/d"])
    assert args.engines == ["eager", "compile"] and args.texts == ["hello"]
    assert args.skip_fresh_long and args.skip_rss
    assert args.builds == [("int8", Path("a/b")), (None, Path("c/d"))]
    with pytest.raises(SystemExit):
        user.parse_args(["--engines", "eager,nope"])


def test_build_facts(tmp_path):
    assert user.build_facts(tmp_path / "none") == {
        "manifest": False, "real_weights": True, "precision": None}
    facts = user.build_facts(_manifest(tmp_path / "f32"))
    assert facts == {"manifest": True, "real_weights": True, "precision": "fp32"}
    # the narrowest dtype of the weights files names a build...
    assert user.build_facts(_manifest(tmp_path / "q", ("float32", "int8")))["precision"] == "int8"
    assert user.build_facts(_manifest(tmp_path / "h", ("float32", "float16")))["precision"] == "fp16"
    # ...unless the manifest says
    assert user.build_facts(_manifest(tmp_path / "p", precision="int4"))["precision"] == "int4"
    random = _manifest(tmp_path / "r")
    manifest = json.loads((random / "manifest.json").read_text())
    (random / "manifest.json").write_text(json.dumps(manifest | {"weights": {"random_seed": 0}}))
    assert not user.real_weights(random)
    info = user.artifacts_info(random)
    assert info["exists"] and info["so_files"] == 0 and info["bytes"] > 0
    assert info["precision"] == "fp32"
    missing = tmp_path / "none"
    assert user.artifacts_info(missing) == {"path": str(missing), "exists": False}


def test_builds_are_engines_named_by_precision(tmp_path):
    main = _manifest(tmp_path / "main")
    args = user.parse_args(["--engines", "tvm,onnx-int8", "--artifacts", str(main),
                            "--build", f"small={_manifest(tmp_path / 'a', ('int8',))}",
                            "--build", str(_manifest(tmp_path / "b", ("float32", "int8")))])
    specs = user.engine_specs(args)
    assert list(specs) == ["tvm", "onnx-int8", "tvm-small", "tvm-int8"]
    assert specs["tvm"]["label"] == "TVM fp32 (kokoro_ext)"
    assert specs["tvm-int8"] == {"kind": "tvm", "label": "TVM int8",
                                 "artifacts": str(tmp_path / "b")}
    command = user.child_command(args, specs["tvm-small"], "--rss-text", "word")
    assert command[command.index("--child") + 1] == "tvm"
    assert command[command.index("--artifacts") + 1] == str(tmp_path / "a")


def _result() -> dict:
    return {
        "engines": ["eager", "tvm-int8", "onnx-int8"], "texts": ["hello"], "repeat": 1,
        "long_seconds": 20.0, "load_average_start": (1.0, 1.0, 1.0), "same_chunks": True,
        "machine": {"cpu": "CPU", "cores": 2, "threads": 2},
        "labels": {"tvm-int8": "TVM int8"},
        "skipped": {"onnx": "ModuleNotFoundError: No module named 'kokoro_onnx'"},
        "sizes": {"eager": {"path": "/c/k.pth", "bytes": 327_000_000},
                  "tvm-int8": {"path": "/b", "bytes": 95_000_000}},
        "builds": {"tvm-int8": {"so_files": 4, "real_weights": True}},
        "fresh": {"eager": {"hello": {"total_s": 10.0, "first_audio_s": 9.0,
                                      "peak_rss_mb": 900.0}}},
        "warm": {
            "eager": {"load_s": 1, "warm_up_s": 1, "peak_rss_mb": 1,
                      "texts": {"hello": {"total_s": 2.0, "first_audio_s": 2.0, "audio_s": 1.5}}},
            "tvm-int8": {"load_s": 1, "warm_up_s": 1, "peak_rss_mb": 300,
                         "texts": {"hello": {"total_s": 0.5, "first_audio_s": 0.5,
                                             "audio_s": 1.5}}},
            "onnx-int8": {"error": "boom"},
        },
        "rss": {"eager": {"hello": {"peak_rss_mb": 1234.0, "reset": True}},
                "tvm-int8": {"hello": {"peak_rss_mb": 345.0, "reset": False}}},
    }


def test_table_sizes_peaks_ratios_and_gaps():
    table = user.format_table(_result())
    lines = table.splitlines()
    rows = [line for line in lines if " hello " in line]
    eager = next(line for line in rows if line.startswith("PyTorch eager"))
    assert eager.split()[3:] == ["10.00", "9.00", "900", "2.00", "2.00", "1234", "1.50", "1.00"]
    tvm = next(line for line in rows if line.startswith("TVM int8"))
    assert tvm.split()[-2:] == ["1.50", "0.25"] and tvm.split()[-3] == "345"
    onnx = next(line for line in rows if line.startswith("kokoro-onnx int8"))
    assert onnx.split()[3:] == ["-"] * 8
    sizes = {line.split()[0]: line.split() for line in lines
             if line.startswith(("PyTorch eager ", "TVM int8 ")) and " hello " not in line}
    assert sizes["PyTorch"][2] == "327" and sizes["TVM"][2] == "95"
    assert "onnx-int8: warm run failed: boom" in table
    assert "skipped onnx: ModuleNotFoundError: No module named 'kokoro_onnx'" in table
    assert "tvm-int8: peak RSS not reset" in table


def test_chart_has_size_and_peak_rss(tmp_path):
    pytest.importorskip("matplotlib")
    assert harness.plot_if_possible(user.plot, _result(), tmp_path / "user.png")
    assert (tmp_path / "user.png").stat().st_size > 10_000


def test_results_are_written_before_the_chart(tmp_path, monkeypatch):
    lines = []

    def broken_plot(result, path):
        raise RuntimeError("plotting broke")

    # matplotlib present (a stand-in: the test environment need not have it), plot broken
    stand_in = types.ModuleType("matplotlib")
    stand_in.use = lambda backend: None
    monkeypatch.setitem(sys.modules, "matplotlib", stand_in)
    with pytest.raises(RuntimeError):
        harness.write_results(tmp_path, "x", {"a": Path("p")}, "the table", broken_plot,
                              log=lines.append)
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": "p"}
    assert (tmp_path / "x.txt").read_text() == "the table\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    harness.write_results(tmp_path, "y", {}, "t", broken_plot, log=lines.append)
    assert (tmp_path / "y.json").exists() and not (tmp_path / "y.png").exists()
    assert "no chart y.png: matplotlib is not installed (pip install matplotlib)" in lines


def test_an_engine_that_cannot_load_is_skipped_in_one_line():
    lines = []

    def load():
        raise FileNotFoundError("no /models/kokoro.onnx\nmore detail")

    assert harness.load_engine("onnx", load, log=lines.append) == (
        None, "FileNotFoundError: no /models/kokoro.onnx")
    assert lines == ["skipped onnx: FileNotFoundError: no /models/kokoro.onnx"]
    assert harness.load_engine("tvm", lambda: 3, log=lines.append) == (3, None)


def test_a_run_without_a_build_still_writes_its_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert user.main(["--engines", "tvm", "--artifacts", str(tmp_path / "none"),
                      "--texts", "word", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "user.json").read_text())
    assert result["engines"] == [] and "no build in" in result["skipped"]["tvm"]
    out = capsys.readouterr().out
    assert out.count("skipped tvm: no build in") == 2  # as it happens, and in the table
    assert "no chart user.png" in out and (tmp_path / "user.txt").exists()


def test_peak_rss_reset():
    big = b"x" * (200 * 2**20)
    before = user.peak_rss_mb()
    del big
    if not user.reset_peak_rss():
        pytest.skip("this kernel refuses the high-water mark reset")
    assert user.peak_rss_mb() < before - 150


def test_warm_engines_take_turns_on_every_text(monkeypatch):
    """All warm engines are loaded first, then each round runs a text on every engine in
    turn; a text slower than --long-seconds on an engine is run there once."""
    import argparse

    calls = []

    class Child:
        def __init__(self, args, spec):
            self.kind = spec["kind"]
            calls.append(("load", self.kind))

        def run(self, text):
            calls.append((self.kind, text))
            slow = self.kind == "eager" and text == "page"
            return {"total_s": 100.0 if slow else 1.0, "first_audio_s": 0.5, "audio_s": 2.0,
                    "chunks": [text]}

        def finish(self):
            return {"load_s": 0.1, "warm_up_s": 0.2, "peak_rss_mb": 10.0}

    monkeypatch.setattr(user, "WarmChild", Child)
    monkeypatch.setattr(user, "SETTLE_S", 0)
    args = argparse.Namespace(texts=["word", "page"], repeat=2, long_seconds=30)
    got = user.warm(args, {"tvm": {"kind": "tvm"}, "eager": {"kind": "eager"}}, ["tvm", "eager"])
    assert calls == [("load", "tvm"), ("load", "eager"),
                     ("tvm", "word"), ("eager", "word"), ("tvm", "word"), ("eager", "word"),
                     ("tvm", "page"), ("eager", "page"), ("tvm", "page")]
    assert got["tvm"]["texts"]["word"]["runs"] == 2 and got["eager"]["texts"]["page"]["runs"] == 1
    assert got["eager"]["texts"]["page"]["total_s"] == 100.0 and got["tvm"]["peak_rss_mb"] == 10.0
