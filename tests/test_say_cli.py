"""The say command as a person runs it, on the small build: the format by the output's
extension (each decoded again), stdout, the progress bar on a terminal only, quiet
output, --list-voices."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import wave
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile

from kokoro_ext.run import say
from kokoro_ext.run.cache import ENV as CACHE_ENV
from kokoro_ext.run.encode import SUFFIXES, WAV_STREAM_FRAMES
from kokoro_ext.run.say import main as say_main
from kokoro_ext.run.synthesizer import Synthesizer
from kokoro_ext.run.wav import SAMPLE_RATE, pcm16
from kokoro_ext.text.pipeline import FrontEnd

TEXT = "Hi there."
# a frame of MPEG-2 layer III at 24 kHz is 576 samples, of AAC 1024: the encoders' delay
# and the padding to whole frames make a lossy file up to a few frames longer
LOSSY_SLACK = 3 * 1024


@pytest.fixture(scope="module")
def expected(build_dir) -> np.ndarray:
    """TEXT as say speaks it (the build's limits, seed 0), as 16-bit samples."""
    audio = Synthesizer(build_dir[0]).synthesize(TEXT)
    return np.frombuffer(pcm16(audio), "<i2")


def _say(build_dir, *args: str) -> int:
    return say_main([*args, "--artifacts", str(build_dir[0])])


def _decode_av(data: bytes | Path) -> tuple[str, int, int]:
    """(codec, sample rate, samples) of a file or bytes, decoded by FFmpeg through PyAV."""
    source = io.BytesIO(data) if isinstance(data, bytes) else str(data)
    with av.open(source) as container:
        stream = container.streams.audio[0]
        frames = list(container.decode(stream))
        return stream.codec_context.name, frames[0].sample_rate, sum(f.samples for f in frames)


@pytest.mark.parametrize("suffix", list(SUFFIXES))
def test_the_extension_picks_the_format_and_the_file_decodes(build_dir, tmp_path, expected, suffix, capsys):
    path = tmp_path / f"hi{suffix}"
    assert _say(build_dir, TEXT, "-o", str(path)) == 0, capsys.readouterr().err
    fmt = SUFFIXES[suffix]
    if fmt == "pcm":
        assert np.array_equal(np.fromfile(path, "<i2"), expected)
    elif fmt in ("wav", "flac", "opus"):
        info = soundfile.info(str(path))
        assert (info.format, info.samplerate, info.channels) == (
            {"wav": "WAV", "flac": "FLAC", "opus": "OGG"}[fmt], SAMPLE_RATE, 1)
        assert info.frames == expected.size  # the header states the length: written at the end
        samples, _ = soundfile.read(str(path), dtype="int16")
        assert samples.size == expected.size
        if fmt != "opus":  # lossless: the very samples
            assert np.array_equal(samples, expected)
    else:
        codec, rate, samples = _decode_av(path)
        assert codec.startswith(fmt) and rate == SAMPLE_RATE
        assert expected.size <= samples <= expected.size + LOSSY_SLACK
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"wrote {path}: 0.")


def test_stream_writes_the_same_file_as_it_goes(build_dir, tmp_path, expected, capsys):
    for suffix in (".wav", ".flac", ".mp3"):
        whole, streamed = tmp_path / f"whole{suffix}", tmp_path / f"streamed{suffix}"
        assert _say(build_dir, TEXT, "-o", str(whole)) == 0
        assert _say(build_dir, TEXT, "-o", str(streamed), "--stream") == 0
        # a file can be rewound: its header's length is fixed up at the end
        assert streamed.read_bytes() == whole.read_bytes(), suffix
    with wave.open(str(tmp_path / "streamed.wav")) as f:
        assert f.getnframes() == expected.size


@pytest.mark.parametrize(
    "args,message",
    [
        (["-o", "{tmp}/x.xyz"], "extension '.xyz'; -o takes .wav .flac .mp3 .opus .ogg .pcm .aac"),
        (["-o", "{tmp}/x"], "it has no extension; -o takes .wav .flac .mp3"),
        (["-o", "{tmp}/x.mp3", "--format", "wav"], "x.mp3 names mp3 by its extension but --format says wav"),
        (["-o", "{tmp}/missing/x.wav"], "there is no directory"),
        (["-o", "{tmp}"], "cannot tell the audio format"),
    ],
)
def test_a_bad_output_fails_before_anything_loads(build_dir, tmp_path, monkeypatch, capsys, args, message):
    def no_synthesis(*_, **__):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(say, "Synthesizer", no_synthesis)
    argv = [a.format(tmp=tmp_path) for a in args]
    assert _say(build_dir, TEXT, *argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err
    assert captured.err.startswith("error: ") and not captured.out
    assert [p.name for p in tmp_path.iterdir()] == []


def test_an_unknown_format_name_is_a_usage_error(build_dir, capsys):
    with pytest.raises(SystemExit) as done:
        _say(build_dir, TEXT, "-o", "-", "--format", "ogg")
    assert done.value.code == 2
    assert "invalid choice: 'ogg'" in capsys.readouterr().err


def test_a_missing_encoder_package_is_named_before_synthesis(build_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lameenc", None)  # import lameenc: ImportError
    monkeypatch.setattr(say, "Synthesizer", lambda *_, **__: pytest.fail("the model was loaded"))
    assert _say(build_dir, TEXT, "-o", str(tmp_path / "x.mp3")) == 2
    assert "writing mp3 needs the Python package lameenc" in capsys.readouterr().err


def _environment(tmp_path: Path) -> dict[str, str]:
    # verified-file stamps of the subprocess go to a scratch cache, not the user's
    return {**os.environ, CACHE_ENV: str(tmp_path / "cache")}


def _run(build_dir, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kokoro_ext.say", *args, "--artifacts", str(build_dir[0])],
        cwd=tmp_path, env=_environment(tmp_path), capture_output=True, stdin=subprocess.DEVNULL,
        timeout=120, check=False,
    )  # fmt: skip


def test_dash_writes_to_a_pipe(build_dir, tmp_path, expected):
    # without --stream: the whole file at the end, its header stating the length
    done = _run(build_dir, tmp_path, TEXT, "-o", "-")
    assert done.returncode == 0, done.stderr.decode()
    with wave.open(io.BytesIO(done.stdout)) as f:
        assert (f.getframerate(), f.getnframes()) == (SAMPLE_RATE, expected.size)
        assert np.array_equal(np.frombuffer(f.readframes(f.getnframes()), "<i2"), expected)
    assert done.stderr.decode().startswith("wrote wav to stdout: ")
    # --stream: the header goes out first, saying "as long as a WAV can be"
    done = _run(build_dir, tmp_path, TEXT, "-o", "-", "--stream", "--show-phonemes")
    assert done.returncode == 0, done.stderr.decode()
    with wave.open(io.BytesIO(done.stdout)) as f:
        assert f.getnframes() == WAV_STREAM_FRAMES
        assert np.array_equal(np.frombuffer(f.readframes(expected.size + 100), "<i2"), expected)
    assert done.stderr.decode().splitlines()[0] == "hˈI ðˈɛɹ."  # phonemes keep off the audio
    done = _run(build_dir, tmp_path, TEXT, "-o", "-", "--format", "mp3", "--stream")
    codec, rate, samples = _decode_av(done.stdout)
    assert codec.startswith("mp3") and rate == SAMPLE_RATE
    assert expected.size <= samples <= expected.size + LOSSY_SLACK
    assert not any(p.suffix for p in tmp_path.iterdir())  # nothing written to a file


def test_a_closed_pipe_ends_quietly(build_dir, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "kokoro_ext.say", TEXT, "-o", "-", "--artifacts", str(build_dir[0])],
        cwd=tmp_path, env=_environment(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    process.stdout.close()  # the reader is gone before the audio comes
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1 and err == "", err


def test_dash_will_not_write_audio_to_a_terminal(build_dir, tmp_path):
    argv = [sys.executable, "-m", "kokoro_ext.say", TEXT, "-o", "-", "--artifacts", str(build_dir[0])]
    out = _on_a_terminal(argv, tmp_path, _environment(tmp_path), (24, 80), code=2)
    assert out.replace("\r", "") == "error: -o - writes audio to stdout, which is a terminal: pipe it, or give -o FILE\n"


def test_quiet_by_default(build_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _say(build_dir, TEXT) == 0
    captured = capsys.readouterr()
    assert not captured.out
    assert re.fullmatch(
        r"wrote out\.wav \(-o FILE writes elsewhere\): 0\.\d\d s of audio in \d+\.\d\d s, "
        r"real-time factor \d+\.\d\d\n", captured.err), captured.err
    assert soundfile.info("out.wav").frames > 0
    assert _say(build_dir, TEXT, "-o", "hi.wav", "--show-phonemes") == 0
    captured = capsys.readouterr()
    assert captured.out == "hˈI ðˈɛɹ.\n" and captured.err.startswith("wrote hi.wav: ")


def test_plain_reads_the_text_as_written(build_dir, tmp_path, capsys):
    text, out = "**bold** text", str(tmp_path / "x.wav")
    shown = {}
    for plain in (False, True):
        assert _say(build_dir, text, "-o", out, "--show-phonemes", *(["--plain"] * plain)) == 0
        shown[plain] = capsys.readouterr().out
    front = FrontEnd("a")
    assert shown[False] == front.phonemize("bold text") + "\n"
    assert shown[True] == front.phonemize(text, markdown=False) + "\n" != shown[False]


def test_a_warning_is_one_line(build_dir, tmp_path, capsys):
    assert _say(build_dir, "Hi there ☃.", "-o", str(tmp_path / "x.wav")) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "warning: dropping symbols with no pronunciation: '☃'"
    assert len(err) == 2 and err[1].startswith("wrote ")


# --- the progress bar -------------------------------------------------------------------

# sentences short enough to be a chunk each and quick to speak on the small build
LONG = " ".join(f"Sentence {word}." for word in ("one", "two", "three", "four", "five"))
BAR = re.compile(r"(\d+)%\|[^|]*\| (\d+) chunks, ([\d.]+) s audio, ([\d.]+) audio s/s \[[\d:]+<[\d:]+\]")


def _on_a_terminal(
    argv: list[str], cwd: Path, env: dict, size: tuple[int, int] | None, code: int = 0
) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal (rows, columns ``size``,
    or none, as ``script`` leaves it); returns all it wrote.  It must exit with ``code``."""
    master, slave = pty.openpty()
    if size is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave,
                               stderr=slave, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every end of the terminal is closed
                    break
                if not data:
                    break
                out += data
            elif process.poll() is not None:
                break
    finally:
        os.close(master)
        process.kill()
        process.wait()
    assert process.returncode == code, out.decode(errors="replace")
    return out.decode()


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("book") / "book.txt"
    path.write_text(LONG + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("size", [(24, 80), None], ids=["sized", "no size"])
def test_say_f_shows_a_progress_bar_on_a_terminal(build_dir, tmp_path, book, size):
    argv = [sys.executable, "-m", "kokoro_ext.say", "-f", str(book), "-o", "book.mp3",
            "--artifacts", str(build_dir[0])]
    out = _on_a_terminal(argv, tmp_path, _environment(tmp_path), size)
    states = [m.groups() for m in BAR.finditer(out)]
    assert states, out
    percents = [int(p) for p, *_ in states]
    chunks = [int(c) for _, c, *_ in states]
    audio = [float(a) for _, _, a, _ in states]
    # shown from the second chunk on, advancing with each chunk, full at the end
    assert chunks[0] == 2 and len(set(chunks)) >= 3, out
    assert chunks == sorted(chunks) and audio == sorted(audio) and percents == sorted(percents)
    assert percents[-1] == 100 and percents[0] < 100
    assert all(len(line) <= 80 for line in re.split(r"[\r\n]", out)), out
    assert re.search(r"\nwrote book\.mp3: [\d.]+ s of audio", out.replace("\r", "")), out
    assert (tmp_path / "book.mp3").stat().st_size > 0


def test_say_f_shows_no_progress_without_a_terminal(build_dir, tmp_path, book):
    done = _run(build_dir, tmp_path, "-f", str(book), "-o", "book.mp3")
    assert done.returncode == 0 and not done.stdout
    err = done.stderr.decode()
    assert "\r" not in err and "%|" not in err
    assert len(err.splitlines()) == 1 and err.startswith("wrote book.mp3: ")


# --- --list-voices ---------------------------------------------------------------------


@pytest.fixture
def voices(tmp_path, monkeypatch) -> Path:
    """A cache with some voices (listing reads only their names) in KOKORO_TVM_EXT_CACHE."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "voices"
    directory.mkdir(parents=True)
    for name in ("af_heart", "am_adam", "bf_emma", "ef_dora", "em_alex", "zm_yunxi"):
        (directory / f"{name}.bin").write_bytes(b"")
    return directory


def _build_of_voice(build_dir, root: Path, name: str) -> Path:
    """A directory with the small build's manifest, saying its voice is ``name``."""
    directory = root / "named-build"
    directory.mkdir()
    manifest = json.loads((build_dir[0] / "manifest.json").read_text())
    manifest["voice"] = {"name": name, "path": f"/voices/{name}.bin", "sha256": "0" * 64}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_list_voices_gives_language_and_gender_and_marks_the_default(build_dir, voices, tmp_path, capsys):
    build = _build_of_voice(build_dir, tmp_path, "af_heart")
    assert say_main(["--list-voices", "--artifacts", str(build)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"6 voices in {voices}")
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == ["af_heart", "am_adam", "bf_emma", "ef_dora", "em_alex", "zm_yunxi"]
    assert re.fullmatch(rf"\s+af_heart\s+American English\s+female\s+\(the default of {build}\)",
                        rows["af_heart"])
    assert re.fullmatch(r"\s+am_adam\s+American English\s+male", rows["am_adam"])
    assert re.fullmatch(r"\s+bf_emma\s+British English\s+female", rows["bf_emma"])
    assert re.fullmatch(r"\s+zm_yunxi\s+Mandarin Chinese\s+male", rows["zm_yunxi"])
    assert sum("default" in line for line in lines) == 1


def test_list_voices_filters_by_language(build_dir, voices, tmp_path, capsys):
    missing = tmp_path / "no-build"  # no build: no mark, and no complaint
    assert say_main(["--list-voices", "--lang", "e", "--artifacts", str(missing)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("2 voices") and [line.split()[0] for line in lines[1:]] == ["ef_dora", "em_alex"]
    assert "default" not in "".join(lines)
    assert say_main(["--list-voices", "--lang", "es", "--artifacts", str(missing)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["ef_dora", "em_alex"]
    assert say_main(["--list-voices", "--lang", "klingon"]) == 2
    assert say_main(["--list-voices", "--lang", "h"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: unknown language 'klingon'")
    assert err[1] == f"error: no Hindi voices in {voices}"


def test_list_voices_says_how_to_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "empty"))
    assert say_main(["--list-voices"]) == 2
    assert "python -m kokoro_ext.build.fetch" in capsys.readouterr().err


def test_the_default_build_voice_is_read_without_the_model(build_dir, tmp_path):
    assert say._build_voice(_build_of_voice(build_dir, tmp_path, "bf_emma")) == "bf_emma"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{")
    assert say._build_voice(broken) is None
    assert say._build_voice(tmp_path / "nothing") is None
