"""The path a text takes from ``Synthesizer.stream`` through the text side: which modules
it enters, in order, traced with sys.setprofile.

A module is *entered* when a function of it is called (or a generator of it resumed)
from another module; returns are not entries, nor building a dataclass's value.  Traced are the synthesizer, the text
side's modules and kokoro_ext.run.timestamps; not kokoro_ext.text.spans (the str type
the text is made of, whose methods every pass calls) nor kokoro_ext.text.languages (the
table of languages: no text goes through it).

    python tests/text_path.py ARTIFACTS [TEXT]   # prints the path, chunk by chunk
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

SYNTHESIZER = "kokoro_ext.run.synthesizer"
PIPELINE = "kokoro_ext.text.pipeline"
UNTRACED = {"kokoro_ext.text.spans", "kokoro_ext.text.languages", "kokoro_ext.text"}
#: A text with markup, a number, a Markdown list and a terminal escape: most passes act.
TEXT = ("# Notes\n\n* **Pay** $3.50 to Dr. Smith, \x1b[1mnow\x1b[0m.\n"
        "* Then <say-as> is not SSML here; call 555-0100 on 2024-03-01.\n\nThanks!")


def _traced(module: str | None) -> bool:
    return bool(module) and module not in UNTRACED and (
        module.startswith("kokoro_ext.text") or module in (SYNTHESIZER, "kokoro_ext.run.timestamps")
    )


@dataclass
class Entry:
    """``callee`` entered from ``caller`` (module names), by calling ``function``."""

    caller: str
    callee: str
    function: str
    stack: tuple[str, ...]  # the traced modules on the stack below it, outermost first


@dataclass
class Path:
    """The entries, in order, cut where the stream yielded a chunk: ``steps[0]`` is the
    call of ``stream()``, ``steps[i]`` what the chunk ``i - 1`` took, the last one what
    ended the stream."""

    steps: list[list[Entry]] = field(default_factory=lambda: [[]])

    def _profile(self, frame, event, arg) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__")
        # not a dataclass's generated __init__ (made where a value is built, not entered)
        if not _traced(callee) or frame.f_code.co_filename == "<string>":
            return
        stack, caller, back = [], None, frame.f_back
        while back is not None:
            module = back.f_globals.get("__name__")
            if _traced(module):
                caller = caller or module
                if not stack or stack[0] != module:
                    stack.insert(0, module)
            back = back.f_back
        if caller is not None and caller != callee:
            self.steps[-1].append(Entry(caller, callee, frame.f_code.co_name, tuple(stack)))

    def follow(self, chunks) -> list:
        """Consume the iterator ``chunks`` (Synthesizer.stream's) while tracing: a step
        for each chunk, and one for the end of the stream."""
        out = []
        self.steps.append([])
        sys.setprofile(self._profile)
        try:
            for chunk in chunks:
                out.append(chunk)
                self.steps.append([])
        finally:
            sys.setprofile(None)
        return out

    def from_synthesizer(self, step: list[Entry]) -> list[str]:
        """The modules the synthesizer entered in a step, in order."""
        return [e.callee for e in step if e.caller == SYNTHESIZER]

    def reentries(self) -> list[Entry]:
        """Entries into a module already on the stack below another module (A -> B -> A):
        the text going back to a module it had left for another."""
        return [e for s in self.steps for e in s if e.callee in e.stack]

    def lines(self) -> list[str]:
        out = []
        for i, step in enumerate(self.steps):
            calls = [f"{_short(e.caller)} -> {_short(e.callee)}.{e.function}" for e in step]
            out.append(f"step {i}: " + (", ".join(calls) or "-"))
        return out


def _short(module: str) -> str:
    return module.replace("kokoro_ext.", "")


def trace(synth, text: str = TEXT, **options) -> tuple[Path, list]:
    """The path of ``text`` through ``synth.stream(text, **options)``, and its chunks."""
    path = Path()
    sys.setprofile(path._profile)
    try:
        stream = synth.stream(text, **options)
    finally:
        sys.setprofile(None)
    return path, path.follow(stream)


if __name__ == "__main__":
    from kokoro_ext.run.synthesizer import Synthesizer

    path, chunks = trace(Synthesizer(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else TEXT)
    print("\n".join(path.lines()))
    print(f"{len(chunks)} chunks; re-entries (caller -> callee, stack below):")
    for entry in path.reentries():
        print(f"  {_short(entry.caller)} -> {_short(entry.callee)}.{entry.function}: "
              + " > ".join(map(_short, entry.stack)))
