"""Our Relax and TIR passes, one module per family; kokoro_ext.build.backend.cpu.pipeline orders them.

  dispatch   DispatchNativeKernels: GEMM-shaped ops -> the native kernels
  winograd   winograd_conv1d: long stride-1 native convolutions -> Winograd or packed taps
  schedule   InlineElementwise, VectorizeReduction, ParallelizeSpatial, schedule_in_turn
  quantize   quantize_weights: kernels on weights stored as int8 -> their int8 forms
  memory     exact_dynamic_sizes: storage sized by the length planned for the call's
             batch, not the batch bound; call_sized_storage: every storage sized by
             the call (WebAssembly); pooled_storage: host storage allocations -> the
             native pool
  fusion     near_fusion: elementwise producers used far down their block kept out of
             their consumer's fusion (their inputs die where they run)
  polyphase  polyphase_conv_transpose: strided transposed convolutions -> their phases'
             stride-1 convolution (GPU builds)
"""

from .dispatch import DispatchNativeKernels
from .fusion import near_fusion
from .memory import call_sized_storage, exact_dynamic_sizes, pooled_storage
from .polyphase import polyphase_conv_transpose
from .quantize import quantize_weights
from .schedule import (
    InlineElementwise,
    ParallelizeSpatial,
    VectorizeReduction,
    schedule_in_turn,
)
from .winograd import length_bounds, pack_taps, winograd_conv1d, winograd_filter

__all__ = [
    "DispatchNativeKernels",
    "InlineElementwise",
    "ParallelizeSpatial",
    "VectorizeReduction",
    "call_sized_storage",
    "exact_dynamic_sizes",
    "length_bounds",
    "near_fusion",
    "pack_taps",
    "polyphase_conv_transpose",
    "pooled_storage",
    "quantize_weights",
    "schedule_in_turn",
    "winograd_conv1d",
    "winograd_filter",
]
