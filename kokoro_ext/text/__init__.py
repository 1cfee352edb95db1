"""Text to Kokoro phonemes, offline."""

from .g2p import Phonemizer, phonemes_to_ids

__all__ = ["Phonemizer", "phonemes_to_ids"]
