"""Text to Kokoro phonemes, offline, in chunks the compiled buckets hold."""

from .chunking import PAUSES, Piece, Word
from .g2p import Phonemizer, phonemes_to_ids

__all__ = ["PAUSES", "Phonemizer", "Piece", "Word", "phonemes_to_ids"]
