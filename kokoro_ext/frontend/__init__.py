"""The Relax side: converters for ``from_exported_program(custom_convert_map=...)``."""

from .dense import convert_addmm, convert_bmm, convert_convolution
from .elementwise import convert_pow, convert_tanh
from .lstm import LSTM_BACKENDS, LstmBackend, convert_packed_lstm

__all__ = [
    "LSTM_BACKENDS",
    "LstmBackend",
    "convert_addmm",
    "convert_bmm",
    "convert_convolution",
    "convert_packed_lstm",
    "convert_pow",
    "convert_tanh",
    "custom_convert_map",
]


def custom_convert_map(lstm_backend: LstmBackend = "native", native_dense: bool = True) -> dict:
    """The converters for our custom ops, keyed as the torch frontend looks them up.

    ``lstm_backend`` is the one switch between the native kernel ("native") and the TIR
    loop ("tir") for ``kokoro_ext::packed_lstm``.  ``native_dense`` sends 1-D convolutions,
    addmm and bmm to the native BLAS kernels (kokoro_ext.frontend.dense); without it they keep
    TVM's own lowering.  ``tanh`` and small integer powers always get the lowerings that
    vectorize (kokoro_ext.frontend.elementwise).
    """
    converters = {
        "packed_lstm.default": convert_packed_lstm(lstm_backend),
        "pow.Tensor_Scalar": convert_pow,
        "tanh.default": convert_tanh,
    }
    if native_dense:
        converters["convolution.default"] = convert_convolution
        converters["addmm.default"] = convert_addmm
        converters["bmm.default"] = convert_bmm
    return converters
