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
