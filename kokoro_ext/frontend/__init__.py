"""The Relax side: converters for ``from_exported_program(custom_convert_map=...)``."""

from .lstm import LSTM_BACKENDS, LstmBackend, convert_packed_lstm

__all__ = ["LSTM_BACKENDS", "LstmBackend", "convert_packed_lstm", "custom_convert_map"]


def custom_convert_map(lstm_backend: LstmBackend = "native") -> dict:
    """The converters for our custom ops, keyed as the torch frontend looks them up.

    ``lstm_backend`` is the one switch between the native kernel ("native") and the TIR
    loop ("tir") for ``kokoro_ext::packed_lstm``.
    """
    return {"packed_lstm.default": convert_packed_lstm(lstm_backend)}
