"""kokoro's harmonic-source noise in numpy: the draws torch's CPU generator makes.

kokoro's SineGen, after ``torch.manual_seed(seed)``, draws its initial phases
(``torch.rand(batch, harmonics)``) and then ``randn_like`` of its sine waves, a
transposed view [B, harmonics, L] in memory.  ``source_noise`` reproduces those draws
without torch (kokoro_ext.tools.reference.source_noise is the torch original the tests
compare it with):

* torch's CPU generator is MT19937 seeded like the reference ``init_genrand`` with the
  seed's low 32 bits;
* a float32 ``rand`` draw takes one 32-bit word and keeps its low 24 bits;
* ``normal_`` on a non-contiguous tensor fills it element by element in memory order
  with ``at::normal_distribution<double>``: Box-Muller on two doubles u1, u2 (each from
  two 32-bit words, high word first, low 53 bits kept), giving r cos(theta) and then,
  from the generator's cache, r sin(theta); each rounded to float32.
"""

from __future__ import annotations

import numpy as np

_MT_N = 624


def _mt19937(seed: int) -> np.random.MT19937:
    """numpy's MT19937 in the state torch's ``manual_seed(seed)`` leaves its engine."""
    key = np.empty(_MT_N, dtype=np.uint32)
    key[0] = value = seed & 0xFFFFFFFF
    for i in range(1, _MT_N):
        value = (1812433253 * (value ^ (value >> 30)) + i) & 0xFFFFFFFF
        key[i] = value
    generator = np.random.MT19937()
    # pos = 624: the first draw twists the whole state, as torch's engine does
    generator.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": _MT_N}}
    return generator


def _uniform53(words: np.ndarray) -> np.ndarray:
    """Pairs of 32-bit words (high, low) -> doubles in [0, 1), as torch's uniform_real."""
    high, low = words[0::2].astype(np.uint64), words[1::2].astype(np.uint64)
    bits = ((high << np.uint64(32)) | low) & np.uint64((1 << 53) - 1)
    return bits.astype(np.float64) * 2.0**-53


def source_noise(seed: int, batch: int, samples: int, harmonics: int = 9) -> np.ndarray:
    """float32 [batch, samples, harmonics]: the normal draws kokoro's SineGen makes after
    ``torch.manual_seed(seed)`` (see the module doc)."""
    count = batch * harmonics * samples
    generator = _mt19937(seed)
    generator.random_raw(batch * harmonics)  # the initial phases, one word each
    pairs = (count + 1) // 2
    words = generator.random_raw(4 * pairs).astype(np.uint32)  # two doubles per pair
    u = _uniform53(words)
    u1, u2 = u[0::2], u[1::2]
    r = np.sqrt(-2.0 * np.log1p(-u2))
    theta = 2.0 * np.pi * u1
    values = np.empty((pairs, 2), dtype=np.float64)
    values[:, 0] = r * np.cos(theta)
    values[:, 1] = r * np.sin(theta)
    # memory order of the transposed view: [batch, harmonics, samples]
    memory = values.reshape(-1)[:count].astype(np.float32).reshape(batch, harmonics, samples)
    return np.ascontiguousarray(memory.transpose(0, 2, 1))
