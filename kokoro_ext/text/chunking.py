"""Long text in pieces one call takes: sentences, then clauses, words, phonemes.

One call of the compiled stages takes at most the build's token limit (and, once the
durations are known, its frame limit), so a document is synthesized in chunks:

1. ``split_sentences`` cuts the text after sentence and clause ends (``. ! ? … ; :``,
   keeping the punctuation and skipping common abbreviations such as "Dr.") and at line
   breaks, lazily, so that a long document is phonemized one sentence at a time.
2. ``group_words`` turns a sentence's G2P tokens into ``Word``s: runs of tokens that end
   at whitespace or clause punctuation, the only places a chunk may end (a chunk never
   ends between "Jones" and the "," glued to it).
3. ``pack`` fills chunks of at most ``limit`` phonemes with whole words, preferring to
   break after clause punctuation, then at a space; only a single word longer than a
   chunk is cut, at a phoneme boundary (a stress mark stays with its vowel, a length
   mark with its sound).  ``pack_evenly`` makes as many chunks, as even as they can be
   (what the Synthesizer uses: no sentence ends in a chunk of a word or two).
4. ``split_in_two`` halves a chunk whose audio turned out longer than the frame limit,
   at the word boundary nearest its middle.

Every chunk records how it ends (a ``Break``); the chunk after it starts with the pause
``PAUSES`` gives for that break.  Everything here is pure: no G2P, no TVM.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from kokoro_ext.text.clean import drop_other_scripts, is_latin_or_common  # noqa: F401
from kokoro_ext.text.spans import group

#: How a chunk ends, from the strongest break to the weakest.
Break = Literal["paragraph", "sentence", "clause", "word", "phoneme"]

#: Seconds of silence put between a chunk that ends with this break and the next chunk.
#: The model already lengthens the final sound before punctuation; these add the silence
#: a reader leaves: most between paragraphs (a blank line), less after a sentence, little
#: after a clause (, ; : — …), a breath's worth where a long clause had to be cut at a
#: space, and none where a single over-long word was cut between two phonemes.
PAUSES: dict[str, float] = {
    "paragraph": 0.6,
    "sentence": 0.3,
    "clause": 0.15,
    "word": 0.05,
    "phoneme": 0.0,
}



def pause_after(end: Break | float) -> float:
    """Seconds of silence after a chunk that ends with ``end``: a Break, or the seconds
    of an explicit pause (SSML ``<break time>``, kokoro_ext.text.markup)."""
    return PAUSES[end] if isinstance(end, str) else float(end)


SENTENCE_END = ".!?…"
CLAUSE_END = ",;:—…"
# Punctuation that ends a sentence but leaves it open ("Note: ...") pauses like a clause.
_CLAUSE_SPLIT = ";:"
# Short words whose period does not end a sentence.
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt vs etc fig no vol ca approx dept inc ltd co e.g i.e a.m "
    "p.m u.s".split()
)
_SENTENCE = re.compile(
    r"""(?P<body>.*?(?:
            [.!?…;:]+[)"'”’\]]*(?=\s|$)   # punctuation then closing quotes, before a space
          | (?=\n)                         # or a line break
        ))
        (?P<gap>\s*)""",
    re.VERBOSE | re.DOTALL,
)
#: Sentences longer than this many characters are cut (at a clause or space) before G2P.
MAX_SENTENCE = 1000
_PHONEME = re.compile(r"[ˈˌ]*.[ːʰʲ\u0303]*", re.DOTALL)


@dataclass(frozen=True)
class Sentence:
    """A piece of text to phonemize on its own and how it ends."""

    text: str
    end: Break


@dataclass(frozen=True)
class Word:
    """A stretch of text and its phonemes, each with the whitespace that follows it."""

    text: str
    phonemes: str

    @property
    def end(self) -> Break:
        """The break after this word: a clause end if it ends with clause punctuation."""
        return "clause" if self.phonemes.rstrip()[-1:] in CLAUSE_END else "word"


@dataclass(frozen=True)
class Piece:
    """A chunk's words and how it ends."""

    words: tuple[Word, ...]
    end: Break | float  # seconds: an explicit pause (kokoro_ext.text.markup)

    @property
    def text(self) -> str:
        return "".join(w.text for w in self.words).strip()

    @property
    def phonemes(self) -> str:
        return "".join(w.phonemes for w in self.words).strip()


def split_sentences(text: str) -> Iterator[Sentence]:
    """Sentences of ``text`` (punctuation kept, whitespace stripped), lazily, in order.

    A blank line ends a paragraph, a single line break a sentence; ``;`` and ``:`` end a
    clause.  A period after a one-letter word or a known abbreviation ("Dr.", "e.g.")
    does not end a sentence.  A sentence longer than ``MAX_SENTENCE`` characters is cut
    at its last clause punctuation or space before that length, so that G2P stays lazy
    on text without punctuation.
    """
    pending = ""
    position = 0
    while position < len(text):
        match = _SENTENCE.match(text, position)
        start = position
        if match is None or match.end() == position:  # no end mark left: the rest
            body, gap, position = text[position:], "", len(text)
        else:
            body, gap, position = group(match, "body"), match["gap"], match.end()
        joined = body.endswith(".") and _is_abbreviation(body) and "\n" not in gap
        if joined and position < len(text):
            pending += text[start:position]  # the body and the gap after it
            continue
        sentence = (pending + body if pending else body).strip()
        pending = ""
        if sentence:
            yield from _cap(sentence, _sentence_end(sentence, gap))
    if pending.strip():
        yield from _cap(pending.strip(), "sentence")


def _cap(sentence: str, end: Break) -> Iterator[Sentence]:
    # A "sentence" of a whole document without punctuation would be phonemized at once.
    while len(sentence) > MAX_SENTENCE:
        head = sentence[:MAX_SENTENCE]
        clause = max(head.rfind(f"{mark} ") for mark in CLAUSE_END)
        space = head.rfind(" ")
        cut, kind = (
            (clause + 1, "clause") if clause > 0 else (space, "word") if space > 0 else
            (MAX_SENTENCE, "phoneme")
        )
        yield Sentence(sentence[:cut].strip(), kind)
        sentence = sentence[cut:].strip()
    if sentence:
        yield Sentence(sentence, end)


def _is_abbreviation(body: str) -> bool:
    word = body.rsplit(None, 1)[-1].lower().rstrip(".").lstrip("(\"'“‘")
    return len(word) == 1 and word.isalpha() or word in ABBREVIATIONS


def _sentence_end(sentence: str, gap: str) -> Break:
    if gap.count("\n") >= 2:
        return "paragraph"
    mark = str.rstrip(sentence, ")\"'”’]")[-1:]
    return "clause" if mark in _CLAUSE_SPLIT else "sentence"


def group_words(tokens: Sequence[tuple[str, str, str]]) -> list[Word]:
    """G2P tokens (text, phonemes, whitespace after) -> Words that may end a chunk.

    Tokens glued together without whitespace ("“", "Quoted", "”") form one Word unless
    one of them ends with clause punctuation ("Jones", "—" | "and").
    """
    return [Word(text, phonemes) for text, phonemes in word_groups(tokens)]


def word_groups(tokens: Sequence[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """``group_words`` as (text, phonemes) pairs (for a caller that makes its own Words)."""
    groups: list[tuple[str, str]] = []
    text = phonemes = ""
    last = len(tokens) - 1
    for i, (token_text, token_phonemes, whitespace) in enumerate(tokens):
        text += token_text + whitespace
        phonemes += token_phonemes + whitespace
        if whitespace or i == last or token_phonemes[-1:] in CLAUSE_END:
            if text.strip() or phonemes.strip():
                groups.append((text, phonemes))
            text = phonemes = ""
    return groups


def words_of_phonemes(phonemes: str) -> list[Word]:
    """A phoneme string's words (split at spaces), text and phonemes both the phonemes."""
    return [Word(w, w) for w in re.findall(r"\S+\s*", phonemes)]


def size(words: Sequence[Word]) -> int:
    """Phoneme symbols the words take in a chunk (surrounding whitespace excluded)."""
    return len("".join(w.phonemes for w in words).strip())


def pack(words: Sequence[Word], limit: int, end: Break | float = "sentence") -> list[Piece]:
    """Words -> chunks of at most ``limit`` phoneme symbols, in order, nothing lost.

    A chunk ends after the last clause punctuation that fits if that keeps it at least a
    third of ``limit`` long (a short clause pause sounds better than a cut at a space),
    else after the last word that fits.  A word longer than ``limit`` on its own is cut
    at phoneme boundaries; its text goes with its first piece.  The last chunk ends with
    ``end``.
    """
    if limit < 1:
        raise ValueError(f"chunk limit must be at least 1 phoneme, got {limit}")
    pieces: list[Piece] = []
    current: list[Word] = []
    joined = ""  # the phonemes of current, kept as it grows: size() of it and a word
    queue = deque(words)
    while queue:
        word = queue.popleft()
        if len((joined + word.phonemes).strip()) <= limit:
            current.append(word)
            joined += word.phonemes
            continue
        if not current:  # a single word longer than a chunk
            parts = _cut_word(word, limit)
            pieces += [Piece((p,), "phoneme") for p in parts[:-1]]
            current = [parts[-1]]
            joined = parts[-1].phonemes
            continue
        cut = _clause_cut(current, limit)
        pieces.append(Piece(tuple(current[:cut]), current[cut - 1].end))
        current = current[cut:]
        joined = "".join(w.phonemes for w in current)
        queue.appendleft(word)
    if current:
        pieces.append(Piece(tuple(current), end))
    return pieces


def pack_evenly(words: Sequence[Word], limit: int, end: Break | float = "sentence") -> list[Piece]:
    """``pack`` into as many chunks as ``pack(words, limit)`` makes, as even as they can be.

    Greedy packing fills each chunk to ``limit`` and leaves the rest to the last one: a
    sentence a little over the limit would end in a chunk of a word or two, which costs a
    whole chunk's fixed work (its lead-in and final silence) and sounds cut off.  This
    packs with the smallest limit that still gives that many chunks (found by bisection;
    the cuts prefer clause punctuation as ``pack``'s do).  Where ``pack`` has to cut a word
    between phonemes, its chunks are kept as they are.
    """
    pieces = pack(words, limit, end)
    if len(pieces) < 2 or any(p.end == "phoneme" for p in pieces):
        return pieces
    low, high = max(1, size(words) // len(pieces)), limit  # pack(words, high) has len(pieces)
    best = pieces
    while low < high:
        middle = (low + high) // 2
        candidate = pack(words, middle, end)
        if len(candidate) <= len(pieces) and all(p.end != "phoneme" for p in candidate):
            best, high = candidate, middle
        else:
            low = middle + 1
    return best


def first_clause(words: Sequence[Word], limit: int) -> int:
    """How many of ``words`` make up their first clause (up to the first clause
    punctuation), where it fits in ``limit`` phonemes and leaves words after it; else 0.

    A chunk cut short for its time to first audio ends there rather than wherever its
    limit falls: a reply's opening clause ("Sure,", "Sorry,") is said as a phrase of its
    own, and the chunk's audio ends in the pause the model gives the comma."""
    for cut, word in enumerate(words[:-1], 1):
        if size(words[:cut]) > limit:
            return 0
        if word.end == "clause":
            return cut
    return 0


def _clause_cut(words: Sequence[Word], limit: int) -> int:
    for cut in range(len(words), 0, -1):
        if words[cut - 1].end == "clause" and size(words[:cut]) * 3 >= limit:
            return cut
    return len(words)


def _units(phonemes: str) -> list[str]:
    return _PHONEME.findall(phonemes)


def _cut_word(word: Word, limit: int) -> list[Word]:
    units = _units(word.phonemes.strip())
    trailing = word.phonemes[len(word.phonemes.rstrip()) :]
    parts, current = [], ""
    for unit in units:
        if current and len(current) + len(unit) > limit:
            parts.append(current)
            current = ""
        current += unit
    parts.append(current + trailing)
    return [Word(word.text if i == 0 else "", p) for i, p in enumerate(parts)]


def split_in_two(piece: Piece) -> tuple[Piece, Piece] | None:
    """A chunk halved at the word boundary nearest its middle (by phonemes).

    A single word is halved at a phoneme boundary; None for a single phoneme.
    """
    words = piece.words
    if len(words) == 1:
        word = words[0]
        units = _units(word.phonemes.strip())
        if len(units) < 2:
            return None
        half = len(units) // 2
        trailing = word.phonemes[len(word.phonemes.rstrip()) :]
        left = Word(word.text, "".join(units[:half]))
        right = Word("", "".join(units[half:]) + trailing)
        return Piece((left,), "phoneme"), Piece((right,), piece.end)
    total = size(words)
    cut = min(range(1, len(words)), key=lambda c: abs(2 * size(words[:c]) - total))
    return Piece(words[:cut], words[cut - 1].end), Piece(words[cut:], piece.end)
