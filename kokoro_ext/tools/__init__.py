"""Comparison tools: the compiled stages against PyTorch, ONNX Runtime and kokoro itself.

They use both sides (kokoro_ext.run to run a build, kokoro_ext.build for the model); the
run side never imports them.
"""
