"""Text that knows where each of its characters came from in the original text.

``Spanned`` is a ``str`` whose every character carries the span (start, end) of the
original text it stands for: a character kept as written spans itself, the characters
a rewrite put in place of a stretch ("three dollars" for "$3") span that whole stretch,
and a character the front end added (the period after a Markdown heading, a space
between words) spans nothing: start == end, at the place it was added.

The front end's passes (kokoro_ext.text.pipeline) edit text with ``sub``, slicing,
``+``, ``join`` and ``strip``, which keep the spans; any other ``str`` operation gives a
plain ``str``, which is correct text without spans.  So a word's original text is read
off its characters at the end (``original``), without parsing the text again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

Replacement = Callable[[re.Match], str] | str


class Spanned(str):
    """A str with ``starts`` and ``ends``: each character's span in the original text.

    Text as written (``of`` and its slices) keeps only its offset in the original: the
    spans are counted out when an edit needs them, most text is never edited.
    """

    # the defaults: each instance sets only what differs (a str subclass has no slots)
    _starts: tuple[int, ...] | None = None
    _ends: tuple[int, ...] | None = None
    _offset = 0

    def __new__(cls, text: str, starts: tuple[int, ...], ends: tuple[int, ...]):
        self = str.__new__(cls, text)
        self._starts, self._ends = starts, ends
        return self

    @classmethod
    def of(cls, text: str, offset: int = 0) -> Spanned:
        """``text`` as it stands in the original at ``offset``: each character itself."""
        self = str.__new__(cls, text)
        if offset:
            self._offset = offset
        return self

    @property
    def starts(self) -> tuple[int, ...]:
        if self._starts is None:
            return tuple(range(self._offset, self._offset + len(self)))
        return self._starts

    @property
    def ends(self) -> tuple[int, ...]:
        if self._ends is None:
            return tuple(range(self._offset + 1, self._offset + len(self) + 1))
        return self._ends

    def __getitem__(self, key) -> Spanned:
        text = str.__getitem__(self, key)
        if key.__class__ is slice and key.step is None:  # the usual: a stretch, inlined
            new = str.__new__(Spanned, text)
            if self._starts is None:  # as written: so is any stretch of it
                start = self._offset + key.indices(len(self))[0]
                if start:
                    new._offset = start
            else:
                new._starts, new._ends = self._starts[key], self._ends[key]
            return new
        if isinstance(key, slice):  # with a step
            return Spanned(text, self.starts[key], self.ends[key])
        if self._starts is None:
            return Spanned.of(text, self._offset + range(len(self))[key])
        return Spanned(text, (self._starts[key],), (self._ends[key],))

    def stretches(self, bounds: Iterable[tuple[int, int]]) -> list[Spanned]:
        """``[self[start:stop] for start, stop in bounds]`` for bounds within the text
        (0 <= start <= stop <= len), without a ``__getitem__`` call for each."""
        plain = str.__str__(self)  # a str: sliced without this class's __getitem__
        new = str.__new__
        out: list[Spanned] = []
        if self._starts is None:  # as written: so is any stretch of it
            offset = self._offset
            for start, stop in bounds:
                piece = new(Spanned, plain[start:stop])
                if offset + start:
                    piece._offset = offset + start
                out.append(piece)
            return out
        starts, ends = self._starts, self._ends
        for start, stop in bounds:
            piece = new(Spanned, plain[start:stop])
            piece._starts, piece._ends = starts[start:stop], ends[start:stop]
            out.append(piece)
        return out

    def __add__(self, other: str) -> Spanned:
        return join((self, other))

    def __radd__(self, other: str) -> Spanned:
        return join((other, self))

    def strip(self, chars: str | None = None) -> Spanned:
        kept = len(str.strip(self, chars))
        if kept == len(self):
            return self
        start = len(self) - len(str.lstrip(self, chars))
        return self[start : start + kept]

    def lstrip(self, chars: str | None = None) -> Spanned:
        kept = len(str.lstrip(self, chars))
        return self if kept == len(self) else self[len(self) - kept :]

    def rstrip(self, chars: str | None = None) -> Spanned:
        kept = len(str.rstrip(self, chars))
        return self if kept == len(self) else self[:kept]

    def replace(self, old: str, new: str, count: int = -1) -> Spanned:
        if count != -1:
            return str.replace(self, old, new, count)
        return sub(re.escape(old), lambda m: new, self) if old in self else self

    def split(self, sep: str | None = None, maxsplit: int = -1) -> list[Spanned]:
        if maxsplit != -1:
            return str.split(self, sep, maxsplit)
        if sep is None:
            return [self[m.start() : m.end()] for m in re.finditer(r"\S+", self)]
        out, position = [], 0
        while (at := str.find(self, sep, position)) >= 0:
            out.append(self[position:at])
            position = at + len(sep)
        out.append(self[position:])
        return out

    def span(self) -> tuple[int, int] | None:
        """The stretch of the original all of the text comes from (None: added text)."""
        if self._starts is None:
            return (self._offset, self._offset + len(self)) if self else None
        found = [(s, e) for s, e in zip(self.starts, self.ends) if e > s]
        if not found:
            return None
        return min(s for s, _ in found), max(e for _, e in found)


def spanned(text: str) -> Spanned:
    """``text`` as a Spanned: itself if it is one, else added text (spanning nothing)."""
    return text if isinstance(text, Spanned) else Spanned(text, (0,) * len(text), (0,) * len(text))


def standing_for(text: str, written: str) -> str:
    """``text`` said for ``written``: spanning all of it (added text if it spans nothing)."""
    span = written.span() if isinstance(written, Spanned) else None
    if span is None:
        return text
    return Spanned(text, (span[0],) * len(text), (span[1],) * len(text))


def join(parts: Iterable[str], separator: str = "") -> Spanned | str:
    """``separator.join(parts)`` keeping the spans of the Spanned parts; a plain str part
    (or the separator) is added text, at the end of the part before it."""
    parts = list(parts)
    if separator:
        parts = [p for part in parts for p in (separator, part)][1:]
    if len(parts) > 1:
        parts = [p for p in parts if p]  # "" + text: nothing to add
    if len(parts) == 1 and isinstance(parts[0], Spanned):
        return parts[0]
    if not any(isinstance(p, Spanned) for p in parts):
        return "".join(parts)
    starts: list[int] = []
    ends: list[int] = []
    # added text sits where the Spanned text before it ends (or the one after it starts)
    at = next((p.starts[0] for p in parts if isinstance(p, Spanned) and p), 0)
    for part in parts:
        if isinstance(part, Spanned):
            starts += part.starts
            ends += part.ends
            if part:
                at = part.ends[-1]
        else:
            starts += (at,) * len(part)
            ends += (at,) * len(part)
    return Spanned("".join(parts), tuple(starts), tuple(ends))


def _replaced(new: str, text: Spanned, start: int, end: int) -> Spanned:
    """``new`` put in place of ``text[start:end]``: spanning that stretch as a whole."""
    if text._starts is None:  # as written
        first = text._offset + start
        last = text._offset + end if start < end else first
    elif start < end:
        first = min(text.starts[start:end])
        last = max(text.ends[start:end])
    else:  # inserted
        first = last = text.starts[start] if start < len(text) else (text.ends[-1] if text else 0)
    return Spanned(new, (first,) * len(new), (last,) * len(new))


def _expand(m: re.Match, template: str, text: Spanned) -> Spanned:
    # group references keep their characters' spans; the rest is written for the match
    pieces = []
    for i, piece in enumerate(re.split(r"\\(\d)", template)):
        if i % 2:
            pieces.append(text[m.start(int(piece)) : m.end(int(piece))] if m[int(piece)] else "")
        elif piece:
            pieces.append(_replaced(piece, text, m.start(), m.end()))
    return join(pieces) if pieces else ""


def sub(pattern: str | re.Pattern, replacement: Replacement, text: str, flags: int = 0) -> str:
    """``re.sub(pattern, replacement, text)``, keeping the spans of a Spanned ``text``:
    the text between matches keeps its own; a replacement the function returns as a
    Spanned keeps its spans, any other replacement spans the stretch it replaces.  A
    template replacement may refer to groups (``\\1``), which keep their spans."""
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)
    if not isinstance(text, Spanned):
        return regex.sub(replacement, text)
    first = regex.search(text)  # most patterns match nothing: no Python loop for them
    if first is None:
        return text
    pieces: list[str] = []
    position = 0
    for m in regex.finditer(text, first.start()):
        if callable(replacement):
            new = replacement(m)
            if new == m[0]:  # left as it was: its characters keep their own spans
                continue
            pieces.append(text[position : m.start()])
            if not isinstance(new, Spanned):
                new = _replaced(new, text, m.start(), m.end())
            elif m.end() > m.start() and any(e <= s for s, e in zip(new.starts, new.ends)):
                # text the replacement added (spanning nothing) stands for the match
                whole = _replaced(" ", text, m.start(), m.end())
                added = [e <= s for s, e in zip(new.starts, new.ends)]
                new = Spanned(
                    new,
                    tuple(whole.starts[0] if a else s for a, s in zip(added, new.starts)),
                    tuple(whole.ends[0] if a else e for a, e in zip(added, new.ends)),
                )
        else:
            pieces.append(text[position : m.start()])
            new = _expand(m, replacement, text)
        pieces.append(new)
        position = m.end()
    if not pieces:
        return text
    pieces.append(text[position:])
    return join(pieces)


def map_chars(text: str, function: Callable[[str], str]) -> str:
    """Each character replaced by ``function(character)`` (a str, maybe empty), which
    spans that character."""
    if not isinstance(text, Spanned):
        return "".join(function(c) for c in text)
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for char, start, end in zip(text, text.starts, text.ends):
        new = function(char)
        if new == char:
            out.append(char)
            starts.append(start)
            ends.append(end)
        elif new:
            out.append(new)
            starts += (start,) * len(new)
            ends += (end,) * len(new)
    return Spanned("".join(out), tuple(starts), tuple(ends))


def original(text: str, source: str) -> str | None:
    """What ``text`` stands for in ``source``: the stretches of ``source`` its characters
    span, in order (overlapping or touching ones once), with the characters the front end
    added (a heading's period) as they are; None for text with no span at all."""
    if not isinstance(text, Spanned):
        return None
    out: list[str] = []
    stretch: list[int] | None = None  # the open stretch of source [start, end)
    found = False
    for char, start, end in zip(text, text.starts, text.ends):
        if end <= start:
            if char.isspace():
                continue
            if stretch is not None:
                out.append(source[stretch[0] : stretch[1]])
                stretch = None
            out.append(char)
            continue
        found = True
        if stretch is not None and start <= stretch[1] and end >= stretch[0]:
            stretch = [min(stretch[0], start), max(stretch[1], end)]
            continue
        if stretch is not None:
            out.append(source[stretch[0] : stretch[1]])
        stretch = [start, end]
    if stretch is not None:
        out.append(source[stretch[0] : stretch[1]])
    return "".join(out) if found else None


def split(pattern: str | re.Pattern, text: str) -> list[str]:
    """``re.split(pattern, text)`` keeping spans; a pattern's groups are kept as with re."""
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
    if not isinstance(text, Spanned):
        return regex.split(text)
    out: list[str] = []
    position = 0
    for m in regex.finditer(text):
        out.append(text[position : m.start()])
        out += [text[m.start(g) : m.end(g)] if m[g] is not None else None
                for g in range(1, regex.groups + 1)]
        position = m.end()
    out.append(text[position:])
    return out


def group(m: re.Match, name: int | str = 0) -> str | None:
    """``m[name]``, keeping spans where the text matched is a Spanned (None if the group
    did not match)."""
    if m[name] is None:
        return None
    text = m.string
    return text[m.start(name) : m.end(name)] if isinstance(text, Spanned) else m[name]
