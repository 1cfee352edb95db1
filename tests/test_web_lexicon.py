"""The browser's lexicon as text.js holds it (kokoro_ext/web/static/text.js, ``Grown``):
flat strings and offsets instead of the parsed JSON, asked in node the same as the plain
object for every entry of misaki's en-us and en-gb dictionaries, and in a fraction of
the memory (the JS heap and the typed arrays' buffers, after a full collection).

Needs node; elsewhere these tests skip, saying so; under CI they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if not shutil.which("node") and not os.environ.get("CI"):
    pytest.skip("needs node (Debian: nodejs)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("en-us", "en-gb")
#: Most the lexicon may hold of the parsed object's memory (measured, node 20: 0.27 for
#: en-us, 0.32 for en-gb, the object 24.3 and 22.0 MB; all phonemize keeps, 0.28 of
#: en-us's).  An engine with pointer compression (Chromium's) shrinks the object, not
#: the characters: there en-us's is 0.4.
SHARE = 0.5
#: Words all in the lexicon: espeak-ng stays unloaded
SENTENCE = "The old clock ran slow."

#: argv: the folder holding text.js, its lexicons and config.json; SENTENCE.  Prints
#: what the Python side asserts on.
_SCRIPT = r"""
import { readFileSync } from "node:fs";
const site = new URL(process.argv[2]);
const { Grown, phonemize } = await import(new URL("text.js", site));
const memory = () => { gc(); gc(); const m = process.memoryUsage(); return m.heapUsed + m.arrayBuffers; };
const measure = (make) => { const start = memory(); const kept = make(); return [kept, memory() - start]; };
const parse = (language) => JSON.parse(readFileSync(new URL(`lexicon-${language}.json`, site), "utf8"));
// the reference: the parsed object's entries under Grown's own get()
class Plain extends Grown {
  constructor(entries) { super({}); this.entries = entries; }
  own(word) { return Object.hasOwn(this.entries, word) ? this.entries[word] : undefined; }
}
// the compact one is built from a parse of its own: its POS objects are equal, not the same
const same = (a, b) => a === b || (typeof a === "object" && a !== null && JSON.stringify(a) === JSON.stringify(b));
const out = {};
// phonemize's first call loads the lexicon: all it keeps after, measured
[out.phonemes, out.loaded] = await (async () => {
  const start = memory();
  const r = await phonemize(process.argv[3], { language: "en-us" });
  return [r.phonemes, memory() - start];
})();
// one language's dictionaries: their memory as the object and as Grown, and where they differ
// (a function: the previous language's object is dead before the next is measured, else
// the keys they share would not count)
function check(language) {
  const [data, object] = measure(() => parse(language));
  const [compact, held] = measure(() => { const d = parse(language); return [new Grown(d.gold), new Grown(d.silver)]; });
  let checked = 0, keys = 0;
  const differ = [];
  ["gold", "silver"].forEach((kind, k) => {
    const plain = new Plain(data[kind]), small = compact[k], entries = Object.keys(data[kind]);
    const words = [...entries, "", "__proto__", "constructor", "toString", "zz", "Zz", "ZZ"];
    entries.forEach((w, i) => {
      const capital = w[0].toUpperCase() + w.slice(1).toLowerCase();
      if (i % 5 === 0) words.push(w.toLowerCase(), w.toUpperCase(), capital, w + "s", w.slice(0, -1));
    });
    keys += entries.length;
    for (const w of words) {
      checked++;
      const agree = same(small.own(w), plain.own(w)) && same(small.get(w), plain.get(w)) && small.has(w) === plain.has(w);
      if (!agree) differ.push([kind, w]);
    }
  });
  return { object, held, keys, checked, differ: differ.slice(0, 20) };
}
for (const language of ["en-us", "en-gb"]) out[language] = check(language);
process.stdout.write(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    from kokoro_ext.build.web import text

    site = tmp_path_factory.mktemp("lexicon")
    shutil.copyfile(text.STATIC / "text.js", site / "text.js")
    for language in LANGUAGES:
        shutil.copyfile(text.lexicon_file(language), site / f"lexicon-{language}.json")
    vocab = json.loads((ROOT / "kokoro_ext/configs/kokoro-82m.json").read_text())["vocab"]
    (site / "config.json").write_text(json.dumps({"vocab": vocab}, ensure_ascii=False))
    (site / "check.mjs").write_text(_SCRIPT)
    out = subprocess.run(["node", "--expose-gc", str(site / "check.mjs"), site.as_uri() + "/", SENTENCE],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("language", LANGUAGES)
def test_answers_as_the_parsed_object(measured, language):
    """own/get/has of every entry of both dictionaries, case variants of a fifth of them,
    near misses and Object.prototype's names: the same strings, equal POS objects."""
    got = measured[language]
    assert got["keys"] > 150_000  # the real dictionaries, not an empty stand-in
    assert got["checked"] > got["keys"]
    assert got["differ"] == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_holds_a_fraction_of_the_parsed_objects_memory(measured, language):
    got = measured[language]
    assert got["object"] > 10e6  # the measurement sees the object at all
    assert 0 < got["held"] < SHARE * got["object"], got


def test_phonemize_keeps_no_parsed_lexicon(measured):
    """All phonemize keeps after its first call (lexicon, config, caches) stays under
    half of the parsed en-us lexicon: nothing holds on to the object it was read from."""
    from kokoro_ext.text import FrontEnd

    assert measured["phonemes"] == FrontEnd("a").phonemize(SENTENCE, markdown=False)
    assert 0 < measured["loaded"] < SHARE * measured["en-us"]["object"], measured["loaded"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
