"""The Relax side: converters for ``from_exported_program(custom_convert_map=...)``.

The GEMM-shaped ops (1-D convolutions, addmm, bmm) keep the importer's converters and go
to the native kernels in the pipeline instead (kokoro_ext.build.passes.dispatch), where
symbolic shapes are known.
"""

from .elementwise import convert_pow, convert_tanh
from .lstm import LSTM_BACKENDS, LstmBackend, convert_packed_lstm

__all__ = [
    "LSTM_BACKENDS",
    "LstmBackend",
    "convert_packed_lstm",
    "convert_pow",
    "convert_tanh",
    "custom_convert_map",
]


def custom_convert_map(lstm_backend: LstmBackend = "native") -> dict:
    """The converters for our custom ops, keyed as the torch frontend looks them up.

    ``lstm_backend`` is the one switch between the native kernel ("native") and the TIR
    loop ("tir") for ``kokoro_ext::packed_lstm``.  ``tanh`` and small integer powers always
    get the lowerings that vectorize (kokoro_ext.build.frontend.elementwise).
    """
    return {
        "packed_lstm.default": convert_packed_lstm(lstm_backend),
        "pow.Tensor_Scalar": convert_pow,
        "tanh.default": convert_tanh,
    }
