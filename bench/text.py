"""Front-end speed: sentences per second over the corpus (tests/data/text_corpus.jsonl).

Each entry goes through the whole text side as ``Synthesizer.stream`` takes it (markup,
cleaning, normalization, sentences, G2P, chunks of the build's 510 phonemes), per
language.  Prints a table: entries, sentences (as the front end cut them), the first
pass's seconds (starting the G2P included), the best of ``--repeat`` passes after it and
its sentences per second (``--clock cpu``: in CPU seconds of this process, which a
busy machine disturbs less than the wall clock).  The G2Ps cache what they looked up
(misaki's lexicon, espeak's words), so the repeated passes measure mostly the front
end's own work.

``--timing`` adds the text work of the word timestamps as ``Synthesizer.stream`` does it
(each word's tokens and original text), with durations of one frame a token.

    python bench/text.py [--repeat 5] [--clock wall|cpu] [--timing]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).parents[1] / "tests" / "data" / "text_corpus.jsonl"
CONFIG_82M = Path(__file__).parents[1] / "kokoro_ext" / "configs" / "kokoro-82m.json"
LIMIT = 510


def _chunker(lang: str, timing: bool = False):
    """A function text, markdown -> (sentences, chunks) with the front end under test;
    ``timing``: also the text work of the chunks' word timestamps, as Synthesizer.stream
    does it (with durations of one frame a token, no synthesis)."""
    vocab = json.loads(CONFIG_82M.read_text())["vocab"] if timing else None
    from kokoro_ext.run.synthesizer import SILENT_SYMBOLS

    try:
        from kokoro_ext.text.pipeline import Chunking, TextPipeline
    except ImportError:  # the front end before kokoro_ext.text.pipeline
        from kokoro_ext.run.timestamps import chunk_words, originals_of
        from kokoro_ext.text.chunking import pack_evenly
        from kokoro_ext.text.pipeline import FrontEnd

        front = FrontEnd(lang)

        def chunks(text: str, markdown: bool):
            out, count = [], 0
            originals = originals_of(text, front, markdown) if timing else None
            for part in front.sentences(text, markdown):
                count += 1
                pieces = pack_evenly(front.words(part), LIMIT, part.end)
                for piece in pieces if timing else ():
                    if any(p in vocab and p not in SILENT_SYMBOLS for p in piece.phonemes):
                        tokens = sum(1 for p in piece.phonemes if p in vocab)
                        chunk_words(piece.words, np.ones(tokens + 2, np.int64), vocab,
                                    SILENT_SYMBOLS, 0.0, 1.0, originals)
                out += pieces
            return count, out

        return chunks
    from kokoro_ext.run.timestamps import times

    pipeline = TextPipeline(lang)

    def chunks(text: str, markdown: bool):
        chunking = Chunking(LIMIT, LIMIT, vocab=vocab, silent=SILENT_SYMBOLS) if timing else None
        doc = pipeline.run(text, markdown, limit=LIMIT, chunking=chunking)
        out = list(doc.chunks)
        for chunk in out if timing else ():
            times(chunk.timing, np.ones(chunk.timing.tokens, np.int64), 0.0, 1.0)
        return len({c.sentence for c in out}), out

    return chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: this process's CPU time, steadier on a shared machine")
    parser.add_argument("--timing", action="store_true",
                        help="also the text work of the word timestamps, as stream does it")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    entries = [json.loads(line) for line in CORPUS.read_text("utf-8").split("\n") if line]
    by_lang: dict[str, list[dict]] = {}
    for entry in entries:
        by_lang.setdefault(entry["lang"], []).append(entry)
    rows = []
    for lang, group in by_lang.items():
        chunks = _chunker(lang, args.timing)

        def run(chunks=chunks) -> int:
            sentences = 0
            for entry in group:
                try:
                    sentences += chunks(entry["text"], entry["markdown"])[0]
                except ValueError:  # malformed SSML: still front-end work
                    pass
            return sentences

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = clock()
            sentences = run()  # starts the G2P, fills its caches
            first = clock() - start
            best = float("inf")
            for _ in range(args.repeat):
                start = clock()
                run()
                best = min(best, clock() - start)
            if args.timing:  # the sentences as cut (chunks with nothing to say are left out)
                sentences = run(_chunker(lang))
        rows.append((lang, len(group), sentences, first, best))
    print(f"{'lang':<6}{'entries':>8}{'sentences':>10}{'first s':>9}{'best s':>9}{'sent/s':>9}")
    total = ("all", *(sum(r[i] for r in rows) for i in range(1, 5)))
    for lang, count, sentences, first, best in [*rows, total]:
        print(f"{lang:<6}{count:>8}{sentences:>10}{first:>9.3f}{best:>9.3f}{sentences / best:>9.0f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))  # this checkout's kokoro_ext
    main()
