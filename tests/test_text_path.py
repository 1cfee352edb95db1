"""The path of a text from Synthesizer.stream through the text side (tests/text_path.py):
the synthesizer enters the pipeline once for the text and once for each chunk it takes,
and kokoro_ext.run.timestamps once a chunk for the times; nothing else of the text side,
and no module is entered again while it waits on another (A -> B -> A)."""

from __future__ import annotations

import pytest

from kokoro_ext.run.synthesizer import Synthesizer

from small_build import limit
from text_path import PIPELINE, TEXT, trace

TIMESTAMPS = "kokoro_ext.run.timestamps"


@pytest.fixture(scope="module")
def synth(build_dir):
    synth = limit(Synthesizer(build_dir[0]))
    list(synth.stream("Hello."))  # the English pipeline built: its start is not the path
    return synth


def test_a_text_enters_the_pipeline_once_and_each_chunk_once(synth):
    path, chunks = trace(synth, TEXT)
    assert len(chunks) > 3 and len(path.steps) == len(chunks) + 2
    assert path.from_synthesizer(path.steps[0]) == [PIPELINE]  # parse and clean, at the call
    for step in path.steps[1:-1]:  # a chunk: its G2P and cut, then its words' times
        assert path.from_synthesizer(step) == [PIPELINE, TIMESTAMPS], path.lines()
    assert path.from_synthesizer(path.steps[-1]) == [PIPELINE]  # no chunk left
    assert path.reentries() == [], path.lines()
    # the passes are entered by the pipeline, in its order
    entered = [e.function for e in path.steps[0] if e.caller == PIPELINE]
    assert entered.index("strip_terminal") < entered.index("segments") < entered.index(
        "invisible") < entered.index("spell") < entered.index("drop_symbols")


def test_a_chunk_over_the_frame_limit_is_the_one_way_back(synth):
    # at half speed full chunks's audio is over the frame limit: halved, from the
    # pipeline's own record of it (the durations come only from the text stage)
    path, chunks = trace(synth, "Nevertheless, the river kept on running quietly.", speed=0.5)
    halved = [e for s in path.steps for e in s if e.function == "halve"]
    assert halved and all(e.callee == PIPELINE for e in halved)
    for step in path.steps[1:-1]:
        entered = path.from_synthesizer(step)
        assert set(entered) <= {PIPELINE, TIMESTAMPS} and entered.count(TIMESTAMPS) == 1
    assert path.reentries() == []
