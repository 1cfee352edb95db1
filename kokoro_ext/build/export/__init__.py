"""The PyTorch side: model rewrites that torch.export can trace."""

from .decoder_stage import DecoderStage, SourceStage
from .harmonic_source import HarmonicSource
from .packed_lstm import PackedLSTM, packed_lstm
from .prosody_stage import ProsodyStage
from .stft import ExactSTFT
from .text_stage import TextStage, durations_from_logits

__all__ = [
    "DecoderStage",
    "ExactSTFT",
    "HarmonicSource",
    "PackedLSTM",
    "ProsodyStage",
    "SourceStage",
    "TextStage",
    "durations_from_logits",
    "packed_lstm",
]
