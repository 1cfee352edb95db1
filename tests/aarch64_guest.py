"""Speak phonemes with a build and save the audio: ``python tests/aarch64_guest.py
ARTIFACTS PHONEMES OUT.npy``; prints the host CPU as the run side sees it, then the
synthesis time, as JSON.  Run under qemu-user by tests/test_aarch64.py (any Python
runs it: it needs the run side only)."""

import json
import platform
import sys
import time

import numpy as np

from kokoro_ext.run import cpu
from kokoro_ext.run.synthesizer import Synthesizer

artifacts, phonemes, out = sys.argv[1:4]
host = cpu.HostCPU.detect()
print(json.dumps({"machine": platform.machine(), "arch": host.arch,
                  "features": sorted(host.enabled)}), flush=True)  # fmt: skip
synth = Synthesizer(artifacts)
start = time.perf_counter()
trace = synth.synthesize_phonemes(phonemes, seed=0)
np.save(out, trace.audio)
print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
