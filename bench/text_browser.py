"""The browser's English text front end against the Python one: phonemes of the same
sentences from each JavaScript candidate (run in node) and from
``kokoro_ext.text.FrontEnd(lang).phonemize(text, markdown=False)``.

   PYTHONPATH=. python bench/text_browser.py [--first N] [--out bench/results]

Candidates:
  text.js      kokoro_ext/web/static/text.js: the project's normalization and tokenizer and
               misaki's G2P ported, misaki's lexicons, espeak-ng (npm phonemizer) for the rest
  gold-only    text.js with misaki's gold lexicon only (the silver one empty): less to fetch
  espeak-only  text.js with empty lexicons: every word through espeak-ng (misaki's symbols)
  kokoro-js    npm kokoro-js's own phonemize (its normalization, espeak-ng's IPA as is)

Sentence sets: the prose of bench/data/lamplighter.md (in en-us and en-gb) and the
English entries of tests/data/text_corpus.jsonl that are plain text (plain, numbers,
dates, abbreviations, long, as-written; not Markdown, SSML, terminal or odd characters,
which text.js does not read).  Prints, per set and candidate: sentences, exact phoneme
string match, phoneme character error rate (edit distance / Python's length), whether
the ids of matching sentences are Python's, and how often a sentence's words are the
words kokoro_ext.run.timestamps reports (their original text); and what the browser
fetches for each candidate.  Writes text-browser.json/.txt/.png to --out.  Needs node and npm.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import write_results  # noqa: E402

from kokoro_ext.build.web import runtime, text  # noqa: E402
from kokoro_ext.tools.distance import edit_distance  # noqa: E402

#: kokoro-js as npm publishes it, and its tarball's SHA-256 (27 MB: voices included).
KOKORO_JS_PACKAGE = "kokoro-js@1.2.1"
KOKORO_JS_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
CORPUS_KINDS = {"plain", "numbers", "dates", "abbreviations", "long", "as-written"}
LANGUAGE = {"a": "en-us", "b": "en-gb"}


def lamplighter() -> list[str]:
    """The story's sentences (headings and its comment left out)."""
    body = re.sub(r"<!--.*?-->", "", (ROOT / "bench/data/lamplighter.md").read_text(), flags=re.S)
    paragraphs = [p.strip() for p in body.split("\n\n") if p.strip() and not p.startswith("#")]
    return [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[\"“A-Z])", " ".join(p.split()))]


def sentence_sets(first: int | None) -> dict[str, list[dict]]:
    import text_corpus

    prose = lamplighter()
    corpus = [e for e in text_corpus.read(text_corpus.CORPUS) if e["kind"] in CORPUS_KINDS]
    sets = {
        "prose en-us": [{"text": s, "language": "en-us"} for s in prose],
        "prose en-gb": [{"text": s, "language": "en-gb"} for s in prose],
        "corpus en-us": [{"text": e["text"], "language": "en-us"} for e in corpus if e["lang"] == "a"],
        "corpus en-gb": [{"text": e["text"], "language": "en-gb"} for e in corpus if e["lang"] == "b"],
    }
    return {name: items[:first] for name, items in sets.items()}


def kokoro_js_module(directory: Path) -> Path:
    """kokoro-js's phonemize (its dist/kokoro.js from ``function o`` to ``function p``:
    the normalization and espeak-ng calls, none of transformers.js) as an ES module on
    the vendored phonemizer.js."""
    source = runtime.npm_file(KOKORO_JS_PACKAGE, KOKORO_JS_SHA256, "dist/kokoro.js", "kokoro-js").read_text()
    start, end = source.index("function o(e){"), source.index("function p(e,a=!0)")
    module = directory / "kokoro-js.mjs"
    module.write_text(
        'import{phonemize as l}from"./phonemizer.js";\n' + source[start:end] + "\n"
        "export async function phonemize(text,{language}){"
        'return {phonemes: await m(text, language === "en-gb" ? "b" : "a")};}\n'
    )
    return module


def python_front_end(items: list[dict], vocab: dict) -> tuple[list[dict], float]:
    import text_corpus

    from kokoro_ext.text import FrontEnd, phonemes_to_ids

    fronts = {code: FrontEnd(code) for code in "ab"}
    code = {v: k for k, v in LANGUAGE.items()}
    out, seconds = [], 0.0
    text_corpus.CHUNK = 510  # a build's chunks: the words timestamps report, none cut
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dropped symbols: said once per sentence otherwise
        for item in items:
            front = fronts[code[item["language"]]]
            start = time.perf_counter()
            phonemes = front.phonemize(item["text"], markdown=False)
            seconds += time.perf_counter() - start
            said = text_corpus.record(front, {"id": 0, "text": item["text"], "markdown": False})
            out.append({"phonemes": phonemes, "ids": phonemes_to_ids(phonemes, vocab),
                        "said": said.get("said")})  # fmt: skip
    return out, seconds


def score(reference: list[dict], got: list[dict], items: list[dict]) -> dict:
    exact = errors = length = ids_differ = failed = words = 0
    differ = []
    for ref, js, item in zip(reference, got, items):
        if "error" in js:
            failed += 1
            js = {"phonemes": ""}
        words += [w["text"] for w in js.get("words") or []] == ref["said"]
        d = edit_distance(ref["phonemes"], js["phonemes"])
        errors, length = errors + d, length + len(ref["phonemes"])
        if d == 0:
            exact += 1
            ids_differ += js.get("ids", ref["ids"]) != ref["ids"]  # kokoro-js makes none
        else:
            differ.append({"text": item["text"], "python": ref["phonemes"], "js": js["phonemes"]})
    times = [js["ms"] for js in got if "ms" in js]
    return {
        "sentences": len(items), "exact": exact / len(items), "cer": errors / max(length, 1),
        "ids_differ": ids_differ, "failed": failed, "words": words / len(items),
        "median_ms": statistics.median(times) if times else None,
        "differ": differ[:20],  # the first: the results file stays small
    }  # fmt: skip


def sizes(folder: Path, files: list[str]) -> dict[str, dict[str, int]]:
    return {f: {"bytes": (folder / f).stat().st_size,
                "gzip": len(gzip.compress((folder / f).read_bytes(), 9))} for f in files}  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH: this bench runs the browser's front end in node")
    vocab = json.loads(args.config.read_text())["vocab"]
    sets = sentence_sets(args.first)
    result: dict = {"sets": {}, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="text-browser-") as tmp:
        full, gold, bare = Path(tmp) / "text.js", Path(tmp) / "gold-only", Path(tmp) / "espeak-only"
        modules = {"text.js": text.site(full, vocab), "gold-only": text.site(gold, vocab),
                   "espeak-only": text.site(bare, vocab)}  # fmt: skip
        for language in text.LEXICONS:
            lexicon = json.loads((gold / f"lexicon-{language}.json").read_text())
            (gold / f"lexicon-{language}.json").write_text(
                json.dumps({"gold": lexicon["gold"], "silver": {}}, ensure_ascii=False, separators=(",", ":")))
            (bare / f"lexicon-{language}.json").write_text('{"gold":{},"silver":{}}')
        modules["kokoro-js"] = kokoro_js_module(full)
        result["sizes"] = {
            "text.js": sizes(full, ["text.js", "lexicon-en-us.json", "lexicon-en-gb.json", "phonemizer.js"]),
            "gold-only": sizes(gold, ["text.js", "lexicon-en-us.json", "lexicon-en-gb.json", "phonemizer.js"]),
            "espeak-only": sizes(full, ["text.js", "phonemizer.js"]),
            "kokoro-js": sizes(full, ["kokoro-js.mjs", "phonemizer.js"]),
        }  # fmt: skip
        for name, items in sets.items():
            reference, seconds = python_front_end(items, vocab)
            result["sets"][name] = {"python_ms": 1000 * seconds / len(items)}
            for candidate, module in modules.items():
                got = text.run_in_node(module, items)
                result["sets"][name][candidate] = score(reference, got, items)
                print(f"{name:14} {candidate:12} exact {result['sets'][name][candidate]['exact']:.3f}", flush=True)
    return result


def format_tables(result: dict) -> str:
    lines = ["text front end in node vs Python (kokoro_ext.text.FrontEnd): phonemes per sentence", "",
             f"{'set':14} {'candidate':12} {'n':>4} {'exact':>7} {'CER':>7} {'ids≠':>5} {'words':>7} {'failed':>6} {'ms/sent':>8}"]  # fmt: skip
    for name, by in result["sets"].items():
        for candidate, s in by.items():
            if candidate == "python_ms":
                continue
            lines.append(f"{name:14} {candidate:12} {s['sentences']:4} {s['exact']:7.1%} {s['cer']:7.2%} "
                         f"{s['ids_differ']:5} {s['words']:7.1%} {s['failed']:6} {s['median_ms']:8.1f}")  # fmt: skip
        lines.append(f"{name:14} {'(python)':12} {'':4} {'':7} {'':7} {'':5} {'':7} {'':6} {by['python_ms']:8.1f}")
    lines += ["", "exact: phoneme strings equal; CER: edit distance / Python's length; ids≠: exact",
              "sentences whose ids differ; words: the sentence's words as timestamps report them;",
              "ms/sent: median in node (the first sentence loads the lexicon and espeak-ng)"]
    lines += ["", "what the browser fetches (bytes, gzip -9):"]
    for candidate, files in result["sizes"].items():
        total = sum(f["gzip"] for name, f in files.items() if "en-gb" not in name)
        lines.append(f"  {candidate:12} {total / 1e6:5.2f} MB gzipped for en-us: " + ", ".join(
            f"{name} {f['bytes'] / 1e6:.2f} MB ({f['gzip'] / 1e6:.2f})" for name, f in files.items()))
    lines += ["", "text.js's differences (up to 8 per set):"]
    for name, by in result["sets"].items():
        for d in by["text.js"]["differ"][:8]:
            lines += [f"  [{name}] {d['text']}", f"     python {d['python']}", f"     js     {d['js']}"]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    names = list(result["sets"])
    candidates = [c for c in result["sets"][names[0]] if c != "python_ms"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for k, (metric, title) in enumerate([("exact", "exact match (sentences)"), ("cer", "character error rate")]):
        for i, candidate in enumerate(candidates):
            values = [result["sets"][n][candidate][metric] for n in names]
            axes[k].bar([x + i * 0.2 for x in range(len(names))], values, 0.2, label=candidate)
        axes[k].set_xticks([x + 0.3 for x in range(len(names))], names, fontsize=8)
        axes[k].set_title(title)
    axes[0].legend(loc="center left", fontsize=8)
    fig.suptitle("browser text front end vs Python")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "kokoro_ext/configs/kokoro-82m.json",
                        help="the model's config.json (its vocab)")  # fmt: skip
    parser.add_argument("--first", type=int, help="only the first N sentences of each set")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    result = run(args)
    write_results(args.out, "text-browser", result, format_tables(result), plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
