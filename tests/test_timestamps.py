"""Word timestamps (kokoro_ext.run.timestamps): Chunk.words on the small build, captions,
say --srt/--vtt/--timestamps, and the server's /dev/captioned_speech."""

from __future__ import annotations

import base64
import io
import json
import re
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest

from kokoro_ext.run.say import main as say_main
from kokoro_ext.run.synthesizer import SAMPLE_RATE, SILENT_SYMBOLS, Synthesizer, join
from kokoro_ext.run.timestamps import (
    Cue, OriginalWords, TimedWord, captions, chunk_words, srt, vtt,
)  # fmt: skip
from kokoro_ext.serve import ServerOptions, create_app
from kokoro_ext.text.chunking import Word
from kokoro_ext.text.pipeline import FrontEnd

from small_build import limit

TEXT = "Hello there. How are you today, my old friend? I have 3 cats; fine.\n\nA new paragraph."
FRAME = 600 / SAMPLE_RATE
CONFIG = Path(__file__).parents[1] / "kokoro_ext" / "configs" / "kokoro-82m.json"


@pytest.fixture(scope="module")
def synth(build_dir):
    return limit(Synthesizer(build_dir[0]))


@pytest.fixture(scope="module")
def chunks(synth):
    return list(synth.stream(TEXT, seed=3))


def _starts(chunks) -> list[float]:
    """Where each chunk's audio starts in the joined waveform (after its pause)."""
    out, elapsed = [], 0
    for c in chunks:
        elapsed += round(c.pause * SAMPLE_RATE)
        out.append(elapsed / SAMPLE_RATE)
        elapsed += len(c.audio)
    return out


def test_words_are_in_order_and_inside_their_chunks_audio(chunks):
    assert len(chunks) > 3 and any(c.pause > 0 for c in chunks)
    words = [w for c in chunks for w in c.words]
    assert all(isinstance(w, TimedWord) for w in words)
    assert all(w.start < w.end for w in words)
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))  # no overlap, monotonic
    for c, start in zip(chunks, _starts(chunks)):
        assert c.words, c.phonemes
        # after the leading boundary token, and within the chunk's own audio (pause before it)
        lead = min(3, c.trace.durations[0])
        assert c.words[0].start >= start + (c.trace.durations[0] - lead) * FRAME - 1e-6
        assert c.words[-1].end <= start + len(c.audio) / SAMPLE_RATE + 1e-6
        # whole frames from the chunk's start
        for w in c.words:
            assert abs((w.start - start) / FRAME - round((w.start - start) / FRAME)) < 1e-3
    assert words[-1].end <= len(join(chunks)) / SAMPLE_RATE


def test_every_word_of_the_text_once_in_its_original_spelling(chunks):
    said = [w.text for c in chunks for w in c.words]
    assert said == TEXT.split()  # "3" as written, not "three"


def test_word_times_are_the_durations_of_its_sounding_tokens():
    vocab = {s: i for i, s in enumerate("abcdefghijklmnopqrstuvwxyz ,.", 1)}
    words = [Word("Hi, ", "hi, "), Word("you.", "yu.")]
    # tokens: 0 h i , ␠ y u . 0
    durations = np.array([4, 2, 3, 6, 1, 2, 2, 8, 5])
    got = chunk_words(words, durations, vocab, SILENT_SYMBOLS, 1.0, 0.025, lead_frames=0)
    assert got == (TimedWord("Hi,", 1.0 + 4 * 0.025, 1.0 + 9 * 0.025),
                   TimedWord("you.", 1.0 + 16 * 0.025, 1.0 + 20 * 0.025))
    # the audio leads the durations by three frames, never past the chunk's start
    led = chunk_words(words, durations, vocab, SILENT_SYMBOLS, 1.0, 0.025)
    assert led[0] == TimedWord("Hi,", 1.0 + 1 * 0.025, 1.0 + 6 * 0.025)
    durations[0] = 1
    assert chunk_words(words, durations, vocab, SILENT_SYMBOLS, 0.0, 0.025)[0].start == 0
    durations[0] = 4
    # twice the speed: half the frames, half the times from the chunk's start
    slow = chunk_words(words, durations * 2, vocab, SILENT_SYMBOLS, 0.0, 0.025, lead_frames=0)
    fast = chunk_words(words, durations, vocab, SILENT_SYMBOLS, 0.0, 0.025, lead_frames=0)
    assert [t / 2 for w in slow for t in (w.start, w.end)] == pytest.approx(
        [t for w in fast for t in (w.start, w.end)])
    with pytest.raises(ValueError):
        chunk_words(words, durations[:-1], vocab, SILENT_SYMBOLS, 0.0, 0.025)


def test_speed_2_halves_the_times(synth):
    text = "How are you today, my old friend?"
    slow, fast = (list(synth.stream(text, speed=s, chunk_limit=200)) for s in (1, 2))
    for a, b in zip(slow, fast):
        assert a.phonemes == b.phonemes and len(a.words) == len(b.words)
        a0, b0 = _starts(slow)[a.index], _starts(fast)[b.index]
        tokens = len(a.trace.durations)
        for x, y in zip(a.words, b.words):
            # each token's frames are rounded after the division, at least one frame
            assert abs((y.end - b0) - (x.end - a0) / 2) <= tokens * FRAME
        assert (b.words[-1].end - b0) < (a.words[-1].end - a0)


def _spoken(text: str, markdown: bool = True) -> list[Word]:
    """The Words the front end makes of ``text`` (their text carries its spans)."""
    front = FrontEnd("a")
    return [w for part in front.sentences(text, markdown) for w in front.words(part)]


def _reported(words: list[Word], original: str) -> list[TimedWord]:
    vocab = json.loads(CONFIG.read_text())["vocab"]
    tokens = sum(1 for w in words for p in w.phonemes if p in vocab)
    durations = np.ones(tokens + 2, dtype=np.int64)
    return chunk_words(words, durations, vocab, SILENT_SYMBOLS, 0.0, 1.0, OriginalWords(original),
                       lead_frames=0)


def test_original_words_for_normalized_text():
    original = "Pay $3.50 to Dr. Smith now"
    got = _reported(_spoken(original), original)
    assert [w.text for w in got] == ["Pay", "$3.50", "to", "Dr.", "Smith", "now"]
    spoken = _spoken(original)
    assert [w.text.strip() for w in spoken][1:6] == ["three", "dollars", "and", "fifty", "cents"]
    # "three" to "cents": the frames of the five words
    sounding = [sum(1 for p in w.phonemes if p not in SILENT_SYMBOLS) for w in spoken]
    assert got[1].end - got[1].start > sum(sounding[1:6]) - 1
    # words without spans (not from the front end): their own text
    plain = [Word(str(w.text).strip() + " ", w.phonemes) for w in spoken]
    assert [w.text for w in _reported(plain, original)] == [w.text.strip() for w in plain]


# text as chat models and terminals write it: Markdown, a colour escape, a link
MARKED = "**Bold** move, \x1b[31mred\x1b[0m text and [the docs](https://x.com)."
UNLINKED = "**Bold** move, \x1b[31mred\x1b[0m text."


def test_original_words_are_the_text_as_read():
    assert [w.text for w in _reported(_spoken(MARKED), MARKED)] == [
        "Bold", "move,", "red", "text", "and", "the", "docs."]  # fmt: skip
    assert [w.text for w in _reported(_spoken(UNLINKED, False), UNLINKED)] == [
        "**Bold**", "move,", "red", "text."]  # fmt: skip
    # a control character between two words: two words; SSML: the written text
    assert [w.text for w in _reported(_spoken("Hello\0world."), "Hello\0world.")] == [
        "Hello", "world."]  # fmt: skip
    ssml = '<speak>The <sub alias="World Health Organization">WHO</sub> &amp; I.</speak>'
    assert [w.text for w in _reported(_spoken(ssml), ssml)] == ["The", "WHO", "&", "I."]


def _timed(synth, text: str, markdown: bool = True) -> list[TimedWord]:
    words = [w for c in synth.stream(text, markdown=markdown) for w in c.words]
    assert all(w.start < w.end for w in words)
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))
    return words


def test_words_of_markdown_and_escapes_are_the_words_said(synth):
    words = _timed(synth, MARKED)
    assert [w.text for w in words] == ["Bold", "move,", "red", "text", "and", "the", "docs."]
    assert " ".join(c.text for c in captions(words)) == "Bold move, red text and the docs."


def test_words_read_as_written_keep_the_markers(synth):
    assert [w.text for w in _timed(synth, UNLINKED, markdown=False)] == [
        "**Bold**", "move,", "red", "text."]  # fmt: skip
    said = [w.text for w in _timed(synth, MARKED, markdown=False)]
    assert any("**" in w for w in said) and not any("\x1b" in w for w in said)


# --- captions ----------------------------------------------------------------------------


def _parse_srt(text: str) -> list[tuple[float, float, str]]:
    clock = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
    blocks = text.split("\n\n")
    assert blocks[-1] == "" and all(blocks[:-1])
    out = []
    for i, block in enumerate(blocks[:-1], 1):
        index, times, *lines = block.split("\n")
        assert index == str(i) and len(lines) == 1 and lines[0]
        m = re.fullmatch(f"{clock} --> {clock}", times)
        assert m, times
        h, mi, s, ms, h2, mi2, s2, ms2 = map(int, m.groups())
        out.append((h * 3600 + mi * 60 + s + ms / 1000, h2 * 3600 + mi2 * 60 + s2 + ms2 / 1000, lines[0]))
    return out


def _parse_vtt(text: str) -> list[tuple[float, float, str]]:
    assert text.startswith("WEBVTT\n\n")
    clock = r"(\d\d):(\d\d):(\d\d)\.(\d\d\d)"
    out = []
    for block in text[len("WEBVTT\n\n"):].split("\n\n")[:-1]:
        times, line = block.split("\n")
        m = re.fullmatch(f"{clock} --> {clock}", times)
        assert m, times
        h, mi, s, ms, h2, mi2, s2, ms2 = map(int, m.groups())
        out.append((h * 3600 + mi * 60 + s + ms / 1000, h2 * 3600 + mi2 * 60 + s2 + ms2 / 1000, line))
    return out


def test_captions_split_at_sentences_words_and_seconds():
    words = [TimedWord(t, i * 0.5, i * 0.5 + 0.4) for i, t in enumerate(
        "Dr. Who said hi. One two three four five six seven eight nine".split())]
    cues = captions(words)
    assert [c.text for c in cues] == [
        "Dr. Who said hi.", "One two three four five six seven", "eight nine"]
    assert cues[0] == Cue("Dr. Who said hi.", 0.0, 1.9)
    assert [c.text for c in captions(words, max_seconds=1.0)][:2] == ["Dr. Who", "said hi."]
    long = [TimedWord("x", 3661.5, 3662.25)]
    assert srt(captions(long)) == "1\n01:01:01,500 --> 01:01:02,250\nx\n\n"
    assert vtt(captions(long)) == "WEBVTT\n\n01:01:01.500 --> 01:01:02.250\nx\n\n"


def test_say_writes_srt_vtt_and_json(build_dir, tmp_path, capsys):
    out = tmp_path / "out.wav"
    files = {k: tmp_path / f"out.{k}" for k in ("srt", "vtt", "json")}
    code = say_main([TEXT, "-o", str(out), "--artifacts", str(build_dir[0]), "--srt", str(files["srt"]),
                     "--vtt", str(files["vtt"]), "--timestamps", str(files["json"]), "--speed", "1.5"])
    assert code == 0, capsys.readouterr().err
    with wave.open(str(out)) as f:
        seconds = f.getnframes() / f.getframerate()
    data = json.loads(files["json"].read_text())
    assert [w["word"] for w in data["words"]] == TEXT.split()
    assert abs(data["duration"] - seconds) < 1e-3
    assert all(0 <= w["start"] < w["end"] <= seconds for w in data["words"])
    for parse, key in ((_parse_srt, "srt"), (_parse_vtt, "vtt")):
        cues = parse(files[key].read_text())
        assert " ".join(c[2] for c in cues).split() == TEXT.split()
        assert all(a[1] <= b[0] for a, b in zip(cues, cues[1:]))
        assert cues[-1][1] <= seconds + 1e-3


# --- the server --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(synth, build_dir, tmp_path_factory):
    from test_serve import running

    directory = tmp_path_factory.mktemp("voices")
    np.load(build_dir[0] / "voice.npy").astype("<f4").tofile(directory / "af_heart.bin")
    app = create_app(ServerOptions(voices=directory, warmup=False), synth)
    with running(app) as (url, _):
        yield url


def _wav_seconds(data: bytes, header: bool = False) -> float:
    """The seconds of audio in a WAV file: the samples it holds, or with ``header`` what
    its header states (a streamed WAV's header cannot know its length)."""
    with wave.open(io.BytesIO(data)) as f:
        if header:
            return f.getnframes() / f.getframerate()
        frames = len(f.readframes(f.getnframes())) // (f.getsampwidth() * f.getnchannels())
        return frames / f.getframerate()


def test_captioned_speech_streams_audio_and_words(server):
    body = {"input": "Hello there. I have 3 cats.", "voice": "af_heart", "response_format": "wav"}
    response = httpx.post(f"{server}/dev/captioned_speech", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) > 1 and all(set(x) == {"audio", "audio_format", "timestamps"} for x in lines)
    assert {x["audio_format"] for x in lines} == {"audio/wav"}
    audio = b"".join(base64.b64decode(x["audio"]) for x in lines)
    words = [w for x in lines for w in x["timestamps"]]
    assert [w["word"] for w in words] == ["Hello", "there.", "I", "have", "3", "cats."]
    assert all(set(w) == {"word", "start_time", "end_time"} for w in words)
    assert all(a["end_time"] <= b["start_time"] for a, b in zip(words, words[1:]))
    seconds = _wav_seconds(audio)
    assert 0 < words[-1]["end_time"] <= seconds

    whole = httpx.post(f"{server}/dev/captioned_speech", json={**body, "stream": False}, timeout=120)
    assert whole.status_code == 200
    one = whole.json()
    whole_audio = base64.b64decode(one["audio"])
    assert one["timestamps"] == words and _wav_seconds(whole_audio) == seconds
    assert _wav_seconds(whole_audio, header=True) == seconds  # the whole file states its length

    bare = httpx.post(f"{server}/dev/captioned_speech",
                      json={**body, "return_timestamps": False, "model": "kokoro"}, timeout=120)
    assert all(json.loads(x)["timestamps"] == [] for x in bare.text.splitlines())
    bad = httpx.post(f"{server}/dev/captioned_speech", json={**body, "stream": "yes"}, timeout=60)
    # a schema error on /dev: Kokoro-FastAPI's 422, in both its shape and OpenAI's
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "stream"
    assert "stream" in json.dumps(bad.json()["detail"])
