"""host.js, the page's steps between the stages, against the Python runtime's (in node)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from kokoro_ext.build.backend.browser import STATIC
from kokoro_ext.run.alignment import align
from kokoro_ext.run.noise import source_noise
from kokoro_ext.run.pipeline import durations, voice_style

if shutil.which("node") is None and not os.environ.get("CI"):
    pytest.skip("needs node (Debian: nodejs)", allow_module_level=True)

_SCRIPT = """
import * as host from "%s";
const input = JSON.parse(process.argv[1]);
const voice = Float32Array.from({ length: 510 * 256 }, (_, i) => i);
const out = {
  noise: Array.from(host.sourceNoise(input.seed, input.samples, input.harmonics)),
  durations: Array.from(host.durations(Float32Array.from(input.predicted), input.speed)),
  aligned: Array.from(host.align(Float32Array.from(input.values), input.channels,
                                 Int32Array.from(input.frameCounts), input.frames)),
  style: Array.from(host.voiceStyle(voice, input.phonemes)),
};
process.stdout.write(JSON.stringify(out));
"""


def _run(**inputs) -> dict:
    script = _SCRIPT % (STATIC / "host.js").as_uri()
    out = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(inputs)],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return json.loads(out.stdout)


def test_host_steps_are_the_python_runtimes():
    rng = np.random.default_rng(0)
    # the text stage's durations are float32: just above a half, and halves
    predicted = np.float32([0.5, 1.5, 2.5, 3.49, 0.2, 7.0, np.nextafter(np.float32(2.5), 3)])
    values = rng.standard_normal((3, 4)).astype(np.float32)
    frame_counts = [2, 0, 3, 1]
    got = _run(seed=3, samples=1201, harmonics=9, predicted=predicted.tolist(), speed=1.0,
               values=values.ravel().tolist(), channels=3, frameCounts=frame_counts,
               frames=8, phonemes=700)  # fmt: skip
    # torch's draws, bit for bit (the same libm calls up to the last bit of a double)
    np.testing.assert_array_equal(np.float32(got["noise"]), source_noise(3, 1, 1201, 9).ravel())
    # halves round to even, as numpy does (2.5 -> 2, 0.5 -> 0 -> at least 1)
    np.testing.assert_array_equal(got["durations"], durations(predicted))
    assert got["durations"][2] == 2 and got["durations"][0] == 1 and got["durations"][6] == 3
    np.testing.assert_array_equal(
        np.float32(got["aligned"]).reshape(3, 8), align(values, np.array(frame_counts), 8)
    )
    voice = np.arange(510 * 256, dtype=np.float32).reshape(510, 1, 256)
    np.testing.assert_array_equal(got["style"], voice_style(voice, 700).ravel())


def test_host_durations_at_another_speed_are_the_python_runtimes():
    # float32, as the text stage gives them; at speed 2: 2.5, 1.5, 0.5, 0.45 ...
    predicted = np.float32([5.0, 3.0, 1.0, 0.9, 7.02, 4.99])
    got = _run(seed=0, samples=1, harmonics=1, predicted=predicted.tolist(), speed=2.0, values=[0.0],
               channels=1, frameCounts=[1], frames=1, phonemes=1)  # fmt: skip
    np.testing.assert_array_equal(got["durations"], durations(predicted, 2.0))
    assert got["durations"][:4] == [2, 2, 1, 1]


_ALIGN = """
import * as host from "%s";
const cases = JSON.parse(process.argv[1]);
process.stdout.write(JSON.stringify(cases.map((c) => Array.from(host.align(
  Float32Array.from(c.values), c.channels, Int32Array.from(c.durations), c.frames)))));
"""


def test_alignment_is_the_runtimes_on_random_shapes():
    """align on 40 random (channels, tokens, durations) cases, zero-frame tokens among
    them: kokoro_ext.run.alignment.align's frames, bit for bit."""
    rng = np.random.default_rng(5)
    cases, want = [], []
    for _ in range(40):
        channels, tokens = int(rng.integers(1, 9)), int(rng.integers(1, 30))
        durations = rng.integers(0, 7, tokens)
        values = rng.standard_normal((channels, tokens)).astype(np.float32)
        frames = int(durations.sum())
        cases.append({"values": values.ravel().tolist(), "channels": channels,
                      "durations": durations.tolist(), "frames": frames})  # fmt: skip
        want.append(align(values, durations, frames))
    script = _ALIGN % (STATIC / "host.js").as_uri()
    out = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(cases)],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    for case, got, expected in zip(cases, json.loads(out.stdout), want, strict=True):
        np.testing.assert_array_equal(np.float32(got).reshape(case["channels"], -1), expected)
