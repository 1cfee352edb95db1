"""The speech server under load: 1, 2, 4, 8 concurrent clients against 127.0.0.1.

Each engine is a server started here as a subprocess (and stopped after), on a free
port, speaking OpenAI's ``POST /v1/audio/speech`` with ``response_format: pcm``:

  tvm         ``python -m kokoro_ext.serve --artifacts DIR`` (this project)
  fastkokoro  fastkokoro 0.7.0 from PyPI (FastAPI + ONNX Runtime), offline on the fetched
              int8 model ``kokoro-v1.0.int8.onnx`` and ``voices-kokoro-onnx.npz``
              (kokoro_ext.run.cache), with ``"stream": true``.  It pins its own stack
              (numba, misaki, onnxruntime), so it lives in a venv of its own:
              ``python -m venv ~/.fastkokoro && ~/.fastkokoro/bin/pip install
              "fastkokoro[cpu]==0.7.0"``; pass ``--fastkokoro ~/.fastkokoro/bin/fastkokoro``

Load: at each level of ``--clients``, that many clients send requests back to back from
one shared list of ``--requests`` per client, rounded up to a multiple of four (cut
short at ``--time-cap`` seconds), every fourth a paragraph (LONG, ~70 words), the
others a short reply (SHORT, 5-12 words), voice af_heart.  A server is warmed up with one request first (not counted).

Per level: time to the first audio byte (TTFA) p50/p95, short and long texts apart;
total latency p50/p95; throughput in seconds of audio (the PCM received) per wall
second; errors (a status other than 200, a broken stream, no audio); the server's peak
RSS (VmHWM of its process, since its start).  Writes serve.txt and serve.json to
``--out`` (default bench/results), then serve.png if matplotlib is installed.  A server
that does not come up is reported in one line and left out.  The machine is shared: its
load is recorded.

    python bench/serve.py [--artifacts artifacts] [--engines tvm,fastkokoro]
                          [--clients 1,2,4,8] [--requests 2] [--time-cap 120]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness import load_engine, skipped, write_results

ROOT = Path(__file__).resolve().parent.parent
BYTES_PER_SECOND = 2 * 24_000  # 16-bit mono at 24 kHz

SHORT = [
    "Sure, I can help with that.",
    "Your meeting starts in ten minutes.",
    "Turn left at the next light, then keep straight.",
    "The weather today is sunny with a light breeze.",
    "I have added milk and eggs to your shopping list.",
    "Sorry, I did not catch that. Could you say it again?",
]
LONG = [
    "The history of the city goes back nearly two thousand years. It began as a small "
    "settlement on the river, where traders stopped to rest and exchange goods. Over the "
    "centuries it grew into a busy port, with warehouses, markets and churches crowding "
    "the narrow streets. Today most of the old buildings are gone, but the river still "
    "shapes the life of the city, and on summer evenings its banks fill with people.",
    "Before you begin, make sure the device is switched off and unplugged. Remove the back "
    "cover by pressing the two clips on either side, then lift it gently. Insert the new "
    "battery with the label facing up, and check that the contacts line up with the "
    "springs. Replace the cover until both clips snap into place. Finally, plug the device "
    "in and hold the power button for three seconds to start it again.",
]


@dataclass
class Result:
    """One request as the client saw it."""

    kind: str  # "short" or "long"
    ttfa: float | None  # seconds to the first audio byte
    total: float  # seconds to the last byte (or the failure)
    audio: float  # seconds of audio received
    error: str | None


def workload(n: int) -> list[tuple[str, str]]:
    """``n`` (kind, text) requests: every fourth long, the texts in turn."""
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(("long", LONG[(i // 4) % len(LONG)]))
        else:
            out.append(("short", SHORT[i % len(SHORT)]))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM of a process (its peak resident set since it started), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def server_command(engine: str, args: argparse.Namespace, port: int) -> tuple[list[str], dict]:
    env = dict(os.environ)
    if engine == "tvm":
        return [str(args.python), "-m", "kokoro_ext.serve", "--artifacts", str(args.artifacts.resolve()),
                "--port", str(port), "--max-queue", "64"], env
    if engine == "fastkokoro":
        sys.path.insert(0, str(ROOT))
        from kokoro_ext.run import cache

        env.update(
            HF_HUB_OFFLINE="1",
            FASTKOKORO_MODEL_PATH=str(cache.model_path()),
            FASTKOKORO_VOICES_PATH=str(cache.cache_dir() / "voices-kokoro-onnx.npz"),
            FASTKOKORO_CACHE_DIR=str(cache.cache_dir() / "fastkokoro"),
            FASTKOKORO_HOST="127.0.0.1",
            FASTKOKORO_PORT=str(port),
        )
        return [str(args.fastkokoro)], env
    raise ValueError(f"unknown engine {engine!r}")


def body(engine: str, text: str) -> dict:
    request = {"model": "kokoro", "input": text, "voice": "af_heart", "response_format": "pcm"}
    if engine == "fastkokoro":
        request["stream"] = True  # it streams only when asked
    return request


async def one(client: httpx.AsyncClient, url: str, engine: str, kind: str, text: str) -> Result:
    start = time.perf_counter()
    first, received, error = None, 0, None
    try:
        async with client.stream("POST", f"{url}/v1/audio/speech", json=body(engine, text)) as r:
            if r.status_code != 200:
                error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
            else:
                async for piece in r.aiter_raw():
                    if piece and first is None:
                        first = time.perf_counter() - start
                    received += len(piece)
                if received == 0:
                    error = "no audio"
    except httpx.HTTPError as e:
        error = f"{type(e).__name__}: {e}"
    return Result(kind, first, time.perf_counter() - start, received / BYTES_PER_SECOND, error)


async def level(url: str, engine: str, clients: int, n: int, time_cap: float) -> tuple[list[Result], float]:
    """Run ``n`` requests with ``clients`` concurrent clients; (results, wall seconds)."""
    todo = list(reversed(workload(n)))
    results: list[Result] = []
    start = time.perf_counter()

    async def client_loop(client: httpx.AsyncClient):
        while todo and time.perf_counter() - start < time_cap:
            kind, text = todo.pop()
            results.append(await one(client, url, engine, kind, text))

    timeout = httpx.Timeout(time_cap + 60, connect=10)
    async with httpx.AsyncClient(timeout=timeout) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    return results, time.perf_counter() - start


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summarize(results: list[Result], wall: float, rss: float | None) -> dict:
    ok = [r for r in results if r.error is None]
    ttfa = {k: [r.ttfa for r in ok if r.kind == k and r.ttfa is not None] for k in ("short", "long")}
    totals = [r.total for r in ok]
    audio = sum(r.audio for r in ok)
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "error_samples": sorted({r.error for r in results if r.error})[:3],
        "ttfa_short_p50": pct(ttfa["short"], 50),
        "ttfa_short_p95": pct(ttfa["short"], 95),
        "ttfa_long_p50": pct(ttfa["long"], 50),
        "ttfa_long_p95": pct(ttfa["long"], 95),
        "total_p50": pct(totals, 50),
        "total_p95": pct(totals, 95),
        "audio_seconds": audio,
        "wall_seconds": wall,
        "throughput": audio / wall if wall else None,
        "peak_rss_mb": rss,
    }


def start_server(engine: str, args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command, env = server_command(engine, args, port)
    out = log.open("w")
    # not from the repository: `-m kokoro_ext.serve` would import its sources, not the
    # package installed in --python's environment
    proc = subprocess.Popen(command, cwd=log.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{engine} server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError(f"{engine} server did not answer /health in {args.startup_timeout} s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_engine(engine: str, args: argparse.Namespace, log=print) -> dict:
    server_log = Path(tempfile.gettempdir()) / f"bench-serve-{engine}.log"
    started, reason = load_engine(engine, lambda: start_server(engine, args, server_log), log)
    if started is None:
        return {"skipped": reason}
    proc, url = started
    try:
        idle_rss = peak_rss_mb(proc.pid)
        warm = asyncio.run(level(url, engine, 1, 1, args.time_cap))[0]
        log(f"{engine}: up at {url}, warm-up {warm[0].total:.2f} s ({warm[0].error or 'ok'})")
        levels = {}
        for clients in args.clients:
            # a whole number of rounds of four, so that every level has the same mix
            n = -(-clients * args.requests // 4) * 4
            results, wall = asyncio.run(level(url, engine, clients, n, args.time_cap))
            levels[clients] = summarize(results, wall, peak_rss_mb(proc.pid))
            log(format_row(engine, clients, levels[clients]))
        return {"idle_rss_mb": idle_rss, "levels": levels}
    finally:
        stop_server(proc)


def fmt(value, spec: str = "6.2f") -> str:
    return "     -" if value is None else format(value, spec)


HEADER = (
    f"{'engine':<11}{'clients':>7}{'reqs':>5}{'errs':>5}  {'TTFA short':>13}  {'TTFA long':>13}"
    f"  {'total':>13}  {'audio s/s':>9}  {'peak RSS':>8}\n"
    f"{'':<11}{'':>7}{'':>5}{'':>5}  {'p50    p95':>13}  {'p50    p95':>13}  {'p50    p95':>13}"
    f"  {'':>9}  {'MB':>8}"
)


def format_row(engine: str, clients: int, s: dict) -> str:
    return (
        f"{engine:<11}{clients:>7}{s['requests']:>5}{s['errors']:>5}  "
        f"{fmt(s['ttfa_short_p50'])} {fmt(s['ttfa_short_p95'])}  "
        f"{fmt(s['ttfa_long_p50'])} {fmt(s['ttfa_long_p95'])}  "
        f"{fmt(s['total_p50'])} {fmt(s['total_p95'])}  {fmt(s['throughput'], '9.2f')}  "
        f"{fmt(s['peak_rss_mb'], '8.0f')}"
    )


def format_table(result: dict) -> str:
    lines = [HEADER]
    for engine, data in result["engines"].items():
        if "skipped" in data:
            lines.append(f"{engine:<11}skipped: {data['skipped']}")
            continue
        for clients, s in data["levels"].items():
            lines.append(format_row(engine, int(clients), s))
    m = result["machine"]
    lines.append(
        f"\nseconds; TTFA = time to the first audio byte; {m['cpus']} CPUs, load before "
        f"{m['load_before']}, after {m['load_after']}; {result['requests_per_client']} requests "
        f"per client (at least 4), every fourth long; {m['date']}"
        + (f"; tvm's server run by {result['python']}" if result.get("python") else "")
    )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for engine, data in result["engines"].items():
        if "levels" not in data:
            continue
        clients = [int(c) for c in data["levels"]]
        levels = list(data["levels"].values())
        a.plot(clients, [s["ttfa_short_p95"] for s in levels], "o-", label=f"{engine} short p95")
        a.plot(clients, [s["ttfa_long_p95"] for s in levels], "s--", label=f"{engine} long p95")
        b.plot(clients, [s["throughput"] for s in levels], "o-", label=engine)
    a.axhline(1.5, color="grey", lw=0.8, ls=":")
    a.set(xlabel="concurrent clients", ylabel="time to first audio (s)", title="TTFA p95")
    b.set(xlabel="concurrent clients", ylabel="audio seconds per wall second", title="throughput")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(result["clients"], [str(c) for c in result["clients"]])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    p.add_argument("--engines", default="tvm,fastkokoro")
    p.add_argument("--fastkokoro", type=Path, default=shutil.which("fastkokoro"),
                   help="the fastkokoro executable (default: on PATH)")
    p.add_argument("--python", type=Path, default=Path(sys.executable),
                   help="the interpreter that runs this project's server: a runtime-only "
                   "venv (README, Deploy) measures what a deployment holds (default: this one)")
    p.add_argument("--clients", default="1,2,4,8")
    p.add_argument("--requests", type=int, default=2, help="requests per client at each level")
    p.add_argument("--time-cap", type=float, default=120.0, help="seconds per level at most")
    p.add_argument("--startup-timeout", type=float, default=300.0)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    args.artifacts = args.artifacts.resolve()
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "clients": args.clients,
        "requests_per_client": args.requests,
        "time_cap": args.time_cap,
        "artifacts": str(args.artifacts),
        "python": str(args.python),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_before": round(os.getloadavg()[0], 2),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
        "texts": {"short": SHORT, "long": LONG},
        "engines": {},
    }
    print(HEADER)
    for engine in args.engines.split(","):
        if engine == "fastkokoro" and not (args.fastkokoro and Path(args.fastkokoro).exists()):
            result["engines"][engine] = {"skipped": "no fastkokoro executable (--fastkokoro)"}
            skipped(engine, result["engines"][engine]["skipped"])
            continue
        result["engines"][engine] = run_engine(engine, args)
    result["machine"]["load_after"] = round(os.getloadavg()[0], 2)
    write_results(args.out, "serve", result, format_table(result), plot)


if __name__ == "__main__":
    main()
