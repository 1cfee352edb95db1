"""The page's chunking, word times, voice blends and host steps (kokoro_ext/web/static:
chunking.js, tts.js, host.js), run in node, against the Python runtime's on a corpus
(tests/text_corpus.py's English entries and prose): the chunks the Synthesizer makes of
a text (sentences, pack_evenly), split_in_two, timing.token_words with
timestamps.times, voices.parse_blend and mix, and the durations of
kokoro_ext.run.pipeline.  Python is the reference: the JavaScript must give the same.

Needs node and npm (npm fetches text.js's espeak-ng once into the cache); elsewhere
these tests skip, saying so; under CI they fail instead.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import text_corpus
from kokoro_ext.build.backend.browser import STATIC
from kokoro_ext.run.errors import BadBlend, UnknownVoice
from kokoro_ext.run.synthesizer import SILENT_SYMBOLS
from kokoro_ext.run.timestamps import times
from kokoro_ext.run.voices import is_voice_name, mix, parse_blend
from kokoro_ext.text import FrontEnd
from kokoro_ext.text.chunking import Piece, Word, pack, pack_evenly, split_in_two
from kokoro_ext.text.pipeline import Chunking, TextPipeline
from kokoro_ext.text.spans import Spanned
from kokoro_ext.text.timing import OriginalWords, token_words

_missing = [tool for tool in ("node", "npm") if not shutil.which(tool)]
if _missing and not os.environ.get("CI"):
    pytest.skip(f"needs {' and '.join(_missing)} (NodeSource's nodejs)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
VOCAB = json.loads((ROOT / "kokoro_ext/configs/kokoro-82m.json").read_text())["vocab"]
LANGUAGE = {"a": "en-us", "b": "en-gb"}
#: Corpus entries per (kind, language): the kinds read as plain text
KINDS = {"plain": 25, "numbers": 20, "dates": 12, "abbreviations": 12, "long": 8, "as-written": 4}
#: Prose of several sentences, clauses and paragraphs (line breaks end sentences).
PROSE = [
    "The lamps were lit at dusk. Nobody knew why; the clock at St. Anne's ran slow!\n\n"
    "Tomas counted them: one, two, three. \"Be quick,\" she said — the wind was up.",
    "Mr. Brandt paid $16.50 for the oil, e.g. the good kind, at 5 p.m. on Tuesday.\n"
    "He didn't answer at once… he was counting the lamps along the quay?",
    "A. B. Smith wrote: the lighthouse keeper climbed the narrow stairs at seven every "
    "evening, to light the lamp that guided the ships safely home across the bay.",
]
#: Chunk limits (phonemes): the small ones cut sentences, 1 and 3 cut words.
LIMITS = (508, 60, 17, 3)
SECONDS_PER_FRAME = 600 / 24000

_RUNNER = """
import { readFileSync } from "node:fs";
const [static_, text, input] = process.argv.slice(2);
const chunking = await import(static_ + "chunking.js");
const tts = await import(static_ + "tts.js");
const host = await import(static_ + "host.js");
const { phonemize } = await import(text);
const jobs = JSON.parse(readFileSync(input, "utf8"));
const pieces = (ps) => ps.map((p) => ({ words: p.words.map((w) => [w.text, w.phonemes]), end: p.end }));
const out = [];
for (const job of jobs) {
  try {
    if (job.kind === "phonemize") {
      const r = await phonemize(job.text, { language: job.language });
      const chunks = chunking.chunkWords(r.groups, job.limit, job.text).map((p) => ({
        words: p.words.map((w) => [w.text, w.phonemes, w.start, w.end]), end: p.end,
        speakable: chunking.speakable(p, job.vocab) }));
      out.push({ phonemes: r.phonemes, groups: r.groups, chunks });
    } else if (job.kind === "pack") {
      const words = job.words.map(([text, phonemes]) => ({ text, phonemes, start: 0, end: 0 }));
      out.push({ pack: pieces(chunking.pack(words, job.limit)),
                 even: pieces(chunking.packEvenly(words, job.limit)),
                 halves: (() => { const h = chunking.splitInTwo({ words, end: "sentence" });
                                  return h && pieces(h); })() });
    } else if (job.kind === "times") {
      // a text's chunks in order, as tts.js's stream reports them
      const reported = chunking.reportedWords(job.text);
      const times = [];
      job.chunks.forEach((chunk, i) => {
        const words = chunk.words.map(([text, phonemes, start, end]) => ({ text, phonemes, start, end }));
        if (!chunk.speakable) return chunking.unsaid(reported, words);
        times.push(chunking.wordTimes(words, job.durations[i], job.vocab, job.secondsPerFrame, reported)
          .map((w) => [w.text, w.startTime, w.endTime]));
      });
      out.push(times);
    } else if (job.kind === "blend") {
      out.push(tts.parseBlend(job.spec));
    } else if (job.kind === "mix") {
      const parts = job.parts.map(([pack, w]) => [Float32Array.from(pack), w]);
      out.push(Array.from(tts.mixVoices(parts)));
    } else if (job.kind === "durations") {
      out.push(Array.from(host.durations(Float32Array.from(job.predicted), job.speed)));
    }
  } catch (e) {
    out.push({ error: String(e?.message ?? e) });
  }
}
process.stdout.write(JSON.stringify(out));
"""


def run_node(jobs: list[dict], text_js: Path, tmp: Path) -> list:
    runner, data = tmp / "run.mjs", tmp / "jobs.json"
    runner.write_text(_RUNNER)
    data.write_text(json.dumps(jobs, ensure_ascii=False))
    out = subprocess.run(["node", str(runner), STATIC.as_uri() + "/", text_js.resolve().as_uri(), str(data)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def texts() -> list[tuple[str, str]]:
    """(text, language code) of the corpus's plain English entries and the prose."""
    corpus = text_corpus.read(text_corpus.CORPUS)
    chosen = [(t, "a") for t in PROSE] + [(PROSE[0], "b")]
    for kind, count in KINDS.items():
        for lang in "ab":
            entries = [e for e in corpus if e["kind"] == kind and e["lang"] == lang]
            chosen += [(e["text"], lang) for e in entries[: count if lang == "a" else count // 3 + 1]]
    return chosen


@pytest.fixture(scope="module")
def phonemized(tmp_path_factory):
    """Each text through text.js (words) and chunkWords at each limit, and through the
    Python front end and the Synthesizer's chunking at the same limits."""
    from kokoro_ext.build.web import text

    tmp = tmp_path_factory.mktemp("chunking-js")
    text_js = text.site(tmp / "site", VOCAB)
    items = texts()
    jobs = [{"kind": "phonemize", "text": t, "language": LANGUAGE[lang], "limit": limit, "vocab": VOCAB}
            for t, lang in items for limit in LIMITS]  # fmt: skip
    got = run_node(jobs, text_js, tmp)
    fronts = {lang: TextPipeline(lang) for lang in "ab"}
    expected = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t, lang in items:
            phonemes = fronts[lang].phonemize(t, markdown=False)
            for limit in LIMITS:
                chunks = fronts[lang].run(t, markdown=False, chunking=Chunking(
                    limit, limit, vocab=VOCAB, silent=SILENT_SYMBOLS)).chunks  # fmt: skip
                expected.append((phonemes, [(c.phonemes, c.piece.end) for c in chunks]))
    return [(t, lang) for t, lang in items for _ in LIMITS], got, expected, text_js, tmp


def test_chunks_are_the_synthesizers(phonemized):
    """Where text.js says a text as Python does, chunkWords cuts it into the chunks the
    Synthesizer makes of it, ending as they end (the pause after each), at every limit."""
    items, got, expected, _, _ = phonemized
    assert not [g["error"] for g in got if "error" in g]
    compared, differ = 0, []
    for (t, _), g, (phonemes, chunks) in zip(items, got, expected, strict=True):
        if g["phonemes"] != phonemes:
            continue  # the front ends differ on a word (tests/test_web_text.py bounds that)
        compared += 1
        mine = [("".join(w[1] for w in c["words"]).strip(), c["end"]) for c in g["chunks"] if c["speakable"]]
        if mine != chunks:
            differ.append((t, chunks, mine))
    assert compared >= 0.9 * len(items), (compared, len(items))
    assert not differ, "\n".join(map(str, differ[:5]))


def _words(pairs) -> list[Word]:
    return [Word(text, phonemes) for text, phonemes in pairs]


def _pieces(pieces) -> list[tuple[list[tuple[str, str]], str]]:
    return [([(w.text, w.phonemes) for w in p.words], p.end) for p in pieces]


def _js_pieces(pieces) -> list[tuple[list[tuple[str, str]], str]]:
    return [([tuple(w) for w in p["words"]], p["end"]) for p in pieces]


def test_pack_and_split_are_pythons(phonemized):
    """pack, packEvenly and splitInTwo on the corpus's sentences' words (text.js's), at
    each limit, as chunking.pack, pack_evenly and split_in_two cut them."""
    items, got, _, text_js, tmp = phonemized
    sentences = []
    for g in got[:: len(LIMITS)]:  # one per text
        sentences.append([(w["text"], w["phonemes"]) for w in g["groups"]])
        sentences.append(sentences[-1][:1])  # a single word: split between phonemes
    jobs = [{"kind": "pack", "words": s, "limit": limit}
            for s in sentences if s for limit in (*LIMITS, 1, 40)]  # fmt: skip
    results = run_node(jobs, text_js, tmp)
    for job, result in zip(jobs, results, strict=True):
        assert "error" not in result, (job, result)
        words = _words(job["words"])
        assert _js_pieces(result["pack"]) == _pieces(pack(words, job["limit"])), job
        assert _js_pieces(result["even"]) == _pieces(pack_evenly(words, job["limit"])), job
        halves = split_in_two(Piece(tuple(words), "sentence"))
        want = None if halves is None else _pieces(halves)
        assert (result["halves"] and _js_pieces(result["halves"])) == want, job


def _spanned(text: str, start: int | None, end: int | None) -> Spanned:
    # a word whose characters all come from [start, end) of the original (text.js's
    # groups keep one stretch a word)
    n = len(text)
    return Spanned(text, (start or 0,) * n, (end or 0,) * n)


def test_word_times_are_pythons(phonemized):
    """wordTimes of each text's chunks in order, with random durations, as
    timing.token_words (OriginalWords: one written stretch one entry, reported once) and
    timestamps.times give them (the lead of three frames, words without sound left out)."""
    items, got, _, text_js, tmp = phonemized
    rng = np.random.default_rng(0)
    jobs, expected = [], []
    for (text, _), g in zip(items, got, strict=True):
        originals = OriginalWords(text)
        durations, want = [], []
        for chunk in g["chunks"]:
            words = [Word(_spanned(t, s, e), p) for t, p, s, e in chunk["words"]]
            if not chunk["speakable"]:
                originals.unsaid(words)
                durations.append([])
                continue
            timing = token_words(words, VOCAB, SILENT_SYMBOLS, originals)
            frames = rng.integers(0, 9, timing.tokens)
            frames[0] = rng.integers(0, 6)  # the lead is cut to the first token's frames
            durations.append(frames.tolist())
            want.append([[w.text, w.start, w.end] for w in times(timing, frames, 0.0, SECONDS_PER_FRAME)])
        jobs.append({"kind": "times", "text": text, "chunks": g["chunks"], "durations": durations,
                     "vocab": VOCAB, "secondsPerFrame": SECONDS_PER_FRAME})  # fmt: skip
        expected.append(want)
    assert sum(map(len, expected)) > 300
    results = run_node(jobs, text_js, tmp)
    for job, result, want in zip(jobs, results, expected, strict=True):
        assert result == want, job["text"]


#: Voice specs: those Python reads and those it refuses (each must be refused in JS too).
BLENDS = [
    "af_heart", "af_bella+af_sky", "af_bella(2)+af_sky(1)", " af_bella ( 2 ) + af_sky ",
    "af_a(0.1)+af_b(0.2)+af_c(0.3)", "af_a(1e-3)+af_b(3)", "af_a(1_0)+af_b", "af_a(.5)+af_b(5.)",
    "bf_emma(3)+bm_george(1)", "af_a(1e308)+af_b(1e308)", "af_x+zz_custom",
    "+".join(f"af_v{i}({i + 1})" for i in range(16)), "af_bella-af_sky",
    "af_bella(2)-af_sky", "af_a(3) - af_b(1e-2) + af_c", "af_a(1e-3)-af_b",
    # refused
    "", "af_bella+", "af_bella(0)", "af_bella(-1)+af_sky", "af_bella(nan)", "af_bella(inf)",
    "af_bella(x)", "af_bella(0x10)", "af_bella-", "-af_bella", "af_bella+bf_emma",
    "af_bella((2))", "../etc/passwd", "af_bella+af sky", "Af_Bella",
    "+".join(f"af_v{i}" for i in range(17)),
]  # fmt: skip


def _resolve(name: str) -> str:
    if not is_voice_name(name):
        raise UnknownVoice(f"unknown voice {name!r}")
    return name


def test_blends_are_pythons(phonemized):
    """parseBlend reads what voices.parse_blend reads (Kokoro-FastAPI's syntax, a voice
    subtracted after -), to the same weights, and refuses what it refuses; mixVoices is
    voices.mix to the bit, a subtracted voice among them."""
    _, _, _, text_js, tmp = phonemized
    rng = np.random.default_rng(1)
    packs = [rng.standard_normal((510, 1, 256)).astype(np.float32) for _ in range(3)]
    weights = [0.7, -0.2, 0.1]
    jobs = [{"kind": "blend", "spec": spec} for spec in BLENDS]
    jobs.append({"kind": "mix", "parts": [[p.ravel().tolist(), w] for p, w in zip(packs, weights)]})
    results = run_node(jobs, text_js, tmp)
    for spec, result in zip(BLENDS, results):
        try:
            want = [list(part) for part in parse_blend(spec, _resolve).parts]
        except (BadBlend, UnknownVoice):
            assert "error" in result, (spec, result)
            continue
        assert result == want, spec
        assert math.isclose(sum(abs(w) for _, w in result), 1.0)
    by_name = dict(zip("abc", packs))
    blend = type(parse_blend("a+b"))(tuple(zip("abc", weights)))
    np.testing.assert_array_equal(np.float32(results[-1]), mix(blend, by_name.__getitem__).ravel())


def test_durations_are_the_pipelines(phonemized):
    """host.js's durations: kokoro_ext.run.pipeline's (float32 division, half to even, at
    least 1), on values at and beside the halves, at several speeds."""
    _, _, _, text_js, tmp = phonemized
    rng = np.random.default_rng(2)
    halves = np.arange(0, 40, dtype=np.float32) + np.float32(0.5)
    beside = np.concatenate([np.nextafter(halves, 0), np.nextafter(halves, 99)])
    predicted = np.concatenate([halves, beside, rng.uniform(0, 30, 500)]).astype(np.float32)
    speeds = [1.0, 0.5, 0.8, 1.1, 1.3, 1.7, 2.0]
    jobs = [{"kind": "durations", "predicted": predicted.tolist(), "speed": s} for s in speeds]
    results = run_node(jobs, text_js, tmp)
    for speed, result in zip(speeds, results, strict=True):
        want = np.maximum(np.round(predicted / speed), 1).astype(np.int64)
        np.testing.assert_array_equal(result, want, err_msg=f"speed {speed}")
