"""The build side: PyTorch model, export, TVM frontend and schedules, compilation.

``python -m kokoro_ext.build --target llvm`` (kokoro_ext.build.cli) writes an artifacts
directory that the run side (kokoro_ext.run) loads.  This side may import everything
(torch, kokoro, TVM's compiler); the run side never imports it (see the import-linter
contracts in pyproject.toml).
"""
