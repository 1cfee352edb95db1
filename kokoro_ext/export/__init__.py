"""The PyTorch side: model rewrites that torch.export can trace."""

from .packed_lstm import PackedLSTM, packed_lstm
from .text_stage import TextStage, durations_from_logits

__all__ = ["PackedLSTM", "TextStage", "durations_from_logits", "packed_lstm"]
