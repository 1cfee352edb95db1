"""python -m kokoro_ext.bulk on a local Ray (two CPUs) with the small build: records in
order, bad records recorded, an actor killed mid-run, a second run that writes nothing,
a book cut into chapters."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[bulk]'")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (Ray Data brings it)")
sf = pytest.importorskip("soundfile", reason="soundfile is not installed (the bulk extra brings it)")

from kokoro_ext.bulk import BulkOptions, run  # noqa: E402
from kokoro_ext.bulk.output import RESULTS  # noqa: E402
from kokoro_ext.bulk.records import Record, chapters, pieces, read_records  # noqa: E402
from kokoro_ext.run.wav import SAMPLE_RATE  # noqa: E402

SENTENCES = [
    "The small boat left the harbor at dawn.",
    "Gulls followed it far out over the grey water.",
    "By noon the coast was only a thin line behind them.",
    "Nobody on board said a word for a long time.",
]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module: starting one takes seconds."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def options(build_dir, input: Path, out: Path, **extra) -> BulkOptions:
    return BulkOptions(input=input, out_dir=out, artifacts=build_dir[0], progress=False, **extra)


def results(out: Path) -> list[dict]:
    return pq.read_table(out / RESULTS).to_pylist()


def test_records_become_one_file_each_in_order_and_complete(build_dir, tmp_path):
    rows = [{"id": f"line-{i}", "text": SENTENCES[i % 4]} for i in range(5)]
    long_text = " ".join(SENTENCES * 3)  # cut into several pieces by piece_chars
    rows.insert(2, {"id": "long", "text": long_text, "speed": 1.25})
    table = write_jsonl(tmp_path / "in.jsonl", rows)
    summary = run(options(build_dir, table, tmp_path / "out", piece_chars=100))
    assert (summary.tally.written, summary.tally.failed, summary.tally.skipped) == (6, 0, 0)
    table_rows = results(tmp_path / "out")
    assert [r["id"] for r in table_rows] == [r["id"] for r in rows]  # input order
    assert all(r["status"] == "ok" and r["error"] == "" for r in table_rows)
    long_row = table_rows[2]
    assert long_row["pieces"] == len(pieces(read_records(table)[2], 100)) > 2
    for row in table_rows:
        audio = tmp_path / "out" / row["output"]
        assert audio.name == f"{row['id']}.flac" and audio.stat().st_size == row["bytes"]
        info = sf.info(str(audio))  # the FLAC header states its length
        assert info.samplerate == SAMPLE_RATE
        assert info.frames == pytest.approx(row["audio_seconds"] * SAMPLE_RATE, abs=1)
        words = json.loads((tmp_path / "out" / row["words"]).read_text())
        starts = [w["start"] for w in words["words"]]
        assert words["id"] == row["id"] and starts == sorted(starts) and starts
        assert words["words"][-1]["end"] <= words["duration"] + 1e-3
    # the long record's pieces, reassembled: every word of its text, in order
    words = json.loads((tmp_path / "out" / "long.json").read_text())["words"]
    assert " ".join(w["word"] for w in words) == long_text
    assert not list((tmp_path / "out").glob(".*"))  # no temporary file left


def test_bad_records_are_recorded_and_skipped(build_dir, tmp_path):
    rows = [
        {"id": "good-1", "text": SENTENCES[0]},
        {"id": "no-voice", "text": SENTENCES[1], "voice": "zz_nobody"},
        {"id": "empty", "text": "   "},
        {"id": "bad-speed", "text": SENTENCES[2], "speed": 9},
        {"id": "good-2", "text": SENTENCES[3], "language": "b"},
    ]
    table = write_jsonl(tmp_path / "in.jsonl", rows)
    (tmp_path / "in.jsonl").write_text(table.read_text() + "{not json\n")
    summary = run(options(build_dir, table, tmp_path / "out", format="wav"))
    assert (summary.tally.written, summary.tally.failed) == (2, 4)
    by_id = {r["id"]: r for r in results(tmp_path / "out")}
    assert by_id["good-1"]["status"] == by_id["good-2"]["status"] == "ok"
    assert "UnknownVoice" in by_id["no-voice"]["error"] and "zz_nobody" in by_id["no-voice"]["error"]
    assert "no text" in by_id["empty"]["error"]
    assert "speed" in by_id["bad-speed"]["error"]
    assert "not JSON" in by_id["5"]["error"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.wav")) == ["good-1.wav", "good-2.wav"]
    assert {row.id for row in summary.failures} == {"no-voice", "empty", "bad-speed", "5"}


def test_the_command_line(build_dir, tmp_path, capsys):
    from kokoro_ext.bulk.__main__ import main

    table = tmp_path / "in.csv"
    table.write_text('id,text,voice\nfirst,"Hello there, world.",\nsame/name,Hi.,\nsame_name,Hi.,\n')
    code = main([str(table), str(tmp_path / "out"), "--artifacts", str(build_dir[0]),
                 "--format", "wav", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1 and "3 records: 2 written, 0 already done, 1 failed" in out, out
    assert "names the same file" in out
    assert sf.info(str(tmp_path / "out" / "first.wav")).frames > 0
    missing = main([str(table), str(tmp_path / "out2"), "--artifacts", str(tmp_path / "nothing")])
    assert missing == 2 and "no build" in capsys.readouterr().err


def test_a_second_run_writes_nothing_new(build_dir, tmp_path):
    table = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "text": s} for i, s in enumerate(SENTENCES)])
    out = tmp_path / "out"
    first = run(options(build_dir, table, out, format="mp3"))
    assert first.tally.written == 4
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != RESULTS}
    second = run(options(build_dir, table, out, format="mp3"))
    assert (second.tally.written, second.tally.skipped) == (0, 4)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != RESULTS} == before
    # a file that no longer matches its row, or a changed text, is done again
    (out / "r1.mp3").write_bytes(b"truncated")
    rows = [{"id": f"r{i}", "text": s} for i, s in enumerate(SENTENCES)]
    rows[2]["text"] = "A different text now."
    write_jsonl(table, rows)
    third = run(options(build_dir, table, out, format="mp3"))
    assert (third.tally.written, third.tally.skipped) == (2, 2)
    assert (out / "r1.mp3").stat().st_size > 100


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - out
        out |= frontier
    return out


def _actor_pids() -> list[int]:
    """This test's Ray Data actors: processes under this one titled after the class."""
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"SynthesizePieces" in title:
            pids.append(pid)
    return pids


def test_an_actor_killed_mid_run_is_replaced_and_the_run_completes(build_dir, tmp_path):
    records = [{"id": f"k{i:02d}", "text": f"{SENTENCES[i % 4]} {SENTENCES[(i + 1) % 4]}"}
               for i in range(10)]
    table = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "out"
    killed: list[tuple[int, int]] = []  # (pid, records written when it was killed)

    def kill_one_actor() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            written = len(list(out.glob("k*.flac"))) if out.is_dir() else 0
            pids = _actor_pids()
            if written >= 1 and pids:  # actors at work, records still to come
                os.kill(pids[0], signal.SIGKILL)
                killed.append((pids[0], written))
            time.sleep(0.02)

    killer = threading.Thread(target=kill_one_actor, daemon=True)
    killer.start()
    summary = run(options(build_dir, table, out))
    killer.join()
    assert killed, "no actor was found to kill"
    pid, written_then = killed[0]
    assert written_then < len(records), "the run had finished before the kill"
    assert not Path(f"/proc/{pid}").exists()
    assert (summary.tally.written, summary.tally.failed) == (len(records), 0)
    rows = results(out)
    assert [r["id"] for r in rows] == [r["id"] for r in records]
    assert all(r["status"] == "ok" for r in rows)
    assert sorted(p.name for p in out.glob("*.flac")) == [f"{r['id']}.flac" for r in records]


BOOK = """# The Voyage

## Chapter One: Dawn

The small boat left the harbor at dawn. *Gulls* followed it.

## Chapter Two

By noon the coast was only a thin line. See [the map](https://example.org/map).

### A scene inside chapter two

Nobody said a word.

```python
print("code is not read")
```

Chapter Three
-------------

- They landed at night.
- The island was quiet.
"""


def test_a_book_is_split_into_chapters(build_dir, tmp_path):
    parts = chapters(BOOK, markdown=True)
    assert [title for title, _ in parts] == ["Chapter One: Dawn", "Chapter Two", "Chapter Three"]
    # the book's title joins the first chapter; headings are read; code blocks are not
    # (the rest of Markdown is the front end's to read: kokoro_ext.text.markdown)
    assert parts[0][1].startswith("The Voyage\n\nChapter One: Dawn\n\nThe small boat")
    assert "A scene inside chapter two" in parts[1][1] and "code" not in parts[1][1]
    assert parts[2][1].endswith("- They landed at night.\n- The island was quiet.")
    plain = "Front matter line.\n\nCHAPTER I.\n\nIt begins.\n\nCHAPTER II.\n\nIt ends.\n"
    assert [t for t, _ in chapters(plain, markdown=False)] == ["front matter", "CHAPTER I.", "CHAPTER II."]

    book = tmp_path / "voyage.md"
    book.write_text(BOOK)
    records = read_records(book, voice=None)
    assert [r.id for r in records] == ["000-chapter-one-dawn", "001-chapter-two", "002-chapter-three"]
    summary = run(options(build_dir, book, tmp_path / "out", format="opus"))
    assert summary.tally.written == 3
    assert sorted(p.name for p in (tmp_path / "out").glob("*.opus")) == [f"{r.id}.opus" for r in records]


def test_pieces_cut_at_sentence_ends_with_their_pauses():
    text = "One two three.\n\nFour five six. Seven eight nine; ten eleven. Twelve."
    cut = pieces(Record(0, "x", text), piece_chars=20)
    assert [p.text for p in cut] == ["One two three.", "Four five six.", "Seven eight nine; ten eleven.", "Twelve."]
    assert [p.pause_after for p in cut] == [0.6, 0.3, 0.3, 0.0]
    assert [p.last for p in cut] == [False, False, False, True]
    ssml = "<speak>One. <break time='1s'/> Two.</speak>"
    assert len(pieces(Record(0, "x", ssml), piece_chars=5)) == 1


def test_threads_per_actor_fit_the_largest_node():
    from kokoro_ext.bulk.run import DEFAULT_THREADS, Split, split_cores

    opts = lambda **kw: BulkOptions(Path("in.jsonl"), Path("out"), **kw)  # noqa: E731
    assert split_cores(opts(), [2]) == Split(1, DEFAULT_THREADS)
    assert split_cores(opts(), [8, 4]) == Split(6, 2)
    # one-CPU nodes: one thread per actor, an actor per node (two threads would never start)
    assert split_cores(opts(), [1, 1]) == Split(2, 1)
    assert split_cores(opts(threads=1, actors=3), [2]) == Split(3, 1)
    with pytest.raises(ValueError, match="--threads 4: no node .* largest has 2"):
        split_cores(opts(threads=4), [2, 2])


def test_a_cuda_build_takes_an_actor_per_share_of_a_gpu():
    from kokoro_ext.bulk.run import Split, split_gpus

    opts = lambda **kw: BulkOptions(Path("in.jsonl"), Path("out"), **kw)  # noqa: E731
    # two nodes of 8 CPUs, 4 and 2 GPUs
    assert split_gpus(opts(), [4.0, 2.0], [8, 8]) == Split(6, 2, 1.0)
    assert split_gpus(opts(gpus_per_actor=0.5), [4.0, 2.0], [8, 8]) == Split(12, 2, 0.5)
    assert split_gpus(opts(gpus_per_actor=2), [4.0, 2.0], [8, 8]) == Split(3, 2, 2)
    assert split_gpus(opts(actors=1, threads=4), [1.0], [8]) == Split(1, 4, 1.0)
    with pytest.raises(ValueError, match="no node of the Ray cluster has a GPU"):
        split_gpus(opts(), [0.0, 0.0], [8, 8])
    with pytest.raises(ValueError, match="--gpus-per-actor 1.5"):
        split_gpus(opts(gpus_per_actor=1.5), [4.0], [8])
