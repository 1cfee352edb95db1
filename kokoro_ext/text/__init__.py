"""Text to Kokoro phonemes, offline, in chunks one call of the compiled stages takes.

pipeline.py lists the passes in order and is the one front door (``TextPipeline(lang)``:
``run(text)`` -> chunks, ``phonemize(text)``, ``sentences(text)``; ``FrontEnd`` is its
other name):
markup (markup.py, Markdown in markdown.py), cleaning (clean.py), normalization
(normalize.py), sentences and chunks (chunking.py) and the G2P of the nine Kokoro
languages (frontend.py, languages.py; English: g2p.py with tokenizer.py), on text that
keeps each character's span in the original (spans.py).
(``normalize`` is the module kokoro_ext.text.normalize, not re-exported: its function
of the same name would shadow it.)
"""

from .chunking import PAUSES, Piece, Word
from .frontend import G2P, Part
from .g2p import Phonemizer, phonemes_to_ids
from .languages import LANGUAGES, Language, language
from .normalize import Normalization
from .pipeline import FrontEnd, TextPipeline

__all__ = [
    "G2P", "LANGUAGES", "PAUSES", "FrontEnd", "Language", "Normalization", "Part",
    "Phonemizer", "Piece", "TextPipeline", "Word", "language", "phonemes_to_ids",
]  # fmt: skip
