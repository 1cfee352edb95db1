"""``python -m kokoro_ext.say "Hello world" -o hello.mp3 [--voice NAME] [--speed S] [--stream]``.

``--voice`` takes any of the 54 Kokoro v1.0 voices by name (``--list-voices``; they are
fetched once into the cache by ``python -m kokoro_ext.build.fetch``, not copied into builds),
a blend of them (``af_bella(2)+af_sky(1)``: kokoro_ext.run.voices) or a voice pack file.

Text comes from the argument, from a file (``-f FILE``) or from stdin (text ``-``), and
may be a whole document: it is synthesized in chunks (Synthesizer.stream).  The output
file's extension picks the format (.wav .flac .mp3 .opus/.ogg .pcm .aac), written by the
server's encoders (kokoro_ext.run.encode); ``-o -`` writes to stdout, as ``--format``
names it (default wav); without ``-o`` the audio goes to out.wav.  With ``--stream`` the
output grows chunk by chunk as the chunks are ready; without, it is written once at the
end (with the length in the header, for WAV and FLAC).

Quiet by default: one line on stderr at the end (where the audio went, its length, the
time taken and the real-time factor), warnings one line each, and on a terminal a
progress bar while a text of more than one chunk is spoken.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kokoro_ext.run import artifacts
from kokoro_ext.run.cache import FETCH_HINT, voices_dir
from kokoro_ext.run.encode import FORMATS, SUFFIXES, Encoder, encoder
from kokoro_ext.run.pipeline import NonFiniteOutput
from kokoro_ext.run.synthesizer import Chunk, Synthesizer
from kokoro_ext.run.voices import list_voices
from kokoro_ext.run.wav import SAMPLE_RATE
from kokoro_ext.text.languages import LANGUAGES, language

#: Where the audio goes without ``-o``.
DEFAULT_OUTPUT = Path("out.wav")
#: The format ``-o -`` writes without ``--format``.
STDOUT_FORMAT = "wav"
GENDERS = {"f": "female", "m": "male"}


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


@dataclass(frozen=True)
class Output:
    """Where the audio goes: a file, or stdout (``path`` None), and in which format."""

    path: Path | None
    format: str
    named: bool  # whether -o named it (else DEFAULT_OUTPUT)

    def describe(self) -> str:
        return str(self.path) if self.path is not None else f"{self.format} to stdout"


def resolve_output(output: str | None, format: str | None) -> Output:
    """The Output for ``-o`` and ``--format``; ValueError for a file whose extension names
    no format (without ``--format``) or another one than ``--format``."""
    if output == "-":
        return Output(None, format or STDOUT_FORMAT, named=True)
    path = DEFAULT_OUTPUT if output is None else Path(output)
    suffix = path.suffix.lower()
    accepted = " ".join(SUFFIXES)
    if suffix in SUFFIXES:
        if format is not None and format != SUFFIXES[suffix]:
            raise ValueError(
                f"{path} names {SUFFIXES[suffix]} by its extension but --format says {format}; "
                "give the file a name that matches the format"
            )
        return Output(path, SUFFIXES[suffix], named=output is not None)
    if format is not None:  # a name of the user's choosing: --format says what goes in it
        return Output(path, format, named=True)
    shown = f"extension {suffix!r}" if suffix else "no extension"
    raise ValueError(
        f"cannot tell the audio format of {path}: it has {shown}; -o takes {accepted} "
        "(or name the format with --format)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_ext.say",
        description="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("text", nargs="?", help="the text, or - to read it from stdin")
    parser.add_argument("-f", "--file", type=Path, help="read the text from this UTF-8 file")
    parser.add_argument(
        "-o", "--output", metavar="FILE",
        help=f"the audio file; its extension picks the format ({' '.join(SUFFIXES)}); "
        f"- for stdout (default: {DEFAULT_OUTPUT})",
    )  # fmt: skip
    parser.add_argument(
        "--format", choices=FORMATS,
        help=f"the audio format of -o - (default: {STDOUT_FORMAT}), or of a file whose "
        "extension names none",
    )  # fmt: skip
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument(
        "--voice",
        help="a voice name (af_heart, am_michael, ...: see --list-voices), a blend of voices "
        "of one language (af_bella+af_sky, af_bella(2)+af_sky(1): weights normalized) or a "
        "voice pack file .bin/.npy/.pt (default: the build's voice)",
    )
    parser.add_argument(
        "--list-voices", action="store_true",
        help="list the voices `--voice NAME` takes (with --lang: that language's) and exit",
    )  # fmt: skip
    parser.add_argument(
        "--lang",
        help=f"the text's language ({_language_list()}; default: the voice's first letter, "
        "else a); SSML when the text starts with <speak>",
    )
    parser.add_argument(
        "--plain", action="store_true", help="read the text as written, not as Markdown"
    )
    parser.add_argument("--speed", type=float, default=1.0, help="0.25 to 4 (default: 1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="noise seed of the first chunk (chunk i: seed + i)"
    )
    parser.add_argument(
        "--stream", action="store_true",
        help="write each chunk's audio as soon as it is ready (the file or pipe grows as "
        "the text is spoken; the header cannot give the length of a pipe's stream)",
    )  # fmt: skip
    parser.add_argument(
        "--show-phonemes", action="store_true",
        help="print each chunk's phonemes, a line per chunk (on stdout; on stderr with -o -)",
    )  # fmt: skip
    parser.add_argument("--srt", type=Path, help="also write captions as SubRip (.srt)")
    parser.add_argument("--vtt", type=Path, help="also write captions as WebVTT (.vtt)")
    parser.add_argument(
        "--timestamps", type=Path, help="also write each word's start and end (s) as JSON"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list_voices:
        return _list_voices(args.lang, args.artifacts)
    start = time.perf_counter()
    progress = Progress(enabled=_is_terminal(sys.stderr))
    with warnings.catch_warnings():
        # a warning is one line, and does not tear the progress bar
        warnings.showwarning = lambda message, *_, **__: progress.write(
            f"warning: {message}", sys.stderr
        )
        try:
            return _say(args, start, progress)
        except (ValueError, NonFiniteOutput) as err:
            progress.close(finished=False)
            print(f"error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # the output cannot be written (a full disk, a closed pipe)
            progress.close(finished=False)
            if isinstance(err, BrokenPipeError):
                _silence_stdout()
                return 1
            print(f"error: {err}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            progress.close(finished=False)
            print("interrupted", file=sys.stderr)
            return 130


def _say(args: argparse.Namespace, start: float, progress: Progress) -> int:
    # everything that can be wrong with the arguments is found before the model loads
    output = resolve_output(args.output, args.format)
    _check_writable(output)
    encode = _encoder(output.format)
    text = read_text(args.text, args.file)
    synth = Synthesizer(args.artifacts, lang=args.lang)
    # load the stages while the text is phonemized (the G2P's start-up is seconds); a
    # failure is the main thread's to report, when it needs the stage
    threading.Thread(target=_load_quietly, args=(synth,), daemon=True).start()
    chunks = synth.stream(text, args.voice, args.speed, args.seed, markdown=not args.plain)
    progress.expect(text)
    timed: list = []  # every chunk's words, noted as the chunks go by
    phonemes_to = sys.stderr if output.path is None else sys.stdout
    noted = _noting(chunks, timed, progress, phonemes_to if args.show_phonemes else None)
    samples = write_audio(noted, encode, output, args.stream)
    progress.close()
    seconds = samples / SAMPLE_RATE
    _write_timestamps(args, timed, seconds)
    took = time.perf_counter() - start
    where = output.describe() + ("" if output.named else " (-o FILE writes elsewhere)")
    print(
        f"wrote {where}: {seconds:.2f} s of audio in {took:.2f} s, "
        f"real-time factor {took / max(seconds, 1e-9):.2f}",
        file=sys.stderr,
    )
    return 0


def _encoder(format: str) -> Encoder:
    try:
        return encoder(format)
    except ImportError as err:
        raise ValueError(
            f"writing {format} needs the Python package {err.name or err}: "
            "pip install 'kokoro-tvm-ext[audio]'"
        ) from err


def _check_writable(output: Output) -> None:
    """ValueError now, rather than after the synthesis, if the file cannot be written."""
    if output.path is None:
        if _is_terminal(sys.stdout):
            raise ValueError("-o - writes audio to stdout, which is a terminal: pipe it, or give -o FILE")
        return
    parent = output.path.parent
    if output.path.is_dir():
        raise ValueError(f"cannot write {output.path}: it is a directory")
    if not parent.is_dir():
        raise ValueError(f"cannot write {output.path}: there is no directory {parent}")
    if not os.access(parent, os.W_OK) or (output.path.exists() and not os.access(output.path, os.W_OK)):
        raise ValueError(f"cannot write {output.path}: permission denied")


def _load_quietly(synth: Synthesizer) -> None:
    try:
        synth.load()
    except Exception:  # noqa: BLE001 - reported where the main thread loads the stage
        pass


def write_audio(chunks: Iterable[Chunk], encode: Encoder, output: Output, stream: bool) -> int:
    """Encode the chunks' audio to ``output``; returns the samples written.

    With ``stream`` each chunk's bytes go out as soon as they are encoded; otherwise they
    are gathered and written at the end, with the header's length fixed up, so that a
    failed synthesis leaves no partial file behind.
    """
    path = output.path
    stdout = sys.stdout.buffer if path is None else None
    if not stream:
        sink: IO[bytes] = io.BytesIO()
    elif path is None:
        sink = sys.stdout.buffer
    else:
        sink = open(path, "wb")
    samples = 0
    try:
        for chunk in chunks:
            audio = chunk.joined()
            samples += len(audio)
            sink.write(encode.feed(audio))
            if stream:
                sink.flush()
        sink.write(encode.finish())
        if sink is not stdout:  # a file of ours: rewind to fix the header's length
            for offset, data in encode.fixups:
                sink.seek(offset)
                sink.write(data)
        if isinstance(sink, io.BytesIO):
            if path is None:
                sys.stdout.buffer.write(sink.getvalue())
            else:
                path.write_bytes(sink.getvalue())
        if stdout is not None:
            stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    finally:
        if sink is not stdout:
            sink.close()
    return samples


def _noting(
    chunks: Iterable[Chunk], timed: list, progress: Progress, phonemes_to: IO[str] | None
) -> Iterator[Chunk]:
    """The chunks, with their words noted, progress shown and phonemes printed."""
    for chunk in chunks:
        timed.extend(chunk.words)
        if phonemes_to is not None:
            progress.write(chunk.phonemes, phonemes_to)
        progress.advance(chunk)
        yield chunk


class Progress:
    """A tqdm progress bar on stderr for a text of more than one chunk, shown from the
    second chunk on: the share done, chunks done, seconds of audio made, audio seconds
    per second of work, and the time left at the pace since the first chunk.  The share
    is counted in letters and digits, the one measure the text and its chunks share
    (numbers spelled out shift it a little)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None
        self._total = 1
        self._done = 0
        self._chunks = 0
        self._samples = 0
        self._start = time.perf_counter()
        self._first: tuple[float, int] = (self._start, 0)  # when the first chunk came, its letters

    def expect(self, text: str) -> None:
        """The text whose chunks are to come."""
        self._total = max(1, _letters(text))
        self._start = time.perf_counter()

    def advance(self, chunk: Chunk) -> None:
        now = time.perf_counter()
        self._chunks += 1
        self._samples += len(chunk.audio) + round(chunk.pause * SAMPLE_RATE)
        self._done = min(self._done + _letters(chunk.text), self._total - 1)  # all at close
        if self._chunks == 1:
            self._first = (now, self._done)  # the pace is measured from here: no loading in it
        if not self.enabled or self._chunks < 2:
            return
        if self._bar is None:
            from tqdm import tqdm  # only for a terminal's long text: 30 ms of import

            # a pseudo-terminal may report no size (script, docker -t): tqdm would take
            # it for a screen with no room and hide the bar, so assume 80 x 24 there
            size = _terminal_size(sys.stderr)
            self._bar = tqdm(
                total=self._total, initial=self._done, desc=self._status(now), file=sys.stderr,
                dynamic_ncols=size is not None, ncols=None if size else 80,
                nrows=None if size else 24, mininterval=0, miniters=1,
                bar_format="{percentage:3.0f}%|{bar}| {desc}",
            )  # fmt: skip
            return
        self._bar.set_description_str(self._status(now), refresh=False)
        self._bar.update(self._done - self._bar.n)

    def _status(self, now: float) -> str:
        from tqdm import tqdm

        seconds = self._samples / SAMPLE_RATE
        speed = seconds / max(now - self._start, 1e-9)
        since, letters = self._first
        pace = (now - since) / max(self._done - letters, 1)  # seconds per letter
        left = tqdm.format_interval((self._total - self._done) * pace)
        gone = tqdm.format_interval(now - self._start)
        return f"{self._chunks} chunks, {seconds:.1f} s audio, {speed:.2f} audio s/s [{gone}<{left}]"

    def write(self, line: str, file: IO[str]) -> None:
        """Print a line without tearing the bar."""
        if self._bar is None:
            print(line, file=file, flush=True)
        else:
            self._bar.write(line, file=file)

    def close(self, finished: bool = True) -> None:
        """Leave the bar on the screen: full if the text is ``finished``, else as it got."""
        if self._bar is not None:
            if finished:
                self._bar.set_description_str(self._status(time.perf_counter()), refresh=False)
                self._bar.update(self._total - self._bar.n)
            self._bar.close()
            self._bar = None


def _letters(text: str) -> int:
    return sum(c.isalnum() for c in text)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def _terminal_size(stream: IO[str]) -> os.terminal_size | None:
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return size if size.columns > 0 and size.lines > 0 else None


def _silence_stdout() -> None:
    # the reader of a pipe went away: the interpreter's flush at exit must not complain
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def _language_list() -> str:
    return ", ".join(f"{code} {lang.name}" for code, lang in LANGUAGES.items())


def _build_voice(artifacts_dir: Path) -> str | None:
    """The name of the build's default voice, if there is a build that says."""
    try:
        return artifacts.read_manifest(artifacts_dir).voice.name
    except (OSError, ValueError):
        return None


def _list_voices(lang: str | None, artifacts_dir: Path) -> int:
    names = list_voices()
    if not names:
        print(f"error: no voices in {voices_dir()}; {FETCH_HINT}", file=sys.stderr)
        return 2
    if lang is not None:
        try:
            code = language(lang).code
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        names = [n for n in names if n[0] == code]
        if not names:
            print(f"error: no {LANGUAGES[code].name} voices in {voices_dir()}", file=sys.stderr)
            return 2
    default = _build_voice(artifacts_dir)
    print(f"{len(names)} voice{'s' if len(names) > 1 else ''} in {voices_dir()}; a voice's first "
          "letter is its language, which reads the text unless --lang says otherwise:")
    width = max(len(n) for n in names)
    for name in names:
        spoken = LANGUAGES[name[0]].name if name[0] in LANGUAGES else "unknown language"
        mark = f"  (the default of {artifacts_dir})" if name == default else ""
        print(f"  {name:<{width}}  {spoken:<20}  {GENDERS.get(name[1], '?'):<6}{mark}".rstrip())
    return 0


def _write_timestamps(args: argparse.Namespace, timed: list, seconds: float) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
