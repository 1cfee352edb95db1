"""A speech server for a kokoro-tvm-ext build (run side only: no torch): OpenAI's speech
API, and Kokoro-FastAPI's endpoints, fields and voice names, so that its clients switch
by changing the host.

    python -m kokoro_ext.serve --artifacts artifacts --port 8880

``app`` (the Starlette application and its request validation), ``compat`` (Kokoro-FastAPI's
names, defaults and files), ``scheduler`` (the one worker thread that interleaves
requests chunk by chunk, with a bounded queue) and ``audio`` (streaming encoders for wav,
pcm, flac, mp3, opus and aac).
"""

from kokoro_ext.serve.app import MODELS, OPENAI_VOICES, ServerOptions, create_app

__all__ = ["MODELS", "OPENAI_VOICES", "ServerOptions", "create_app"]
