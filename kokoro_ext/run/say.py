"""``python -m kokoro_ext.say "Hello world" -o hello.wav [--voice NAME] [--speed S] [--stream]``.

``--voice`` takes any of the 54 Kokoro v1.0 voices by name (``--list-voices``; they are
fetched once into the cache by ``python -m kokoro_ext.build.fetch``, not copied into builds),
a blend of them (``af_bella(2)+af_sky(1)``: kokoro_ext.run.voices) or a voice pack file.

Text comes from the argument, from a file (``-f FILE``) or from stdin (text ``-``), and
may be a whole document: it is synthesized in chunks (Synthesizer.stream).  With
``--stream`` each chunk is appended to the WAV file as soon as it is ready and reported
on its own line; without, the file is written once at the end.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path


from kokoro_ext.run.cache import FETCH_HINT, voices_dir
from kokoro_ext.run.voices import list_voices
from kokoro_ext.run.pipeline import NonFiniteOutput
from kokoro_ext.run.synthesizer import Synthesizer, join
from kokoro_ext.run.wav import SAMPLE_RATE, open_wav, pcm16, write_wav


def read_text(text: str | None, file: Path | None) -> str:
    """The text to say: the argument, the file's contents, or stdin for ``-``."""
    if (text is None) == (file is None):
        raise ValueError("give the text either as an argument (- for stdin) or with -f FILE")
    if file is not None:
        try:
            return file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"cannot read {file}: {err}") from err
    return sys.stdin.read() if text == "-" else text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.say",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument("text", nargs="?", help="the text, or - to read it from stdin")
    parser.add_argument("-f", "--file", type=Path, help="read the text from this UTF-8 file")
    parser.add_argument("-o", "--output", type=Path, default=Path("out.wav"))
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument(
        "--voice",
        help="a voice name (af_heart, am_michael, ...: see --list-voices), a blend of voices "
        "of one language (af_bella+af_sky, af_bella(2)+af_sky(1): weights normalized) or a "
        "voice pack file .bin/.npy/.pt (default: the build's voice)",
    )
    parser.add_argument(
        "--list-voices", action="store_true", help="list the voices `--voice NAME` takes and exit"
    )
    parser.add_argument(
        "--lang",
        help=f"the text's language ({LANGUAGES}; default: the voice's first letter, else a); "
        "SSML when the text starts with <speak>",
    )
    parser.add_argument("--speed", type=float, default=1.0, help="0.25 to 4 (default: 1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="noise seed of the first chunk (chunk i: seed + i)"
    )
    parser.add_argument(
        "--stream", action="store_true", help="append each chunk to the WAV file as it is ready"
    )
    parser.add_argument("--srt", type=Path, help="also write captions as SubRip (.srt)")
    parser.add_argument("--vtt", type=Path, help="also write captions as WebVTT (.vtt)")
    parser.add_argument(
        "--timestamps", type=Path, help="also write each word's start and end (s) as JSON"
    )
    args = parser.parse_args(argv)
    if args.list_voices:
        return _list_voices()
    start = time.perf_counter()
    try:
        text = read_text(args.text, args.file)
        synth = Synthesizer(args.artifacts, lang=args.lang)
        # load the stages while the text is phonemized (the G2P's start-up is seconds)
        threading.Thread(target=synth.load, daemon=True).start()
        chunks = synth.stream(text, args.voice, args.speed, args.seed)
        timed: list = []  # every chunk's words, noted as the chunks go by
        chunks = _noting_words(chunks, timed)
        if args.stream:
            seconds = _stream_to(args.output, chunks, start)
        else:
            done = list(chunks)
            audio = join(done)
            write_wav(args.output, audio)
            print(" ".join(c.phonemes for c in done))
            seconds = len(audio) / SAMPLE_RATE
        _write_timestamps(args, timed, seconds)
    except (ValueError, NonFiniteOutput) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    took = time.perf_counter() - start
    print(f"wrote {args.output}: {seconds:.2f} s of audio in {took:.2f} s")
    return 0


LANGUAGES = (
    "a American English, b British English, e Spanish, f French, h Hindi, i Italian, "
    "j Japanese, p Brazilian Portuguese, z Mandarin"
)


def _list_voices() -> int:
    names = list_voices()
    if not names:
        print(f"error: no voices in {voices_dir()}; {FETCH_HINT}", file=sys.stderr)
        return 2
    print(f"{len(names)} voices in {voices_dir()}; the first letter is the voice's language "
          f"({LANGUAGES}), the second f or m; it picks the text's language unless --lang does:")
    for prefix in sorted({n.split('_')[0] for n in names}):
        print(f"  {prefix}: " + " ".join(n for n in names if n.startswith(prefix + "_")))
    return 0


def _noting_words(chunks, timed: list):
    for chunk in chunks:
        timed.extend(chunk.words)
        yield chunk


def _write_timestamps(args, timed: list, seconds: float) -> None:
    """--srt, --vtt and --timestamps (kokoro_ext.run.timestamps)."""
    import json

    from kokoro_ext.run import timestamps

    outputs = [
        (args.srt, lambda: timestamps.srt(timestamps.captions(timed))),
        (args.vtt, lambda: timestamps.vtt(timestamps.captions(timed))),
        (args.timestamps, lambda: json.dumps(
            timestamps.as_json(timed, seconds), ensure_ascii=False, indent=1) + "\n"),
    ]
    for path, text in outputs:
        if path is None:
            continue
        try:
            path.write_text(text(), encoding="utf-8")
        except OSError as err:
            raise ValueError(f"cannot write {path}: {err}") from err


def _stream_to(path: Path, chunks, start: float) -> float:
    written = 0
    with open_wav(path) as f:
        for chunk in chunks:
            audio = chunk.joined()
            f.writeframes(pcm16(audio))
            written += len(audio)
            trace = chunk.trace
            print(
                f"chunk {chunk.index}: {len(chunk.audio) / SAMPLE_RATE:.2f} s at "
                f"{time.perf_counter() - start:.2f} s ({trace.tokens} tokens, "
                f"{trace.frames} frames): {chunk.text}",
                flush=True,
            )
    return written / SAMPLE_RATE


if __name__ == "__main__":
    sys.exit(main())
