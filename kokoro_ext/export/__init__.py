"""The PyTorch side: model rewrites that torch.export can trace."""

from .packed_lstm import PackedLSTM, packed_lstm

__all__ = ["PackedLSTM", "packed_lstm"]
