"""Kokoro-82M text-to-speech compiled with Apache TVM for CPUs."""

from pathlib import Path

__version__ = "0.1.0"

#: The Kokoro-82M v1.0 model config shipped with the package (no model hub needed).
KOKORO_82M_CONFIG = Path(__file__).parent / "configs" / "kokoro-82m.json"


def __getattr__(name: str):
    # Synthesizer pulls in TVM and torch; import it only when asked for.
    if name == "Synthesizer":
        from kokoro_ext.runtime import Synthesizer

        return Synthesizer
    raise AttributeError(f"module 'kokoro_ext' has no attribute {name!r}")
