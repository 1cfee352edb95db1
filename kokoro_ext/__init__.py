"""Kokoro-82M text-to-speech compiled with Apache TVM for CPUs.

Two layers: ``kokoro_ext.run`` (with ``kokoro_ext.text``) loads a build and speaks with
numpy and the TVM runtime only; ``kokoro_ext.build`` compiles one (torch, TVM's
compiler); ``kokoro_ext.tools`` compares the two.  The run side never imports the others
(import-linter contracts in pyproject.toml, tests/test_layers.py).
"""

from pathlib import Path

__version__ = "0.1.0"

#: The Kokoro-82M v1.0 model config shipped with the package (no model hub needed).
KOKORO_82M_CONFIG = Path(__file__).parent / "configs" / "kokoro-82m.json"


def __getattr__(name: str):
    # Synthesizer pulls in the TVM runtime and the G2P; import it only when asked for.
    if name == "Synthesizer":
        from kokoro_ext.run.synthesizer import Synthesizer

        return Synthesizer
    raise AttributeError(f"module 'kokoro_ext' has no attribute {name!r}")
