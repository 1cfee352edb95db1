"""bench/user.py's logic, without timing anything: texts, arguments, table, manifest check."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "user.py"
_SPEC = importlib.util.spec_from_file_location("bench_user", _PATH)
user = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(user)


def test_texts_have_the_promised_lengths():
    count = {k: len(re.findall(r"[A-Za-z']+", t)) for k, t in user.TEXTS.items()}
    assert count == {"word": 1, "hello": 2, "sentence": 20, "paragraph": 100, "page": 400}
    assert not re.search(r"\d", "".join(user.TEXTS.values()))


def test_arguments():
    args = user.parse_args([])
    assert args.engines == list(user.DEFAULT_ENGINES) and "compile" not in args.engines
    assert args.texts == list(user.TEXTS) and args.repeat == 3
    assert args.artifacts == Path("artifacts")
    args = user.parse_args(["--engines", "eager,compile", "--texts", "hello",
                            "--skip-fresh-long"])
    assert args.engines == ["eager", "compile"] and args.texts == ["hello"]
    assert args.skip_fresh_long
    with pytest.raises(SystemExit):
        user.parse_args(["--engines", "eager,nope"])


def test_real_weights(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"weights": {"random_seed": 0}}))
    assert not user.real_weights(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"weights": {"path": "/x.onnx"}}))
    assert user.real_weights(tmp_path)
    info = user.artifacts_info(tmp_path)
    assert info["exists"] and info["so_files"] == 0 and info["bytes"] > 0
    missing = tmp_path / "none"
    assert user.artifacts_info(missing) == {"path": str(missing), "exists": False}


def test_table_ratio_and_gaps():
    result = {
        "engines": ["eager", "onnx-int8"], "texts": ["hello"], "repeat": 1, "long_seconds": 20.0,
        "load_average_start": (1.0, 1.0, 1.0), "same_chunks": True,
        "machine": {"cpu": "CPU", "cores": 2, "threads": 2},
        "artifacts": {"path": "artifacts", "exists": False},
        "fresh": {"eager": {"hello": {"total_s": 10.0, "first_audio_s": 9.0,
                                      "peak_rss_mb": 900.0}}},
        "warm": {
            "eager": {"load_s": 1, "warm_up_s": 1, "peak_rss_mb": 1,
                      "texts": {"hello": {"total_s": 2.0, "first_audio_s": 2.0, "audio_s": 1.5}}},
            "onnx-int8": {"error": ["boom"]},
        },
    }
    table = user.format_table(result)
    eager = next(line for line in table.splitlines() if line.startswith("PyTorch eager"))
    assert eager.split()[-1] == "1.00" and "900" in eager
    onnx = next(line for line in table.splitlines() if line.startswith("kokoro-onnx int8"))
    assert onnx.split()[3:] == ["-"] * 7
    assert "onnx-int8: warm run failed: boom" in table
