"""Front-end speed: sentences per second over the corpus (tests/data/text_corpus.jsonl).

Each entry goes through the whole text side as ``Synthesizer.stream`` takes it (markup,
cleaning, normalization, sentences, G2P, chunks of the build's 510 phonemes), per
language.  Prints a table: entries, sentences (as the front end cut them), the first
pass's seconds (starting the G2P included), the best of ``--repeat`` passes after it and
its sentences per second.  The G2Ps cache what they looked up (misaki's lexicon, espeak's
words), so the repeated passes measure mostly the front end's own work.

    python bench/text.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

CORPUS = Path(__file__).parents[1] / "tests" / "data" / "text_corpus.jsonl"
LIMIT = 510


def _chunker(lang: str):
    """A function text, markdown -> (sentences, chunks) with the front end under test."""
    try:
        from kokoro_ext.text.pipeline import TextPipeline
    except ImportError:  # the front end before kokoro_ext.text.pipeline
        from kokoro_ext.text.chunking import pack_evenly
        from kokoro_ext.text.frontend import FrontEnd

        front = FrontEnd(lang)

        def chunks(text: str, markdown: bool):
            out, count = [], 0
            for part in front.sentences(text, markdown):
                count += 1
                out += pack_evenly(front.words(part), LIMIT, part.end)
            return count, out

        return chunks
    pipeline = TextPipeline(lang)

    def chunks(text: str, markdown: bool):
        doc = pipeline.run(text, markdown, limit=LIMIT)
        out = list(doc.chunks)
        return len({c.sentence for c in out}), out

    return chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    entries = [json.loads(line) for line in CORPUS.read_text("utf-8").split("\n") if line]
    by_lang: dict[str, list[dict]] = {}
    for entry in entries:
        by_lang.setdefault(entry["lang"], []).append(entry)
    rows = []
    for lang, group in by_lang.items():
        chunks = _chunker(lang)

        def run() -> int:
            sentences = 0
            for entry in group:
                try:
                    sentences += chunks(entry["text"], entry["markdown"])[0]
                except ValueError:  # malformed SSML: still front-end work
                    pass
            return sentences

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            sentences = run()  # starts the G2P, fills its caches
            first = time.perf_counter() - start
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - start)
        rows.append((lang, len(group), sentences, first, best))
    print(f"{'lang':<6}{'entries':>8}{'sentences':>10}{'first s':>9}{'best s':>9}{'sent/s':>9}")
    total = ("all", *(sum(r[i] for r in rows) for i in range(1, 5)))
    for lang, count, sentences, first, best in [*rows, total]:
        print(f"{lang:<6}{count:>8}{sentences:>10}{first:>9.3f}{best:>9.3f}{sentences / best:>9.0f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))  # this checkout's kokoro_ext
    main()
