"""Markdown as a person reads it aloud: the words, not the markers.

``read(text)`` turns Markdown (as chat models write it) into the text a reader says,
as pieces ``(text, code)``; ``code`` pieces are read literally (inline code), the others
may still hold misaki's ``[word](/phonemes/)`` links, which kokoro_ext.text.markup reads.

Blocks, line by line:

* ATX headings (``# Title``) and setext headings (a line underlined with ``===`` or
  ``---``): the title as a sentence of its own (a period added if it has no end
  punctuation), with a paragraph's pause before and after;
* list items (``-``, ``*``, ``+``, ``1.``, ``1)``; task boxes ``[ ]``, ``[x]``): the
  item as a sentence, the marker unsaid (also the number of an ordered item);
* block quotes (``>``, nested): the quoted text;
* tables: the delimiter row (``|---|:--:|``) unsaid, every other row a sentence of its
  cells separated by commas ("Name, Age.");
* horizontal rules (``---``, ``***``, ``___``): a paragraph break;
* fenced code blocks (three or more backticks or tildes, to the closing fence or the
  end of the text; in a quote too): skipped, a paragraph break in their place (code is not read aloud; read it
  with ``markdown=False``);
* reference definitions (``[id]: https://...``): unsaid.

Inline, within a line: ``**x**``, ``*x*``, ``__x__``, ``_x_``, ``***x***`` and
``~~x~~`` say x (a marker opens only after a space or punctuation and closes only
before one, so ``2*3*4`` and ``snake_case_name`` keep theirs); inline code says its
content as written; ``[text](url)``, ``[text][id]`` and ``![alt](src)`` say the text
(alt text for an image, as screen readers do); ``<https://...>`` says the address;
a backslash escape (``\\*``) says the character.  A link whose target is misaki's
(``/phonemes/``, a stress number such as ``-1``, or ``#flags#``) is kept for
kokoro_ext.text.markup.  Indented code blocks and HTML are read as text.
"""

from __future__ import annotations

import functools
import re

from kokoro_ext.text.spans import group, join, split, sub

# Patterns are strings, compiled at their first use (re caches them): a text with no
# Markdown in it (most sentences) costs a start no compiling.
# Stand-ins for the spans the inline rules must not touch (code, kept links, escapes):
# characters of the Basic Multilingual Plane's private use area, outside the markup
# layer's placeholders (kokoro_ext.text.normalize.PLACEHOLDER_RANGE).
_HOLD_FIRST, _HOLD_LAST = 0xE000, 0xF8FF
_END_PUNCTUATION = ".!?…:;,"

# Characters without which a line holds no Markdown but a list item, rule or underline.
_MARKERS = frozenset("*_~`#>|[\\<")
_LINE_START = r"^[ \t]*[-+=\d]"

_FENCE = r" {0,3}(`{3,}|~{3,})(.*)"
_ATX = r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*"
_SETEXT = r" {0,3}(?:=+|-{2,})[ \t]*"
_RULE = r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*"
_QUOTE = r" {0,3}>[ \t]?"
_ITEM = r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?(?=\S)"
_DELIMITER_ROW = (
    r" {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)+\|?[ \t]*|[ \t]*\|[ \t]*:?-+:?[ \t]*\|[ \t]*"
)
_DEFINITION = (
    r" {0,3}\[(?!\^)[^\]]+\]:[ \t]*<?\S+>?(?:[ \t]+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?[ \t]*"
)

# Inline: what is held out of the emphasis rules, in the order the alternatives are tried.
_HELD = (
    r"(?P<escape>\\[!-/:-@\[-`{-~])"
    r"|(?<!`)(?P<ticks>`+)(?!`)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)"
    r"|(?P<image>!)?\[(?P<label>[^\]]*)\]"
    r"(?:\(\s*<?(?P<target>[^()\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)|\[(?P<ref>[^\]]*)\])"
    r"|<(?P<auto>(?:https?|ftp)://[^\s<>]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>"
)


def _emphasis(marker: str, run: int) -> re.Pattern[str]:
    # the content holds no run of the marker as long as the delimiters: each opening
    # looks only as far as the next such run, which keeps a line of strays linear
    m = re.escape(marker)
    inner = f"[^{m}]" if run == 1 else f"(?:[^{m}]|{m}{{1,{run - 1}}}(?!{m}))"
    return re.compile(
        rf"(?<![\w{m}]){m}{{{run}}}(?![\s{m}])((?:{inner})+?)(?<![\s{m}]){m}{{{run}}}(?![\w{m}])"
    )


@functools.cache
def _emphases(marker: str) -> list[re.Pattern[str]]:
    # compiled at the first line holding the marker: milliseconds a start need not spend
    return [_emphasis(marker, n) for n in ((2,) if marker == "~" else (3, 2, 1))]
# misaki's link features (misaki.en preprocess): phonemes, stress numbers, number flags
_MISAKI_FEATURE = r"/.*/|[+-]?\d+|[+-]?0\.5|#.+#"

Piece = tuple[str, bool]  # (text, read literally)


def read(text: str) -> list[Piece]:
    """``text`` (Markdown) as the pieces a reader says; see the module docstring."""
    if _MARKERS.isdisjoint(text) and not re.search(_LINE_START, text, re.MULTILINE):
        return [(text, False)] if text else []
    lines: list[list[Piece]] = []
    fence: str | None = None  # the open fence's characters
    table = False  # inside a table's body rows
    previous: str | None = None  # the last line if it was a paragraph line (a title?)
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        while quoted := re.match(_QUOTE, line):
            line = line[quoted.end():]
        if fence is not None:
            if re.fullmatch(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line):
                fence = None
            continue
        if (opened := re.fullmatch(_FENCE, line)) and not (
            opened[1][0] == "`" and "`" in opened[2]
        ):
            fence = opened[1]
            lines.append([])
            previous, table = None, False
            continue
        if table and "|" in line:
            lines.append(_sentence(_row(line)))
            continue
        table = False
        if previous is not None and "|" in line and re.fullmatch(_DELIMITER_ROW, line):
            lines[-1] = _sentence(_row(previous))  # the line before was the header row
            previous, table = None, True
            continue
        if previous is not None and re.fullmatch(_SETEXT, line):
            lines[-1:] = [[], _sentence(lines[-1]), []]
            previous = None
            continue
        previous = None
        if re.fullmatch(_RULE, line):
            lines.append([])
        elif heading := re.fullmatch(_ATX, line):
            lines += [[], _sentence(inline(group(heading, 2) or "")), []]
        elif item := re.match(_ITEM, line):
            lines.append(_sentence(inline(line[item.end():])))
        elif re.fullmatch(_DEFINITION, line):
            continue
        else:
            lines.append(inline(line))
            previous = line if line.strip() else None
    out: list[Piece] = []
    for i, pieces in enumerate(lines):
        if i:
            out.append(("\n", False))
        out += pieces
    return _merge(out)


def inline(text: str) -> list[Piece]:
    """One line's inline Markdown as pieces: markers removed, code literal."""
    if not text:
        return []
    if any(_HOLD_FIRST <= ord(c) <= _HOLD_LAST for c in text):
        return [(text, False)]  # the text uses the stand-ins itself: read it as it is
    held: list[Piece] = []

    def hold(match: re.Match) -> str:
        if match["escape"]:
            piece = (group(match, "escape")[1:], True)
        elif match["code"] is not None:
            # CommonMark strips one space each side of code that has them both
            code = group(match, "code")
            if len(code) > 2 and code[0] == code[-1] == " " and code.strip():
                code = code[1:-1]
            piece = (code, True)
        elif match["auto"]:
            piece = (group(match, "auto"), False)
        elif (
            match["target"] is not None and not match["image"]
            and re.fullmatch(_MISAKI_FEATURE, match["target"])
        ):
            piece = (group(match), False)  # [word](/phonemes/): kokoro_ext.text.markup's
        else:
            # a link or image says its text (code in it held too), emphasis read on
            return sub(_HELD, hold, group(match, "label"))
        return hold_piece(piece)

    def hold_piece(piece: Piece) -> str:
        if _HOLD_FIRST + len(held) > _HOLD_LAST:
            raise OverflowError  # more spans in one line than stand-ins
        held.append(piece)
        return chr(_HOLD_FIRST + len(held) - 1)

    try:
        text = sub(_HELD, hold, text)
    except OverflowError:
        return [(text, False)]
    for _ in range(3):  # ***a **b** c*** nests at most three deep
        changed = text
        for marker in "*_~":
            if marker in changed:
                for pattern in _emphases(marker):
                    changed = sub(pattern, r"\1", changed)
        if changed == text:
            break
        text = changed
    out: list[Piece] = []
    for part in split(f"([{chr(_HOLD_FIRST)}-{chr(_HOLD_LAST)}])", text):
        if len(part) == 1 and _HOLD_FIRST <= ord(part) <= _HOLD_LAST:
            out.append(held[ord(part) - _HOLD_FIRST])
        elif part:
            out.append((part, False))
    return out


def _row(line: str) -> list[Piece]:
    """A table row's cells as one line, separated by commas (escaped pipes stay)."""
    cells = split(r"(?<!\\)\|", line.strip())
    if cells and not cells[0].strip():
        cells = cells[1:]
    if cells and not cells[-1].strip():
        cells = cells[:-1]
    out: list[Piece] = []
    for cell in (c.strip() for c in cells):
        if not cell:
            continue
        if out:
            out.append((", ", False))
        out += inline(cell)
    return out


def _sentence(pieces: list[Piece]) -> list[Piece]:
    """Pieces that end a sentence: a period added unless they end with punctuation."""
    spoken = "".join(text for text, _ in pieces).rstrip()
    if not spoken:
        return pieces
    if spoken.rstrip(")\"'”’]")[-1:] in _END_PUNCTUATION:
        return pieces
    return [*pieces, (".", False)]


def _merge(pieces: list[Piece]) -> list[Piece]:
    runs: list[tuple[list[str], bool]] = []
    for text, code in pieces:
        if runs and runs[-1][1] == code:
            runs[-1][0].append(text)
        else:
            runs.append(([text], code))
    return [(join(texts), code) for texts, code in runs]
