"""kokoro's harmonic-source noise without torch: the draws torch's CPU generator makes.

kokoro's SineGen, after ``torch.manual_seed(seed)``, draws its initial phases
(``torch.rand(batch, harmonics)``) and then ``randn_like`` of its sine waves.  The native
kernel ``kokoro_ext.source_noise`` (cpp/src/noise.cc, which says how torch draws them)
makes the same draws bit for bit; kokoro_ext.tools.reference.source_noise is the torch
original the tests compare it with.  In numpy the Box-Muller transform took half a second
for a 500-token chunk's 5.6 million draws, a tenth of the chunk's synthesis.
"""

from __future__ import annotations

import numpy as np
import tvm_ffi

from kokoro_ext.run import kernels, native


def source_noise(seed: int, batch: int, samples: int, harmonics: int = 9) -> np.ndarray:
    """float32 [batch, samples, harmonics]: the normal draws kokoro's SineGen makes after
    ``torch.manual_seed(seed)`` (torch's engine keeps the seed's low 32 bits)."""
    if min(batch, samples, harmonics) < 0:
        raise ValueError(f"negative noise shape ({batch}, {samples}, {harmonics})")
    out = np.empty((batch, samples, harmonics), dtype=np.float32)
    if out.size:
        native.load()
        kernel = tvm_ffi.get_global_func(kernels.SOURCE_NOISE)
        kernel(seed & 0xFFFFFFFF, tvm_ffi.from_dlpack(out))
    return out


# -- the noise of a CUDA build's device steps: Philox4x32-10 and Box-Muller ---------------
# A counter-based generator: each group of 4 draws is a function of (key, counter) alone,
# so a GPU thread per group makes them in any order (kokoro_ext.build.kernels.steps'
# ``philox_normal``).  The numbers here are that kernel's, for the host and the tools to
# make the same noise: bit for bit in the generator's uint32s, to float32 rounding in the
# normals (the GPU's logf, sinf and cosf are within 2 ulp of numpy's).

#: Philox4x32's multipliers and Weyl key increments (Salmon et al. 2011; Random123, cuRAND)
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF


def philox4x32(counters: np.ndarray, key: tuple[int, int], rounds: int = 10) -> np.ndarray:
    """Philox4x32-``rounds`` of uint32 ``counters`` [..., 4] under ``key`` (two uint32s):
    uint32 [..., 4], Random123's known answers for 10 rounds (tests/test_device_steps.py)."""
    c = np.asarray(counters, dtype=np.uint32)
    c0, c1, c2, c3 = (c[..., i].astype(np.uint64) for i in range(4))
    k0, k1 = key[0] & _MASK32, key[1] & _MASK32
    for _ in range(rounds):
        p0, p1 = np.uint64(PHILOX_M0) * c0, np.uint64(PHILOX_M1) * c2
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0),
            p1 & np.uint64(_MASK32),
            (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1),
            p0 & np.uint64(_MASK32),
        )
        k0, k1 = (k0 + PHILOX_W0) & _MASK32, (k1 + PHILOX_W1) & _MASK32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def philox_key(seed: int) -> tuple[int, int]:
    """The two uint32 key words of a seed (its low 64 bits)."""
    seed &= (1 << 64) - 1
    return seed & _MASK32, seed >> 32


def philox_bits(seed: int, count: int, offset: int = 0) -> np.ndarray:
    """uint32 [ceil(count / 4) * 4]: group i's four words are Philox4x32-10 of the counter
    (i low, i high, offset low, offset high) under ``philox_key(seed)``."""
    groups = np.arange((count + 3) // 4, dtype=np.uint64)
    offset &= (1 << 64) - 1
    counters = np.stack([groups & np.uint64(_MASK32), groups >> np.uint64(32),
                         np.full_like(groups, offset & _MASK32),
                         np.full_like(groups, offset >> 32)], axis=-1)  # fmt: skip
    return philox4x32(counters, philox_key(seed)).reshape(-1)


def philox_normal(
    seed: int, samples: int, harmonics: int = 9, offset: int = 0
) -> np.ndarray:
    """float32 [1, samples, harmonics]: the normals a CUDA build's device steps draw for
    ``seed`` and ``offset`` (a chunk's noise: offset 0), in row-major order: each pair of
    Philox words (x, y) through Box-Muller, u = x 2^-32 + 2^-33 in (0, 1], v = 2 pi
    (y 2^-32 + 2^-33), giving sqrt(-2 ln u) (sin v, cos v), in float32 as the kernel
    computes them."""
    if min(samples, harmonics) < 0:
        raise ValueError(f"negative noise shape (1, {samples}, {harmonics})")
    count = samples * harmonics
    bits = philox_bits(seed, count, offset).reshape(-1, 2)
    f32 = np.float32
    u = bits[:, 0].astype(f32) * f32(2.0**-32) + f32(2.0**-33)
    v = (bits[:, 1].astype(f32) * f32(2.0**-32) + f32(2.0**-33)) * f32(2 * np.pi)
    s = np.sqrt(f32(-2) * np.log(u))
    z = np.stack([s * np.sin(v), s * np.cos(v)], axis=-1).reshape(-1)
    return z[:count].reshape(1, samples, harmonics)
