"""Bulk synthesis: a whole book, audio seconds per second of wall time and peak memory.

The book is bench/data/lamplighter.md (2,500 words in five chapters, written for this
bench and dedicated to the public domain), cut into chapters by kokoro_ext.bulk's own
reader (kokoro_ext.bulk.records.chapters), so that every way below reads the same text.
Voice af_heart, FLAC out, one file per chapter.  Each way runs in a process of its own:

  bulk       ``kokoro_ext.bulk.run`` (what ``python -m kokoro_ext.bulk`` calls) at its
             default split: Ray started on this machine, actors x threads from the CPUs
  loop       one process, ``Synthesizer(DIR).stream(chapter, "af_heart")`` chapter after
             chapter, each chapter's chunks encoded to FLAC (kokoro_ext.run.encode)
  onnx-pool  kokoro-onnx 0.6 in a ``ProcessPoolExecutor`` of one process per core, as
             audiblez runs it: each worker loads ``Kokoro(kokoro-v1.0.int8.onnx,
             voices)`` once (the pool's initializer), chapters are mapped onto the pool,
             each chapter is ``create(text, voice, lang="en-us")`` (kokoro-onnx's own
             espeak G2P and batching) written with soundfile
  split      bulk again with the other actors x threads splits of this machine's cores
             (``--split-chapters`` chapters of the book)
  cluster    bulk on ``ray.cluster_utils.Cluster``: a simulated cluster of one, then two
             one-CPU nodes on this machine (the same chapters as split), the build read
             from the same directory by every node

audio s/s: seconds of audio written over the wall time from spawning the process to its
exit (imports, Ray's start, loading the model and writing the files included).  Peak
memory: the largest sum of the resident sets of the process and all its descendants
(Ray's raylet, GCS and actors; pool workers), sampled every 0.25 s; pages shared between
processes (the build's memory-mapped weights) are counted once per process.  The machine
is shared: the load average is recorded at the start and the end.

    python bench/bulk.py [--artifacts artifacts] [--ways bulk,loop,onnx-pool,split,cluster]
                         [--chapters N] [--split-chapters 2] [--out bench/results]

A quick look: ``--chapters 1 --split-chapters 1 --ways bulk,loop``.  Needs the bench
extra (kokoro-onnx, psutil, matplotlib) and the bulk extra (Ray Data).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import machine_record, one_line, skipped, write_results  # noqa: E402

BOOK = HERE / "data" / "lamplighter.md"
VOICE = "af_heart"
RESULT = "RESULT "
WAYS = ("bulk", "loop", "onnx-pool", "split", "cluster")
SAMPLE_EVERY = 0.25


def book_chapters(count: int | None) -> list[tuple[str, str]]:
    from kokoro_ext.bulk.records import chapters

    parts = chapters(BOOK.read_text(encoding="utf-8"), markdown=True)
    return parts[:count] if count else parts


def book_source(count: int | None) -> str:
    """The book's Markdown up to its chapter ``count + 1`` (all of it for None): what the
    bulk command reads, cut by its own reader into the chapters of book_chapters(count)."""
    text = BOOK.read_text(encoding="utf-8")
    if not count:
        return text
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    return "".join(lines[: starts[count]]) if count < len(starts) else text


def words_of(parts: list[tuple[str, str]]) -> int:
    return sum(len(text.split()) for _, text in parts)


# -- the children -----------------------------------------------------------------------


def child_bulk(args: argparse.Namespace) -> dict:
    from kokoro_ext.bulk import BulkOptions, run

    with tempfile.TemporaryDirectory() as scratch:
        book = Path(scratch) / "book.md"
        book.write_text(book_source(args.chapters))
        cluster = None
        address = None
        if args.nodes:
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
            for _ in range(args.nodes - 1):
                cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            address = cluster.address
        try:
            summary = run(BulkOptions(
                input=book, out_dir=Path(scratch) / "out", artifacts=args.artifacts,
                voice=VOICE, address=address, actors=args.actors,
                threads=args.bulk_threads or BulkOptions.threads, progress=False,
            ))  # fmt: skip
        finally:
            if cluster is not None:
                cluster.shutdown()
        assert summary.tally.failed == 0, summary.text()
        return {"audio_s": summary.tally.audio_seconds, "actors": summary.actors,
                "threads": summary.threads, "records": summary.tally.written}


def child_loop(args: argparse.Namespace) -> dict:
    from kokoro_ext.run import prefer_runtime_library

    prefer_runtime_library()
    from kokoro_ext.run.encode import encoder
    from kokoro_ext.run.synthesizer import Synthesizer
    from kokoro_ext.run.wav import SAMPLE_RATE

    synth = Synthesizer(args.artifacts)
    samples = 0
    with tempfile.TemporaryDirectory() as scratch:
        for i, (_, text) in enumerate(book_chapters(args.chapters)):
            flac = encoder("flac")
            with open(Path(scratch) / f"{i:03d}.flac", "wb") as f:
                for chunk in synth.stream(text, VOICE):
                    audio = chunk.joined()
                    samples += len(audio)
                    f.write(flac.feed(audio))
                f.write(flac.finish())
    return {"audio_s": samples / SAMPLE_RATE, "actors": 1, "threads": os.cpu_count()}


_KOKORO = None


def _load_kokoro(model: str, voices: str, config: str) -> None:
    global _KOKORO
    from kokoro_onnx import Kokoro

    _KOKORO = Kokoro(model, voices, vocab_config=json.loads(Path(config).read_text()))


def _speak_chapter(job: tuple[int, str, str]) -> float:
    import soundfile

    index, text, out = job
    audio, rate = _KOKORO.create(text, voice=VOICE, speed=1.0, lang="en-us")
    soundfile.write(str(Path(out) / f"{index:03d}.flac"), audio, rate)
    return len(audio) / rate


def child_onnx_pool(args: argparse.Namespace) -> dict:
    from concurrent.futures import ProcessPoolExecutor

    from user import cache_files  # bench/user.py: the files its onnx-int8 engine loads

    files = cache_files()
    for name in ("int8", "voices", "config"):
        if not files[name].is_file():
            raise FileNotFoundError(f"{files[name]} (run bench/user.py once to make it)")
    workers = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as scratch:
        jobs = [(i, text, scratch) for i, (_, text) in enumerate(book_chapters(args.chapters))]
        with ProcessPoolExecutor(workers, initializer=_load_kokoro,
                                 initargs=(str(files["int8"]), str(files["voices"]),
                                           str(files["config"]))) as pool:
            seconds = sum(pool.map(_speak_chapter, jobs))
    return {"audio_s": seconds, "actors": workers, "threads": None}


CHILDREN = {"bulk": child_bulk, "loop": child_loop, "onnx-pool": child_onnx_pool}


# -- the parent -------------------------------------------------------------------------


def tree_rss_mb(pid: int) -> float:
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def measure(command: list[str], timeout: float) -> dict:
    """Run ``command``: wall seconds to its exit, the peak of its tree's summed RSS and
    the RESULT line it printed."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_mb(process.pid))
            done.wait(SAMPLE_EVERY)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    lines = [line for line in out.splitlines() if line.startswith(RESULT)]
    if process.returncode != 0 or not lines:
        tail = (err or out).strip().splitlines()[-3:]
        return {"error": f"exit {process.returncode}: {' | '.join(tail)}"}
    result = json.loads(lines[-1][len(RESULT):])
    result.update(wall_s=wall, peak_mb=peak, audio_per_s=result["audio_s"] / wall)
    return result


def child_command(args: argparse.Namespace, way: str, chapters: int | None, **extra) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", way,
               "--artifacts", str(args.artifacts)]
    if chapters:
        command += ["--chapters", str(chapters)]
    for name, value in extra.items():
        if value is not None:
            command += [f"--{name.replace('_', '-')}", str(value)]
    return command


def plan(args: argparse.Namespace) -> list[dict]:
    """(label, way, chapters, extra arguments) of each run, in order."""
    cores = os.cpu_count() or 1
    from kokoro_ext.bulk.run import DEFAULT_THREADS

    runs = []
    if "bulk" in args.ways:
        runs.append({"name": "bulk (default split)", "group": "book", "way": "bulk",
                     "chapters": args.chapters, "extra": {}})
    if "loop" in args.ways:
        runs.append({"name": "Synthesizer.stream loop", "group": "book", "way": "loop",
                     "chapters": args.chapters, "extra": {}})
    if "onnx-pool" in args.ways:
        runs.append({"name": "kokoro-onnx int8 process pool", "group": "book", "way": "onnx-pool",
                     "chapters": args.chapters, "extra": {}})
    if "split" in args.ways:
        for threads in sorted({t for t in range(1, cores + 1) if cores % t == 0}):
            runs.append({"name": f"bulk {cores // threads} actors x {threads} threads"
                         + (" (default)" if threads == DEFAULT_THREADS else ""),
                         "group": "split", "way": "bulk", "chapters": args.split_chapters,
                         "extra": {"actors": cores // threads, "bulk_threads": threads}})
    if "cluster" in args.ways:
        for nodes in (1, 2):
            runs.append({"name": f"bulk on a local cluster of {nodes} one-CPU node{'s' * (nodes > 1)}",
                         "group": "cluster", "way": "bulk", "chapters": args.split_chapters,
                         "extra": {"nodes": nodes}})
    return runs


def machine() -> dict:
    return machine_record(("apache-tvm", "ray", "kokoro-onnx", "onnxruntime", "numpy"))


def format_table(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"Bulk synthesis of {BOOK.name} ({result['words']} words, {result['chapters']} chapters; "
        f"split and cluster: {result['split_words']} words): {m['cpu']}, {m['cores']} cores, "
        f"load {' '.join(f'{x:.1f}' for x in result['load_start'])} at start, "
        f"{' '.join(f'{x:.1f}' for x in result['load_end'])} at the end",
        "",
        f"{'run':48} {'audio s':>8} {'wall s':>7} {'audio s/s':>9} {'peak MB':>8}",
    ]
    group = None
    for run in result["runs"]:
        if run["group"] != group:
            group = run["group"]
            lines.append(f"-- {group}")
        if "error" in run:
            lines.append(f"{run['name']:48} failed: {run['error'][:150]}")
            continue
        lines.append(f"{run['name']:48} {run['audio_s']:8.1f} {run['wall_s']:7.1f} "
                     f"{run['audio_per_s']:9.2f} {run['peak_mb']:8.0f}")
    lines += ["", "audio s/s: seconds of audio written per second of wall time, process start to "
              "exit (imports, Ray, model load, files included); peak MB: the process tree's "
              "summed RSS, sampled every 0.25 s (bench/bulk.py's docstring)"]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    runs = [r for r in result["runs"] if "error" not in r]
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(12, 0.5 * len(runs) + 2), sharey=True)
    names = [r["name"] for r in runs][::-1]
    colors = {"book": "tab:blue", "split": "tab:orange", "cluster": "tab:green"}
    speed.barh(names, [r["audio_per_s"] for r in runs][::-1],
               color=[colors[r["group"]] for r in runs][::-1])
    speed.set_xlabel("audio seconds per second (higher is faster)")
    memory.barh(names, [r["peak_mb"] for r in runs][::-1],
                color=[colors[r["group"]] for r in runs][::-1])
    memory.set_xlabel("peak memory, MB (process tree RSS)")
    m = result["machine"]
    fig.suptitle(f"Bulk synthesis, {result['words']} words: {m['cpu']}, {m['cores']} cores, "
                 f"load {result['load_start'][0]:.1f} -> {result['load_end'][0]:.1f}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--chapters", type=int, help="the book's first N chapters (default: all)")
    parser.add_argument("--split-chapters", type=int, default=2,
                        help="chapters for the split and cluster runs")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--name", default="bulk", help="results file names")
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--actors", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bulk-threads", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ways = [w for w in args.ways.split(",") if w]
    unknown = set(args.ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways {sorted(unknown)}; of {', '.join(WAYS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(RESULT + json.dumps(CHILDREN[args.child](args)), flush=True)
        return 0
    load_start = os.getloadavg()
    runs = []
    for run in plan(args):
        print(f"== {run['name']}", flush=True)
        try:
            measured = measure(child_command(args, run["way"], run["chapters"], **run["extra"]),
                               args.timeout)
        except Exception as error:  # noqa: BLE001 - one failed run is a failed row
            measured = {"error": one_line(error)}
        if "error" in measured:
            skipped(run["name"], measured["error"])
        else:
            print(f"   {measured['audio_s']:.1f} audio s in {measured['wall_s']:.1f} s: "
                  f"{measured['audio_per_s']:.2f} audio s/s, peak {measured['peak_mb']:.0f} MB",
                  flush=True)
        runs.append({"name": run["name"], "group": run["group"], **measured})
    result = {
        "book": str(BOOK.relative_to(HERE.parent)),
        "words": words_of(book_chapters(args.chapters)),
        "chapters": len(book_chapters(args.chapters)),
        "split_words": words_of(book_chapters(args.split_chapters)),
        "artifacts": str(args.artifacts),
        "machine": machine(), "load_start": load_start, "load_end": os.getloadavg(),
        "runs": runs,
    }
    write_results(args.out, args.name, result, format_table(result), plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
