"""The browser's English text front end (kokoro_ext/web/static/text.js), run in node,
against the Python front end on the same sentences: phonemes, token ids and the words
timestamps report; and as a page loads it, in headless Chromium from a static folder.
bench/text_browser.py measures the same on 750 sentences.

Needs node and npm (npm fetches the pinned espeak-ng module once into the cache), and
for the page Chromium and playwright (as tests/test_browser.py).  Elsewhere these tests
skip, saying which is missing; under CI they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import pytest

import text_corpus
from kokoro_ext.text import FrontEnd, phonemes_to_ids
from kokoro_ext.tools.distance import edit_distance

_missing = [tool for tool in ("node", "npm") if not shutil.which(tool)]
if _missing and not os.environ.get("CI"):
    pytest.skip(f"needs {' and '.join(_missing)} (Debian: nodejs, npm)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
VOCAB = json.loads((ROOT / "kokoro_ext/configs/kokoro-82m.json").read_text())["vocab"]
#: The story's prose: text.js said all 153 sentences as Python does (bench/text_browser.py).
PROSE = [
    "The town of Harrowgate sat at the bottom of a long valley, where the river slowed down "
    "and spread out before it reached the sea.",
    "It was in that shadow that Tomas Brandt began his work each day.",
    "\"You'll want to be quick,\" she said; the wind had already put out two of them.",
    "He didn't answer at once — he was counting the lamps along the quay.",
    "Nobody knew why the old clock at St. Anne's ran eleven minutes slow.",
    "I'd have thought they're well-known for their bread, pies and cakes!",
]
#: Entries of the corpus per kind (numbers, dates, ...: the normalization's rules)
KINDS = {"plain": 4, "numbers": 8, "dates": 5, "abbreviations": 4, "long": 1}
#: Exact phoneme strings at least this often (measured: 98% of the corpus's English
#: entries, 100% of the prose; espeak-ng 1.52 in Python and npm's build differ on a few
#: words outside misaki's lexicons) and at most this character error rate.
EXACT = 0.9
CER = 0.01


def sentences() -> list[dict]:
    items = [{"text": t, "language": "en-us"} for t in PROSE]
    items += [{"text": t, "language": "en-gb"} for t in PROSE[:3]]
    corpus = text_corpus.read(text_corpus.CORPUS)
    for kind, count in KINDS.items():
        for lang in "ab":
            chosen = [e for e in corpus if e["kind"] == kind and e["lang"] == lang][: count if lang == "a" else 1]
            items += [{"text": e["text"], "language": {"a": "en-us", "b": "en-gb"}[lang]} for e in chosen]
    return items


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from kokoro_ext.build.web import text

    items = sentences()
    module = text.site(tmp_path_factory.mktemp("text-js"), VOCAB)
    got = text.run_in_node(module, items, timeout=120)
    fronts = {"en-us": FrontEnd("a"), "en-gb": FrontEnd("b")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [fronts[i["language"]].phonemize(i["text"], markdown=False) for i in items]
    return items, got, expected, module


def test_phonemes_agree_with_the_python_front_end(results):
    items, got, expected, _ = results
    assert len(items) >= 30
    assert not [g["error"] for g in got if "error" in g]
    exact = sum(g["phonemes"] == e for g, e in zip(got, expected)) / len(items)
    cer = sum(edit_distance(e, g["phonemes"]) for g, e in zip(got, expected)) / sum(map(len, expected))
    differ = [(i["text"], e, g["phonemes"]) for i, g, e in zip(items, got, expected) if g["phonemes"] != e]
    assert exact >= EXACT and cer <= CER, f"exact {exact:.1%}, CER {cer:.2%}; differ: {differ}"
    # the prose has no words outside the lexicons: all of it as Python says it
    assert all(g["phonemes"] == e for i, g, e in zip(items, got, expected) if i["text"] in PROSE), differ


def test_ids_are_pythons_for_the_same_phonemes(results):
    items, got, expected, _ = results
    same = [(g, e) for g, e in zip(got, expected) if g["phonemes"] == e]
    assert len(same) >= EXACT * len(items), len(same)  # not a check of none of them
    for g, e in same:
        assert g["ids"] == phonemes_to_ids(e, VOCAB)
        assert g["ids"][0] == g["ids"][-1] == 0  # kokoro's boundaries


def test_words_are_the_words_timestamps_report(results, monkeypatch):
    """words: what kokoro_ext.run.timestamps reports for the same text (the corpus's
    "said": each written word once, "$16 million" one word), at offsets into the text."""
    items, got, _, _ = results
    monkeypatch.setattr(text_corpus, "CHUNK", 510)  # a build's chunks: no word cut in two
    fronts = {"en-us": FrontEnd("a"), "en-gb": FrontEnd("b")}
    differ = []
    for i, (item, g) in enumerate(zip(items, got)):
        text, words = item["text"], g["words"]
        assert "".join(w["phonemes"] for w in words).strip() == g["phonemes"]
        assert all(text[w["start"] : w["end"]].strip() == w["text"] for w in words)
        starts = [w["start"] for w in words]
        assert starts == sorted(starts)
        entry = {"id": i, "text": text, "markdown": False}
        said = text_corpus.record(fronts[item["language"]], entry)["said"]
        if [w["text"] for w in words] != said:
            differ.append((said, [w["text"] for w in words]))
    assert len(differ) <= len(items) // 10, "\n".join(f"{a}\n{b}" for a, b in differ)


def test_it_runs_in_chromium_from_a_static_folder(results):
    """text.js as a page loads it: an ES module from a static host, no bundler, its
    lexicon and espeak-ng fetched beside it (a word outside the lexicon: "zyxqwv")."""
    from kokoro_ext.tools import browser

    try:
        from playwright.sync_api import sync_playwright

        executable = browser.chromium()
    except (ImportError, browser.BrowserUnavailable) as err:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"needs Chromium and playwright: {err}")
    items = [{"text": "Dr. Smith paid $5.50 for Harrowgate's zyxqwv lamp.", "language": "en-us"},
             {"text": "The colour of the lamp.", "language": "en-gb"}]  # fmt: skip
    folder = Path(results[3]).parent
    server = browser.StaticServer(folder)
    try:
        with sync_playwright() as playwright:
            chrome = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = chrome.new_page()
            page.goto(server.url + "config.json")  # same origin as the module
            got = page.evaluate(
                """async ([base, items]) => {
                  const { phonemize } = await import(base + "text.js");
                  const out = [];
                  for (const { text, language } of items) {
                    const r = await phonemize(text, { language });
                    out.push({ phonemes: r.phonemes, ids: Array.from(r.ids) });
                  }
                  return out;
                }""",
                [server.url, items],
            )
            chrome.close()
    finally:
        server.close()
    fronts = {"en-us": FrontEnd("a"), "en-gb": FrontEnd("b")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [fronts[i["language"]].phonemize(i["text"], markdown=False) for i in items]
    assert [g["phonemes"] for g in got] == expected
    assert [g["ids"] for g in got] == [phonemes_to_ids(e, VOCAB) for e in expected]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
