"""bench/bulk.py's logic without timing anything: the book, the plan of runs, the table
and chart of a result (failed runs included)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", _BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bulk = _load("bulk")


def test_the_book_is_several_thousand_words_in_five_chapters():
    parts = bulk.book_chapters(None)
    assert [title.split(":")[0] for title, _ in parts] == [f"Chapter {n}" for n in
                                                           ("One", "Two", "Three", "Four", "Five")]
    assert bulk.words_of(parts) > 2400
    assert "public domain" in bulk.BOOK.read_text().splitlines()[1]
    # the bulk runs read the book's own Markdown, cut to the same chapters
    from kokoro_ext.bulk.records import chapters

    for count in (None, 2):
        assert chapters(bulk.book_source(count), markdown=True) == bulk.book_chapters(count)


def test_the_plan_names_the_default_split(monkeypatch):
    monkeypatch.setattr(bulk.os, "cpu_count", lambda: 2)
    args = bulk.parse_args(["--ways", "bulk,split,cluster", "--split-chapters", "1"])
    runs = bulk.plan(args)
    names = [r["name"] for r in runs]
    assert names[0] == "bulk (default split)"
    assert sum("(default)" in n for n in names) == 1
    assert {r["extra"].get("nodes") for r in runs if r["group"] == "cluster"} == {1, 2}
    command = bulk.child_command(args, "bulk", 1, actors=2, bulk_threads=1, nodes=None)
    assert command[-4:] == ["--actors", "2", "--bulk-threads", "1"] and "--chapters" in command
    with pytest.raises(SystemExit):
        bulk.parse_args(["--ways", "bulk,nothing"])


def test_table_and_chart(tmp_path):
    run = {"audio_s": 100.0, "wall_s": 20.0, "audio_per_s": 5.0, "peak_mb": 900.0}
    result = {
        "words": 2500, "chapters": 5, "split_words": 1000, "load_start": [1.0, 1.0, 1.0],
        "load_end": [2.0, 1.5, 1.0], "machine": {"cpu": "CPU", "cores": 2},
        "runs": [{"name": "bulk (default split)", "group": "book", **run},
                 {"name": "kokoro-onnx int8 process pool", "group": "book", "error": "exit 1: no model"},
                 {"name": "bulk 2 actors x 1 threads (default)", "group": "split", **run}],
    }
    table = bulk.format_table(result)
    assert "load 1.0 1.0 1.0 at start" in table and "failed: exit 1: no model" in table
    assert "-- split" in table
    pytest.importorskip("matplotlib")
    bulk.write_results(tmp_path, "bulk", result, table, bulk.plot, log=lambda *a: None)
    assert {p.name for p in tmp_path.iterdir()} == {"bulk.json", "bulk.txt", "bulk.png"}
