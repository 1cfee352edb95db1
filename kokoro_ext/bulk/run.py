"""A bulk run on Ray Data: records in, an audio file and a word list per record out.

The driver (this process) reads the records, keeps those an earlier run finished (their
outputs verified: kokoro_ext.bulk.output), cuts the rest into pieces at sentence ends
and hands them to Ray Data: ``map_batches`` with ``SynthesizePieces``, a fixed pool of
actors that each load the build once.  The pieces come back in input order
(``preserve_order``) and the driver writes each record as its pieces arrive: the audio
crosses to the driver, so only the driver's machine needs the output directory, and a
record is written once however often Ray retries a piece (a killed actor is restarted
and its batch run again: Ray Data's actor pools retry without limit).

Cores: ``threads`` per actor (TVM's thread pool) and as many actors as the cluster's CPUs
hold.  On the 2-core machine of bench/results/bulk.txt one actor of two threads took 57 s
where two actors of one thread took 89 s for the same 361 s of audio, and needs 500 MB
less, so two threads per actor is the default, fewer where no node has two CPUs (an
actor asking for more CPUs than any node has would never start).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kokoro_ext.bulk.output import (
    FAILED, FORMATS, OK, RecordWriter, ResultRow, failed_row, read_results, remove_partials,
    still_valid, write_results,
)  # fmt: skip
from kokoro_ext.bulk.progress import Progress, Tally
from kokoro_ext.bulk.records import PIECE_CHARS, Record, pieces, read_records
from kokoro_ext.bulk.worker import PieceResult, SynthesizePieces, from_columns

#: Threads per actor: as fast as one and the least memory here (module docstring).
DEFAULT_THREADS = 2
#: Ray Data blocks at most: one piece per block up to this many pieces (an actor that
#: dies loses one block), more per block beyond (Ray's bookkeeping per block).
MAX_BLOCKS = 10_000
#: Seconds between rewrites of the results table while the run goes on.
SAVE_EVERY = 30.0


@dataclass(frozen=True)
class BulkOptions:
    """A bulk run, as ``python -m kokoro_ext.bulk`` takes it."""

    input: Path
    out_dir: Path
    artifacts: Path = Path("artifacts")
    format: str = "flac"
    voice: str | None = None  # a record's own voice wins; None: the build's voice
    speed: float = 1.0
    language: str | None = None  # None: the voice's language
    address: str | None = None  # a Ray cluster; None: one started on this machine
    actors: int | None = None  # None: the cluster's CPUs // threads
    threads: int | None = None  # None: DEFAULT_THREADS, or the largest node's CPUs if fewer
    #: a CUDA build's actors: the share of a GPU each takes (Ray's num_gpus; 0.5 puts
    #: two on a GPU), their number the cluster's GPUs / this unless ``actors`` says
    gpus_per_actor: float = 1.0
    piece_chars: int = PIECE_CHARS
    progress: bool = True


@dataclass(frozen=True)
class Summary:
    """What a run did."""

    tally: Tally
    wall_seconds: float
    actors: int
    threads: int
    results: Path
    failures: tuple[ResultRow, ...]

    @property
    def audio_per_second(self) -> float:
        return self.tally.audio_seconds / self.wall_seconds if self.wall_seconds else 0.0

    def text(self) -> str:
        t = self.tally
        lines = [
            f"{t.records} records: {t.written} written, {t.skipped} already done, {t.failed} failed",
            f"{t.audio_seconds / 3600:.3f} h of audio in {self.wall_seconds:.1f} s: "
            f"{self.audio_per_second:.2f} audio s/s ({self.actors} actors x {self.threads} threads; "
            f"{t.synthesis_seconds:.1f} actor s)",
            f"results: {self.results}",
        ]
        for row in self.failures[:10]:
            lines.append(f"  failed {row.id}: {row.error[:200]}")
        if len(self.failures) > 10:
            lines.append(f"  ... and {len(self.failures) - 10} more (the results table has them all)")
        return "\n".join(lines)


def run(options: BulkOptions, log=print) -> Summary:
    """Synthesize every record of ``options.input`` not already done; the summary."""
    if options.format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {options.format!r}")
    if (options.threads is not None and options.threads < 1) or (
        options.actors is not None and options.actors < 1
    ):
        raise ValueError("actors and threads must be at least 1")
    start = time.monotonic()
    out_dir = options.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_partials(out_dir)
    records = read_records(options.input, options.voice, options.speed, options.language)
    previous = read_results(out_dir)
    rows: dict[int, ResultRow] = {}
    tally = Tally(records=len(records))
    todo: list[Record] = []
    for record in records:
        if record.problem:
            rows[record.index] = failed_row(record, record.problem, record.fingerprint(options.format))
            tally.failed += 1
        elif still_valid(previous.get(record.id), record, out_dir, options.format):
            rows[record.index] = replace(previous[record.id], index=record.index)
            tally.skipped += 1
        else:
            todo.append(record)
    tally.characters = sum(len(r.text) for r in todo)
    split = Split(options.actors or 1, options.threads or DEFAULT_THREADS)
    progress = Progress(tally, enabled=options.progress)
    try:
        if todo:
            _check_build(options)
            split = _synthesize(options, todo, rows, tally, progress)
    finally:
        results = write_results(out_dir, list(rows.values()))
        progress.close()
    failures = tuple(sorted((r for r in rows.values() if r.status == FAILED), key=lambda r: r.index))
    return Summary(tally, time.monotonic() - start, split.actors, split.threads, results, failures)


@dataclass(frozen=True)
class Split:
    """The actors of a run, the threads of each and the share of a GPU each takes."""

    actors: int
    threads: int
    gpus: float = 0.0


def split_gpus(options: BulkOptions, node_gpus: list[float], node_cpus: list[int]) -> Split:
    """Actors for a CUDA build on a cluster whose live nodes have ``node_gpus`` GPUs:
    ``gpus_per_actor`` of a GPU each, as many as the GPUs hold (or ``actors``), each with
    the threads of its host steps.  ValueError where no node has a GPU or the share is
    not one Ray places (more than one GPU must be a whole number of them)."""
    share = options.gpus_per_actor
    if share <= 0 or (share > 1 and share != int(share)):
        raise ValueError(f"--gpus-per-actor {share}: give a share of a GPU (0.25, 0.5, 1) or "
                         "a whole number of GPUs")  # fmt: skip
    if not any(node_gpus):
        raise ValueError("this build is for CUDA and no node of the Ray cluster has a GPU: "
                         "run it where Ray sees NVIDIA GPUs, or build for the CPU "
                         "(python -m kokoro_ext.build --target llvm)")  # fmt: skip
    per_node = [int(g // share + 1e-9) for g in node_gpus]
    threads = split_cores(BulkOptions(options.input, options.out_dir, threads=options.threads),
                          node_cpus).threads  # fmt: skip
    return Split(options.actors or max(1, sum(per_node)), threads, share)


def split_cores(options: BulkOptions, node_cpus: list[int]) -> Split:
    """Actors x threads for a cluster whose live nodes have ``node_cpus`` CPUs each.

    ValueError for ``threads`` more than any node has: Ray would wait for such an actor
    forever."""
    most = max(node_cpus, default=1)
    threads = options.threads or min(DEFAULT_THREADS, most)
    if threads > most:
        raise ValueError(
            f"--threads {threads}: no node of the cluster has that many CPUs (the largest has "
            f"{most}); use --threads {most} or fewer"
        )
    return Split(options.actors or max(1, sum(n // threads for n in node_cpus)), threads)


def _is_cuda(options: BulkOptions) -> bool:
    """Whether the build is for CUDA (its actors take GPUs), read from its manifest."""
    from kokoro_ext.run import artifacts

    return artifacts.read_manifest(Path(options.artifacts)).target.get("kind") == "cuda"


def _check_build(options: BulkOptions) -> None:
    """On this machine, refuse a build the actors could not load before starting any
    (one whose actors fail to start would end the dataset with Ray's traceback).  On a
    cluster the nodes' CPUs and files are theirs to check."""
    if options.address is not None:
        return
    if not Path(options.artifacts).is_dir():
        raise FileNotFoundError(f"no build at {options.artifacts} (python -m kokoro_ext.build --out DIR)")
    from kokoro_ext.run.synthesizer import Synthesizer

    Synthesizer(options.artifacts)  # ValueError naming why: format, TVM version, CPU, files


def _synthesize(options: BulkOptions, todo: list[Record], rows: dict[int, ResultRow],
                tally: Tally, progress: Progress) -> Split:
    """Run ``todo``'s pieces through Ray, writing each record as it completes; the split
    of the cores used."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=options.address, include_dashboard=False,
                 logging_level=logging.WARNING, log_to_driver=True)
    try:
        import ray.data

        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # records are written in order
        context.enable_progress_bars = False  # ours says records and audio hours
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        alive = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        node_cpus = [int(r.get("CPU", 0)) for r in alive]
        if _is_cuda(options):
            split = split_gpus(options, [float(r.get("GPU", 0)) for r in alive], node_cpus)
        else:
            split = split_cores(options, node_cpus)
        by_index = {record.index: record for record in todo}
        items = [asdict(piece) for record in todo for piece in pieces(record, options.piece_chars)]
        dataset = ray.data.from_items(items, override_num_blocks=min(len(items), MAX_BLOCKS))
        synthesized = dataset.map_batches(
            SynthesizePieces,
            fn_constructor_kwargs={"artifacts": str(Path(options.artifacts).resolve()),
                                   "threads": split.threads},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=split.actors),
            num_cpus=split.threads,
            **({"num_gpus": split.gpus} if split.gpus else {}),
        )
        writers: dict[int, RecordWriter] = {}
        saved = time.monotonic()
        try:
            for batch in synthesized.iter_batches(batch_size=None, batch_format="numpy"):
                for result in from_columns(batch, PieceResult):
                    _add(result, by_index, writers, rows, tally, options)
                    progress.update()
                if time.monotonic() - saved > SAVE_EVERY:
                    write_results(options.out_dir, list(rows.values()))
                    saved = time.monotonic()
        finally:
            for writer in writers.values():  # stopped mid-record: no half-written file stays
                writer.discard()
        return split
    finally:
        if started:
            ray.shutdown()


def _add(result: PieceResult, by_index: dict[int, Record], writers: dict[int, RecordWriter],
         rows: dict[int, ResultRow], tally: Tally, options: BulkOptions) -> None:
    record = by_index[result.record]
    if result.record in rows:  # a piece delivered twice: the record is written already
        return
    writer = writers.get(result.record)
    if writer is None:
        writer = writers[result.record] = RecordWriter(options.out_dir, record, options.format)
    writer.add(result)
    tally.synthesis_seconds += result.seconds
    if not result.last:
        return
    row = writer.finish()
    del writers[result.record]
    rows[result.record] = row
    tally.characters_done += len(record.text)
    if row.status == OK:
        tally.written += 1
        tally.audio_seconds += row.audio_seconds
    else:
        tally.failed += 1
