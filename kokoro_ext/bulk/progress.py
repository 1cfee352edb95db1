"""The progress line of a bulk run and its summary."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO


@dataclass
class Tally:
    """What a run has done so far."""

    records: int  # in the input
    written: int = 0
    skipped: int = 0  # done by an earlier run, output verified
    failed: int = 0
    audio_seconds: float = 0.0  # written by this run
    synthesis_seconds: float = 0.0  # actors' time on this run's pieces
    characters_done: int = 0
    characters: int = 0  # of the records this run synthesizes

    @property
    def done(self) -> int:
        return self.written + self.skipped + self.failed


class Progress:
    """``records 12/40 (1 failed, 5 skipped) | 0.42 h audio | 6.1 audio s/s | 3:12, ~5:40 left``

    Redrawn in place on a terminal, at most every ``interval`` seconds; elsewhere (a log
    file) a line every ``log_interval`` seconds.
    """

    def __init__(self, tally: Tally, stream: TextIO | None = None, enabled: bool = True,
                 interval: float = 0.5, log_interval: float = 30.0):
        self.tally, self.enabled = tally, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval if self.tty else log_interval
        self.start = time.monotonic()
        self._last = -float("inf")

    def line(self) -> str:
        t = self.tally
        elapsed = time.monotonic() - self.start
        rate = t.audio_seconds / elapsed if elapsed > 0 else 0.0
        extra = ", ".join(f"{n} {what}" for n, what in ((t.failed, "failed"), (t.skipped, "skipped")) if n)
        left = ""
        if 0 < t.characters_done < t.characters:
            left = f", ~{_clock(elapsed * (t.characters - t.characters_done) / t.characters_done)} left"
        return (f"records {t.done}/{t.records}{f' ({extra})' if extra else ''} | "
                f"{t.audio_seconds / 3600:.2f} h audio | {rate:.1f} audio s/s | "
                f"{_clock(elapsed)}{left}")

    def update(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < self.interval):
            return
        self._last = now
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.update(force=True)
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
