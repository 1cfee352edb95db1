"""One Synthesizer shared by threads: same results as sequential calls, stages loaded once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kokoro_ext.run import synthesizer as runtime
from kokoro_ext.run.synthesizer import Synthesizer

JOBS = [("hˈI ðˈɛɹ.", 1), ("wˈʌn, tˈu.", 2), ("ɡʊd mˈɔɹnɪŋ!", 3), ("hˈI ðˈɛɹ.", 4)]
THREADS = len(JOBS)


def _together(function, arguments):
    """``function`` on each argument, in THREADS threads released at the same moment."""
    barrier = threading.Barrier(THREADS)

    def run(argument):
        barrier.wait()
        return function(argument)

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(run, arguments))


@pytest.fixture
def fresh(build_dir):
    """A Synthesizer that has loaded no stage yet."""
    return Synthesizer(build_dir[0])


def test_threads_get_exactly_the_sequential_results(fresh):
    concurrent = _together(lambda job: fresh.synthesize_phonemes(job[0], seed=job[1]), JOBS)
    sequential = [fresh.synthesize_phonemes(p, seed=s) for p, s in JOBS]
    for job, got, want in zip(JOBS, concurrent, sequential):
        assert np.array_equal(got.audio, want.audio), job
        assert np.array_equal(got.durations, want.durations), job
    # the seeds differ, so equal audio for the same phonemes would mean crossed results
    assert not np.array_equal(concurrent[0].audio, concurrent[3].audio)


def test_streams_in_threads_match_sequential_streams(fresh):
    texts = ["Hi there. Yes!", "One, two."]
    concurrent = _together(
        lambda i: [c.audio for c in fresh.stream(texts[i % 2], seed=i)], range(THREADS)
    )
    for i, chunks in enumerate(concurrent):
        want = [c.audio for c in fresh.stream(texts[i % 2], seed=i)]
        assert len(chunks) == len(want) and all(map(np.array_equal, chunks, want)), i


def test_first_use_of_a_stage_from_several_threads_loads_it_once(fresh, monkeypatch):
    loads = []
    real = runtime.load_library
    monkeypatch.setattr(runtime, "load_library",
                        lambda path, *device: loads.append(path) or real(path, *device))
    runners = _together(lambda i: fresh._stage("decoder"), range(THREADS))
    assert len(loads) == 1 and loads[0].name == "decoder.so"
    assert all(r is runners[0] for r in runners)
