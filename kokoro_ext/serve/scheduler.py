"""One worker thread that runs every request's chunk generator, fairly.

The Synthesizer runs one chunk at a time (each stage already uses every core), so the
server gives it one thread and decides which request's chunk comes next:

1. a request that has not produced audio yet goes first: time to first audio is what a
   listener waits on, and a short text is often one chunk.  Among those, the shortest
   text first (its whole reply is near, and a burst of arrivals then keeps short replies
   from waiting behind long ones' first chunks), except that one that has waited
   ``first_audio_aging`` seconds goes first, oldest first, so a long text's first audio
   is late by at most that much;
2. otherwise round-robin over the active requests, one chunk each, so that a long text
   cannot starve the others;
3. a request whose client has not taken its last ``max_buffered`` chunks is skipped
   (a slow reader holds no more than that in memory) until it takes one.

How much work one turn is, is up to the generators: the server's (kokoro_ext.serve.app)
bound each chunk's phonemes, a first chunk's more tightly.

Admission is bounded: at most ``max_active`` requests take turns, ``max_queue`` more wait
(first come, first served) and beyond that ``submit`` raises ``QueueFull``.  A cancelled
request's generator is closed by the worker before its next chunk: its work stops.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class QueueFull(Exception):
    """Raised by ``Scheduler.submit`` when every active and waiting slot is taken."""


#: What a Job's queue holds after its last chunk.
END = object()


@dataclass
class Job:
    """One request's generator, as the worker thread sees it."""

    chunks: Iterator[Any]
    loop: asyncio.AbstractEventLoop
    id: int = 0
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    produced: int = 0  # chunks the worker pulled from ``chunks``
    taken: int = 0  # chunks the client side took from ``queue``
    cancelled: bool = False
    done: bool = False
    submitted: float = field(default_factory=time.monotonic)
    size: int = 0  # how long the request's text is (characters): shorter starts sooner

    async def get(self, scheduler: Scheduler) -> Any:
        """The next chunk, END, or raise the exception the generator raised."""
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        if item is not END:
            scheduler._took(self)
        return item


@dataclass
class Stats:
    """Counters for /health and the tests."""

    active: int
    waiting: int
    chunks: int  # chunks synthesized since start
    completed: int
    cancelled: int
    failed: int
    buffered: int  # chunks synthesized for active requests that their clients have not taken


class Scheduler:
    """Runs submitted chunk generators in one worker thread (see the module docstring)."""

    def __init__(
        self,
        max_active: int = 8,
        max_queue: int = 32,
        max_buffered: int = 2,
        first_audio_aging: float = 2.0,
    ):
        if max_active < 1 or max_queue < 0 or max_buffered < 1 or not first_audio_aging >= 0:
            raise ValueError(
                "max_active and max_buffered must be >= 1, max_queue and first_audio_aging >= 0"
            )
        self.max_active = max_active
        self.first_audio_aging = first_audio_aging
        self.max_queue = max_queue
        self.max_buffered = max_buffered
        self._active: list[Job] = []
        self._waiting: deque[Job] = deque()
        self._next = 0  # round-robin position in _active
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._stopping = False
        self._chunks = self._completed = self._cancelled = self._failed = 0
        self._seconds_per_chunk = 0.0  # moving average, for Retry-After
        self._thread = threading.Thread(target=self._work, name="kokoro-scheduler", daemon=True)
        self._thread.start()

    def submit(self, chunks: Iterator[Any], size: int = 0) -> Job:
        """Admit a generator (called on the event loop); QueueFull if there is no room.

        ``size``: the length of the request's text, for the order of first chunks."""
        job = Job(chunks, asyncio.get_running_loop(), size=size)
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if len(self._active) + len(self._waiting) >= self.max_active + self.max_queue:
                raise QueueFull(
                    f"{len(self._active)} requests are being synthesized and "
                    f"{len(self._waiting)} are waiting (the most this server takes)"
                )
            job.id = next(self._ids)
            if len(self._active) < self.max_active:
                self._active.append(job)
            else:
                self._waiting.append(job)
            self._cond.notify_all()
        return job

    def cancel(self, job: Job) -> None:
        """Stop ``job``: the worker closes its generator and pulls no more chunks from it."""
        with self._cond:
            if job.done:
                return
            if job in self._waiting:  # never started: free its place in the queue now
                self._waiting.remove(job)
                job.done = True
                self._cancelled += 1
                _close(job)
                return
            job.cancelled = True
            self._cond.notify_all()

    def retry_after(self) -> int:
        """Seconds a refused client should wait: about one round of the active requests."""
        with self._cond:
            return max(1, round(self._seconds_per_chunk * (len(self._active) + len(self._waiting))))

    def stats(self) -> Stats:
        with self._cond:
            return Stats(
                active=len(self._active),
                waiting=len(self._waiting),
                chunks=self._chunks,
                completed=self._completed,
                cancelled=self._cancelled,
                failed=self._failed,
                buffered=sum(job.produced - job.taken for job in self._active),
            )

    def close(self, timeout: float = 10.0) -> None:
        """Cancel everything and stop the worker thread."""
        with self._cond:
            self._stopping = True
            for job in [*self._active, *self._waiting]:
                job.cancelled = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # --- on the event loop -------------------------------------------------------------

    def _took(self, job: Job) -> None:
        with self._cond:
            job.taken += 1
            self._cond.notify_all()  # the worker may be waiting for this reader

    # --- in the worker thread ----------------------------------------------------------

    def _pick(self) -> Job | None:
        """The next job to run a chunk of, or None if none can run (lock held)."""
        for job in self._active:  # cancelled ones are retired first, whatever their turn
            if job.cancelled:
                return job
        starting = [job for job in self._active if job.produced == 0]
        if starting:
            now = time.monotonic()
            aged = [job for job in starting if now - job.submitted >= self.first_audio_aging]
            if aged:
                return min(aged, key=lambda job: job.submitted)
            return min(starting, key=lambda job: (job.size, job.submitted))
        n = len(self._active)
        for step in range(n):
            job = self._active[(self._next + step) % n]
            if job.produced - job.taken < self.max_buffered:
                self._next = (self._next + step + 1) % n
                return job
        return None

    def _retire(self, job: Job) -> None:
        """Take ``job`` out and let a waiting one in (lock held)."""
        job.done = True
        self._active.remove(job)
        if self._next >= len(self._active):
            self._next = 0
        while self._waiting and len(self._active) < self.max_active:
            waiting = self._waiting.popleft()
            self._active.append(waiting)

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._pick()
                while job is None and not (self._stopping and not self._active):
                    self._cond.wait()
                    job = self._pick()
                if job is None:
                    return
                if job.cancelled:
                    self._cancelled += 1
                    self._retire(job)
                    _close(job)
                    continue
            # synthesis runs without the lock: submit, cancel and readers go on meanwhile
            start = time.monotonic()
            try:
                item = next(job.chunks)
            except StopIteration:
                item = END
            except Exception as error:  # handed to the request, which answers with it
                item = error
            elapsed = time.monotonic() - start
            with self._cond:
                if item is END or isinstance(item, Exception):
                    if isinstance(item, Exception):
                        self._failed += 1
                    else:
                        self._completed += 1
                    self._retire(job)
                else:
                    job.produced += 1
                    self._chunks += 1
                    self._seconds_per_chunk = 0.8 * self._seconds_per_chunk + 0.2 * elapsed
            _deliver(job, item)


def _deliver(job: Job, item: Any) -> None:
    try:
        job.loop.call_soon_threadsafe(job.queue.put_nowait, item)
    except RuntimeError:  # the event loop is closed: nobody is listening any more
        pass


def _close(job: Job) -> None:
    close = getattr(job.chunks, "close", None)
    if close is not None:
        close()
    _deliver(job, END)
