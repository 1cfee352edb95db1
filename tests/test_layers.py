"""The two layers and the acyclic import graph: import-linter's contracts (pyproject.toml),
and the run side at work in a process where torch cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    # lint-imports of the environment; it reads [tool.importlinter] in pyproject.toml
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "6 kept, 0 broken" in report, report


def test_the_acyclic_contract_sees_a_cycle_through_an_import_inside_a_function(tmp_path):
    # the contract pyproject.toml holds, over a package whose one cycle is an import made
    # inside a function (as kokoro_ext's were): it must be reported broken
    package = tmp_path / "toy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from toy.b import B\n\nA = 1\n")
    (package / "b.py").write_text("B = 2\n\n\ndef late():\n    from toy import a\n\n    return a.A\n")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_packages =\n    toy\n\n"
        "[importlinter:contract:acyclic]\nname = acyclic\ntype = acyclic_siblings\n"
        "ancestors =\n    toy\n"
    )
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    report = result.stdout + result.stderr
    assert result.returncode != 0, report
    assert "0 kept, 1 broken" in report and "No cycles are allowed in toy" in report, report


def test_the_run_side_synthesizes_without_torch(build_dir, tmp_path):
    directory, _ = build_dir
    wav = tmp_path / "hello.wav"
    # torch blocked before anything imports it: tvm_ffi's optional `import torch` and
    # anything of the build side would fail.  Phonemes, not text: in this (development)
    # environment spaCy loads the entry points of spacy-curated-transformers (which kokoro's
    # misaki[en] brings), and that imports torch; the runtime-only install has no such package.
    code = f"""
import sys
sys.modules["torch"] = None
from kokoro_ext import Synthesizer
from kokoro_ext.run.wav import write_wav
synth = Synthesizer({str(directory)!r})
audio = synth.synthesize_phonemes("həlˈO wˈɜɹld.").audio
assert audio.size > 0 and abs(audio).max() > 0, audio
write_wav({str(wav)!r}, audio)
leaked = sorted(m for m in sys.modules if m.startswith(("kokoro_ext.build", "kokoro_ext.tools")))
print("leaked", leaked)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "leaked []" in result.stdout, result.stdout
    assert wav.stat().st_size > 44


def test_say_speaks_without_the_tvm_package(build_dir, tmp_path):
    directory, _ = build_dir
    wav = tmp_path / "hello.wav"
    code = f"""
import runpy, sys
sys.argv = ["say", "Hello.", "-o", {str(wav)!r}, "--artifacts", {str(directory)!r}]
try:
    runpy.run_module("kokoro_ext.say", run_name="__main__")
except SystemExit as done:
    # the run side reaches TVM's runtime library through tvm-ffi: not even the tvm
    # package (whose runtime-only import costs a libbacktrace start-up) is imported
    print("tvm package", "tvm" in sys.modules, "exit", done.code)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert "tvm package False exit 0" in result.stdout, result.stdout + result.stderr
    assert wav.stat().st_size > 44
    # nothing from TVM's log: a library whose executable a VM ran before its export
    # warned "Scope Loaded" once per constant at every load
    assert "Warning" not in result.stderr, result.stderr
