"""The names of the native library's global functions (cpp/src/*.cc), in one place.

Compiled code reaches the kernels by these names (``call_dps_packed``), and the build's
passes and the runtime by ``tvm_ffi.get_global_func``: a name spelled differently on
either side would fail only where it is called.  tests/test_kernel_names.py checks that
this set is exactly what the loaded library registers.  On the run side so that both the
build and the runtime can import it.
"""

from __future__ import annotations

PREFIX = "kokoro_ext."

# dense.cc: GEMM-shaped ops (kokoro_ext.build.passes.dispatch)
CONV1D = "kokoro_ext.conv1d"
CONV1D_TRANSPOSE = "kokoro_ext.conv1d_transpose"
ADDMM = "kokoro_ext.addmm"
BMM = "kokoro_ext.bmm"
# dense.cc: direct stride-1 convolution on a filter packed once (kokoro_ext.build.passes.winograd)
CONV1D_TAPS = "kokoro_ext.conv1d_taps"
TAPS_FILTER = "kokoro_ext.taps_filter"
TAPS_FILTER_SHAPE = "kokoro_ext.taps_filter_shape"
# dense.cc, winograd.cc: int8 weights with a scale per output channel, dequantized where
# the products read them (cpp/include/kokoro_ext/quantized.h; kokoro_ext.build.passes.quantize)
TAPS_FILTER_Q8 = "kokoro_ext.taps_filter_q8"
CONV1D_TAPS_Q8 = "kokoro_ext.conv1d_taps_q8"
CONV1D_WINOGRAD_Q8_IF_PAYS = "kokoro_ext.conv1d_winograd_q8_if_pays"
COLUMNS_Q8 = "kokoro_ext.columns_q8"
# ... with bf16 or int8 products where the host has AVX512_BF16 or AVX512_VNNI
# (cpp/include/kokoro_ext/low_precision.h)
CONV1D_TAPS_Q8_BF16 = "kokoro_ext.conv1d_taps_q8_bf16"
CONV1D_TAPS_Q8_INT8 = "kokoro_ext.conv1d_taps_q8_int8"
TAPS_FILTER_Q8_QUADS = "kokoro_ext.taps_filter_q8_quads"
TAPS_FILTER_Q8_QUADS_SHAPE = "kokoro_ext.taps_filter_q8_quads_shape"
COLUMNS_Q8_QUADS = "kokoro_ext.columns_q8_quads"
COLUMNS_Q8_QUADS_SHAPE = "kokoro_ext.columns_q8_quads_shape"
ADDMM_Q8_INT8 = "kokoro_ext.addmm_q8_int8"
ADDMM_Q8 = "kokoro_ext.addmm_q8"
# winograd.cc
CONV1D_WINOGRAD = "kokoro_ext.conv1d_winograd"
CONV1D_WINOGRAD_IF_PAYS = "kokoro_ext.conv1d_winograd_if_pays"
WINOGRAD_FILTER = "kokoro_ext.winograd_filter"
WINOGRAD_FILTER_SHAPE = "kokoro_ext.winograd_filter_shape"
WINOGRAD_PAYS = "kokoro_ext.winograd_pays"
WINOGRAD_CACHE_STATS = "kokoro_ext.winograd_cache_stats"
WINOGRAD_CACHE_BUDGET = "kokoro_ext.winograd_cache_budget"
WINOGRAD_CACHE_CLEAR = "kokoro_ext.winograd_cache_clear"
# lstm.cc (kokoro_ext.build.frontend.lstm); its int8-weight form and quantizers
# (kokoro_ext.build.passes.quantize)
LSTM = "kokoro_ext.lstm"
LSTM_Q8 = "kokoro_ext.lstm_q8"
LSTM_WEIGHTS_Q8 = "kokoro_ext.lstm_weights_q8"
LSTM_RECURRENT_Q8 = "kokoro_ext.lstm_recurrent_q8"
# storage.cc: the VM's storage pool (kokoro_ext.build.passes.memory)
ALLOC_STORAGE = "kokoro_ext.alloc_storage"
STORAGE_POOL_STATS = "kokoro_ext.storage_pool_stats"
STORAGE_POOL_CLEAR = "kokoro_ext.storage_pool_clear"
# noise.cc (kokoro_ext.run.noise)
SOURCE_NOISE = "kokoro_ext.source_noise"
# elementwise.cc: the smallest kernel, for testing the plumbing
ADD = "kokoro_ext.add"

#: Every name above.
ALL: frozenset[str] = frozenset(
    value for key, value in dict(globals()).items()
    if key.isupper() and key != "PREFIX" and isinstance(value, str)
)

# cpp/cuda/cudnn_conv.cc: a CUDA build's convolutions through cuDNN (--target with
# "libs": ["cudnn"]), a library of its own that such a build carries (kokoro_ext.build
# .cudnn), apart from ALL
CUDNN_CONV1D = "kokoro_ext.cudnn.conv1d"
#: The names the CUDA build's own libraries register, where one is loaded.
CUDA_LIBRARIES: frozenset[str] = frozenset({CUDNN_CONV1D})
#: cudnn_conv.cc's math types by a build's products: exact float32 (FMA kernels only, as
#: PyTorch with TF32 off), TF32 tensor cores, float16 tensor cores with float32 sums
CUDNN_MATH: dict[str, int] = {"fp32": 0, "tf32": 1, "fp16": 2}
