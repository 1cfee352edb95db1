"""The whole front end on the corpus (tests/text_corpus.py): every entry's phonemes,
sentences, chunks and timestamp words exactly as tests/data/text_golden.jsonl records
them, and the corpus file as the generator writes it."""

from __future__ import annotations

import pytest

import text_corpus
from kokoro_ext.text.pipeline import FrontEnd


@pytest.fixture(scope="module")
def entries():
    return text_corpus.read(text_corpus.CORPUS)


def test_the_corpus_is_what_the_generator_writes(entries):
    assert entries == text_corpus.corpus()
    assert len(entries) >= 1000
    assert {e["lang"] for e in entries} == set("abefhijpz")


def test_the_front_end_reproduces_the_golden_records(entries):
    golden = text_corpus.read(text_corpus.GOLDEN)
    assert len(golden) == len(entries)
    fronts: dict[str, FrontEnd] = {}
    differ = []
    for entry, expected in zip(entries, golden):
        got = text_corpus.record(fronts.setdefault(entry["lang"], FrontEnd(entry["lang"])), entry)
        if got != expected:
            differ.append((entry["id"], entry["text"], expected, got))
    assert not differ, f"{len(differ)} entries differ; the first: {differ[0]}"
