"""bench/browser.py's logic without a browser: arguments, the tokenizer it gives kokoro-js
(transformers.js's steps done here with Python's re), the tables and chart of a run."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import warnings
from pathlib import Path

import pytest

from kokoro_ext import KOKORO_82M_CONFIG
from kokoro_ext.text.g2p import phonemes_to_ids

_BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
_spec = importlib.util.spec_from_file_location("bench_browser", _BENCH / "browser.py")
browser = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(browser)


def test_arguments():
    args = browser.parse_args(["--wasm", "w", "--texts", "word,hello", "--only", "tvm-wasm=hello"])
    assert args.texts == ["word", "hello"] and args.wasm == Path("w")
    assert args.only == {"tvm-webgpu": ["word"], "tvm-wasm": ["hello"]}
    assert args.wasm_env == []
    env = browser.parse_args(["--wasm-env", "KOKORO_EXT_WINOGRAD_CACHE_MB=0",
                              "--wasm-env", "A=b=c"])
    assert env.wasm_env == ["KOKORO_EXT_WINOGRAD_CACHE_MB=0", "A=b=c"]
    bad_arguments = (["--texts", "novel"], ["--only", "tvm-wasm=novel"], ["--warm-up", "novel"],
                     ["--wasm-env", "NOEQUALS"], ["--wasm-env", "=1"])
    for bad in bad_arguments:
        with pytest.raises(SystemExit):
            browser.parse_args(bad)


def _tokenize(tokenizer: dict, phonemes: str) -> list[int]:
    """tokenizer.json's steps as transformers.js takes them: Replace (a JavaScript regex
    of the same syntax here), a token per character, the vocab, the template."""
    pattern = tokenizer["normalizer"]["pattern"]["Regex"]
    text = re.sub(pattern, tokenizer["normalizer"]["content"], phonemes)
    vocab = tokenizer["model"]["vocab"]
    template = tokenizer["post_processor"]["single"]
    assert [next(iter(t)) for t in template] == ["SpecialToken", "Sequence", "SpecialToken"]
    return [vocab["$"], *(vocab[c] for c in text), vocab["$"]]


@pytest.mark.parametrize("phonemes", ["həlˈoʊ wˈɜːld.", "ðə ˈoʊld lˈIthaʊs — kˈipəɹ, “hi”!",
                                      "a-b [x] ^ \\ 1 ʤʧ ᵻ ↗"])
def test_tokenizer_gives_kokoro_ext_ids(phonemes):
    vocab = json.loads(KOKORO_82M_CONFIG.read_text())["vocab"]
    tokenizer, config = browser.tokenizer_files(vocab)
    assert config["model_max_length"] == 512
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # symbols outside the vocab are dropped by both
        assert _tokenize(tokenizer, phonemes) == phonemes_to_ids(phonemes, vocab)


def _result(tmp_path) -> dict:
    cell = {"first_audio_s": 1.0, "total_s": 2.0, "peak_rss_mb": 400.0, "js_heap_mb": 8.0,
            "audio_s": 1.5, "rms": 0.06, "peak": 0.4, "ids_match": True,
            "chunks": [{"t_ms": 1000, "text": "Hello.", "phonemes": "həlˈoʊ.", "ids": [0, 4, 0],
                        "samples": 36000}]}
    return {
        "engines": ["kokoro-js", "kokoro-js-cores", "tvm-wasm"], "texts": ["word", "hello"], "voice": "af_heart",
        "repeat": 1, "warm_up": "word", "load_average_start": [1.0, 1.0, 1.0],
        "text_words": {"word": 1, "hello": 2},
        "labels": {e: browser.ENGINES[e] for e in ("kokoro-js", "kokoro-js-cores", "tvm-wasm")},
        "builds": {"tvm-wasm": str(tmp_path)},
        "machine": {"chromium": "1.0", "cpu": "CPU", "cores": 2, "load_average_end": [1, 1, 1]},
        "results": {
            "kokoro-js": {"load_s": 4.0, "device": "wasm", "download_bytes": 116e6,
                          "environment": {"workers": 0, "crossOriginIsolated": True},
                          "texts": {"word": cell, "hello": cell}},
            "kokoro-js-cores": {"load_s": 4.0, "device": "wasm", "download_bytes": 116e6,
                                "environment": {"workers": 2, "crossOriginIsolated": True},
                                "texts": {"word": {**cell, "total_s": 1.0}, "hello": cell}},
            "tvm-wasm": {"load_s": 30.0, "device": "wasm", "download_bytes": 340e6,
                         "error": "timed out on hello",
                         "load_module_memory_mb": {"stages.wasm": 160.0},
                         "texts": {"word": {**cell, "total_s": 8.0, "first_audio_s": 3.0,
                                            "module_memory_mb": {"stages.wasm": 274.0},
                                            "module_heap_mb": {"stages.wasm": 212.25}},
                                   "hello": {"error": "timed out after 600 s"}}},
        },
    }


def test_tables_ratios_and_failed_cells(tmp_path):
    table = browser.format_tables(_result(tmp_path))
    totals = table.split("total time (s), warm")[1].splitlines()
    # tvm-wasm / kokoro-js, then tvm-wasm / kokoro-js-cores
    assert re.search(r"^word .* 2\.00 +1\.00 +8\.00 +4\.00 +8\.00$", totals[2]), totals[2]
    assert "timed out" in totals[3]
    assert "ids = kokoro_ext's" in table


def test_module_memory_table(tmp_path):
    """The module's WebAssembly memory, loaded and after each text it spoke, and the most
    of its heap in use, for the engines that have stages (not kokoro-js)."""
    table = browser.format_tables(_result(tmp_path))
    section = table.split("tvm-wasm: WebAssembly memory")[1].splitlines()
    assert re.search(r"^after +stages\.wasm$", section[1]), section[1]
    assert re.search(r"^loaded +160\.0$", section[2]), section[2]
    assert re.search(r"^word +274\.0$", section[3]), section[3]
    assert not section[4].startswith("hello")  # its cell failed: no memory to show
    assert "kokoro-js: WebAssembly memory" not in table
    heap = table.split("tvm-wasm: the most of the heap in use")[1].splitlines()
    assert re.search(r"^text +stages\.wasm$", heap[1]), heap[1]
    assert re.search(r"^word +212\.2$", heap[2]), heap[2]
    assert len(heap) == 3 or not heap[3].startswith("hello")


def test_chart(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    browser.plot(_result(tmp_path), tmp_path / "browser.png")
    assert (tmp_path / "browser.png").stat().st_size > 0
