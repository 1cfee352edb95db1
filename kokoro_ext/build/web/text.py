"""The files the browser's English text front end (kokoro_ext/web/static/text.js) loads
beside it, made at build time rather than kept in git (7 MB):

* ``phonemizer.js``: espeak-ng compiled to WebAssembly, npm ``phonemizer`` (a single ES
  module with the wasm and its English data inlined), pinned by version and SHA-256;
* ``lexicon-en-us.json``, ``lexicon-en-gb.json``: misaki's gold and silver dictionaries
  (the installed misaki's, which the Python front end reads) as one object each.

``add_files(directory)`` writes them into a build folder; bench/text_browser.py and
tests/test_web_text.py lay out a folder the same way.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import metadata, resources
from pathlib import Path

from kokoro_ext.build.web import runtime
from kokoro_ext.run import cache

#: espeak-ng for the browser, as npm publishes it, and its tarball's SHA-256.
PHONEMIZER_PACKAGE = "phonemizer@1.2.1"
PHONEMIZER_SHA256 = "12f9f3582f8b5d557a0577180d83ff0458a4a5c15b2efb625ee71c3ebbee22e9"
PHONEMIZER_FILE = "phonemizer.js"
#: text.js's language -> misaki's lexicon prefix
LEXICONS = {"en-us": "us", "en-gb": "gb"}


def phonemizer_script() -> Path:
    """npm phonemizer's ``dist/phonemizer.js``, from npm into the cache once."""
    return runtime.npm_file(PHONEMIZER_PACKAGE, PHONEMIZER_SHA256, "dist/phonemizer.js", "phonemizer")


def lexicon_file(language: str) -> Path:
    """``lexicon-<language>.json``: {"gold": ..., "silver": ...} of the installed misaki,
    minified, in the cache (keyed by misaki's version and the files' bytes)."""
    from misaki import data

    prefix = LEXICONS[language]
    parts = {kind: resources.files(data).joinpath(f"{prefix}_{kind}.json").read_bytes()
             for kind in ("gold", "silver")}  # fmt: skip
    digest = hashlib.sha256(b"".join(parts.values())).hexdigest()[:12]
    target = cache.cache_dir() / "web" / f"lexicon-{language}-{metadata.version('misaki')}-{digest}.json"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        merged = {kind: json.loads(raw) for kind, raw in parts.items()}
        partial = target.with_suffix(".part")
        partial.write_text(json.dumps(merged, ensure_ascii=False, separators=(",", ":")), "utf-8")
        partial.replace(target)
    return target


def add_files(directory: Path) -> None:
    """Copy phonemizer.js and the lexicons into ``directory`` (text.js's folder)."""
    shutil.copyfile(phonemizer_script(), directory / PHONEMIZER_FILE)
    for language in LEXICONS:
        shutil.copyfile(lexicon_file(language), directory / f"lexicon-{language}.json")


#: text.js's folder in this package
STATIC = Path(__file__).resolve().parents[2] / "web" / "static"
#: Runs a module's ``phonemize`` in node on a JSON file of [{text, language}]; prints
#: [{phonemes, ids, words, ms} or {error}] (bench/text_browser.py, tests/test_web_text.py).
_RUNNER = """
import { readFileSync } from "node:fs";
const [module, input] = process.argv.slice(2);
const { phonemize } = await import(module);
const out = [];
for (const { text, language } of JSON.parse(readFileSync(input, "utf8"))) {
  const t0 = performance.now();
  try {
    const r = await phonemize(text, { language });
    out.push({ phonemes: r.phonemes, ids: r.ids && Array.from(r.ids), words: r.words, ms: performance.now() - t0 });
  } catch (e) {
    out.push({ error: String(e?.stack ?? e) });
  }
}
process.stdout.write(JSON.stringify(out));
"""


def site(directory: Path, vocab: dict) -> Path:
    """A folder as a build lays text.js out (text.js, its files, config.json with
    ``vocab``); returns text.js's path."""
    directory.mkdir(parents=True, exist_ok=True)
    add_files(directory)
    shutil.copyfile(STATIC / "text.js", directory / "text.js")
    (directory / "config.json").write_text(json.dumps({"vocab": vocab}, ensure_ascii=False))
    return directory / "text.js"


def run_in_node(module: Path, items: list[dict], timeout: float = 600) -> list[dict]:
    """``phonemize(text, {language})`` of the ES module ``module`` for each item, in one
    node process."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="text-js-") as tmp:
        runner, data = Path(tmp) / "run.mjs", Path(tmp) / "items.json"
        runner.write_text(_RUNNER)
        data.write_text(json.dumps(items, ensure_ascii=False))
        out = subprocess.run(["node", str(runner), module.resolve().as_uri(), str(data)],
                             capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"node failed on {module}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)
