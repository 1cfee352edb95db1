"""Memory over a long run: ``python bench/soak.py [--artifacts DIR] [-n 300] [--plot rss.png]``.

Synthesizes many utterances in a loop (texts of varied length and speeds, a new noise
seed each) on one Synthesizer and reports the process's resident memory
(VmRSS from /proc/self/status) every ``--every`` utterances, then start / end / peak.
A leak shows as RSS that keeps climbing after the first utterances have loaded every
stage.  Without ``--artifacts`` a small-config build (as the tests use) is made in a
temporary directory first.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

TEXTS = [
    "Hi.",
    "Hello there.",
    "How are you today, my old friend?",
    "The quick brown fox jumps over the lazy dog; then it sleeps.",
    "Nevertheless, the river kept on running, quietly and without end, past the old mill.",
    "Numbers like 42 and 3.5 are read out, and so is Dr. Smith's name.\n\nA new paragraph.",
    "Supercalifragilisticexpialidocious!",
]


def rss_mb() -> float:
    """This process's resident set size in MiB (Linux /proc/self/status VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (not Linux?)")


def small_build(root: Path) -> Path:
    """The tests' small-config build under ``root``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from small_build import build_small

    return build_small(root, log=lambda line: None)


def soak(
    artifacts: Path, utterances: int, every: int, log=lambda row: None
) -> list[tuple[int, float, float, int]]:
    """(utterance, seconds since start, RSS MiB, chunks) after every ``every`` utterances.

    Row 0 is taken after loading the Synthesizer, before any synthesis; ``log`` sees
    each row as it is taken.
    """
    from kokoro_ext.run.synthesizer import Synthesizer

    synth = Synthesizer(artifacts)
    start = time.perf_counter()
    rows = [(0, 0.0, rss_mb(), 0)]
    chunks = 0
    jobs = itertools.cycle(itertools.product(TEXTS, (1.0, 0.8, 1.25)))
    for n in range(1, utterances + 1):
        text, speed = next(jobs)
        chunks += sum(1 for _ in synth.stream(text, speed=speed, seed=n))
        if n % every == 0 or n == utterances:
            rows.append((n, time.perf_counter() - start, rss_mb(), chunks))
            log(rows[-1])
    return rows


def report(rows: Sequence[tuple[int, float, float, int]]) -> str:
    """The table and the start (after the first row with synthesis) / end / peak figures."""
    lines = [f"{'utterances':>10} {'chunks':>7} {'seconds':>8} {'RSS MiB':>8}"]
    lines += [f"{n:>10} {c:>7} {t:>8.1f} {r:>8.1f}" for n, t, r, c in rows]
    loaded, first, last = rows[0][2], rows[1][2], rows[-1][2]
    peak = max(r for _, _, r, _ in rows)
    lines.append(
        f"RSS: {loaded:.1f} MiB loaded, {first:.1f} MiB after {rows[1][0]} utterances, "
        f"{last:.1f} MiB at the end ({last - first:+.1f}), peak {peak:.1f} MiB"
    )
    return "\n".join(lines)


def plot(rows: Sequence[tuple[int, float, float, int]], path: Path) -> None:
    """RSS against utterances as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([r[0] for r in rows], [r[2] for r in rows], marker=".")
    ax.set_xlabel("utterances")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("kokoro_ext soak: resident memory")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=Path, help="build to load (default: a small build)")
    parser.add_argument("-n", "--utterances", type=int, default=300)
    parser.add_argument("--every", type=int, default=25, help="RSS row every N utterances")
    parser.add_argument("--plot", type=Path, help="write an RSS plot (PNG) here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = args.artifacts or small_build(Path(tmp))
        rows = soak(
            artifacts,
            args.utterances,
            args.every,
            log=lambda row: print(f"{row[0]} utterances: {row[2]:.1f} MiB", file=sys.stderr),
        )
    print(report(rows))
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
