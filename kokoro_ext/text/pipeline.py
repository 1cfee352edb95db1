"""The text front end as one ordered list of passes: text in one Kokoro language ->
chunks of phonemes one call of the compiled stages takes.  This is the one place that
decides which passes run, in which order, for which language.

Each pass is a function from a typed document to the next (frozen dataclasses below).
Every piece of text in them is a kokoro_ext.text.spans.Spanned: each character knows
the span of the original text it came from, from the first pass to the last, so that a
word's original text (timestamps, captions) is read off it, not guessed.

  terminal escapes   clean.strip_terminal: ANSI colours, titles, overstrike  (Source)
  markup             markup.segments: SSML if the text starts with <speak>, else
                     Markdown (markdown.read) unless markdown=False; misaki's
                     [word](/phonemes/) links                              -> Marked
  say-as             frontend.say_as: <say-as> as words
  invisible          clean.invisible: format characters removed; control characters
                     removed, a separator (NUL, ...) between words a word break
  compatibility      clean.compatibility: NFKC, line breaks     (not ja, zh: SKIP_NFKC)
  look-alikes        clean.unconfuse: letters of another script in the word's own
  normalization      normalize.spell, per language (SPELL): numbers, dates, money, ...;
                     normalize.Normalization switches its rules off, a kind at a time
  symbols            clean.drop_symbols: no pronunciation, dropped with a warning
  sentence ends      the marks a language ends sentences with (SENTENCE_ENDS: hi, ja, zh)
  other scripts      clean.drop_other_scripts (Latin-script languages: LATIN)
  sentences          frontend.carrier and frontend.parts, lazily       -> Sentences
  G2P                frontend.G2P.words, one sentence at a time        -> Spoken
  chunks             chunking.pack_evenly within the chunk limit       -> Chunks
  timing             timing.token_words, with a vocab (Chunking.vocab): each chunk's
                     ids, pause and the tokens and original text of its words; chunks
                     with nothing to say left out

The cleaning passes (invisible to other scripts) rewrite each Text segment; markup other
than text (inline phonemes, breaks) passes through them untouched.  They run as listed,
one after the other (``text_passes``: ``passes`` names them).  Markup is read
before them: NFKC would make Markdown markers of full-width characters ("＊").

A synthesizer takes the chunks and needs nothing more of the text side: the one way
back is ``Chunks.halve``, for a chunk whose audio the text stage found over the frame
limit (the durations that tell come from the model's text stage, after the chunk).
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial

from kokoro_ext.text import clean, markup, normalize
from kokoro_ext.text.chunking import (
    Break, Piece, Word, first_clause, pack_evenly, pause_after, split_in_two,
)  # fmt: skip
from kokoro_ext.text.frontend import G2P, Part, carrier, parts, say_as
from kokoro_ext.text.g2p import phonemes_to_ids
from kokoro_ext.text.markup import SayAs, Segment, Text
from kokoro_ext.text.normalize import EVERY_RULE, Normalization
from kokoro_ext.text.spans import Spanned, sub
from kokoro_ext.text.timing import OriginalWords, Timing, token_words


@dataclass(frozen=True)
class Source:
    """The text as given: every character spans itself."""

    original: str
    text: str  # a Spanned of ``original``
    markdown: bool = True


@dataclass(frozen=True)
class Marked:
    """The text as segments: text, inline phonemes, breaks, say-as (kokoro_ext.text.markup)."""

    original: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Sentences:
    """Sentences (Parts) to phonemize one at a time, lazily."""

    original: str
    parts: Iterator[Part]


@dataclass(frozen=True)
class Sentence:
    """A sentence and its Words with their phonemes."""

    part: Part
    words: tuple[Word, ...]

    @property
    def end(self) -> Break | float:
        return self.part.end


@dataclass(frozen=True)
class Spoken:
    """Sentences with their Words, lazily (the G2P runs as they are taken)."""

    original: str
    sentences: Iterator[Sentence]


@dataclass(frozen=True)
class TextChunk:
    """A chunk's words, how it ends, and the index of the sentence it comes from; with a
    vocab (Chunking.vocab), all a synthesizer needs as plain values: the text, phonemes
    and token ids, the pause before it (seconds) and its words' tokens (``timing``)."""

    piece: Piece
    sentence: int
    text: str = ""
    phonemes: str = ""
    ids: tuple[int, ...] = ()
    pause: float = 0.0
    timing: Timing | None = None
    reported: tuple = ()  # OriginalWords.state() before it: to report it again halved

    @property
    def words(self) -> tuple[Word, ...]:
        return self.piece.words

    @property
    def end(self) -> Break | float:
        return self.piece.end


@dataclass(frozen=True)
class Chunks:
    """The chunks, lazily; ``halve`` cuts one in two (its audio was over the frame limit,
    which only the text stage's durations tell): the halves with something to say, None
    for a single phoneme."""

    original: str
    chunks: Iterator[TextChunk]
    halve: Callable[[TextChunk], tuple[TextChunk, ...] | None] = lambda chunk: None


@dataclass
class Progress:
    """What the consumer of the chunks did with them so far (the chunk limit may depend
    on it): chunks said and how the last one ended (a Break, seconds, None: none yet)."""

    said: int = 0
    last_end: Break | float | None = None


@dataclass(frozen=True)
class Chunking:
    """How the chunks pass cuts: ``limit`` phonemes a chunk, or ``limit(index)`` for the
    chunk of that index, asked when the chunk is cut; within [1, ``build_limit``].  The
    stream's first chunk, where its limit is below ``build_limit``, ends at the first
    clause if that fits (time to first audio)."""

    limit: int | Callable[[int], int]
    build_limit: int
    progress: Progress = field(default_factory=Progress)
    #: the model's symbols and those that are silent (pauses, intonation): given, the
    #: chunks carry their ids, pauses and timing, and chunks with nothing to say are left out
    vocab: Mapping[str, int] | None = None
    silent: Collection[str] = frozenset()


# --- the passes --------------------------------------------------------------------------

TextFunction = Callable[[str], str]


def terminal_escapes(doc: Source) -> Source:
    return Source(doc.original, clean.strip_terminal(doc.text), doc.markdown)


def parse_markup(doc: Source) -> Marked:
    segments = markup.segments(doc.text, doc.markdown)
    return Marked(doc.original, tuple(segments))


def on_text(function: TextFunction) -> Callable[[Marked], Marked]:
    """A pass applying ``function`` to the text of each Text segment."""

    def apply(doc: Marked) -> Marked:
        return Marked(doc.original, tuple(map(_on_segment, doc.segments)))

    def _on_segment(segment: Segment) -> Segment:
        if not isinstance(segment, Text):
            return segment
        text = function(segment.text)
        return segment if text is segment.text else Text(text)

    named = getattr(function, "func", function)  # a partial: its function's name
    apply.__name__ = apply.__qualname__ = getattr(named, "__name__", "text_pass")
    apply.function = function
    return apply


def read_say_as(code: str) -> Callable[[Marked], Marked]:
    def say_as_pass(doc: Marked) -> Marked:
        if not any(isinstance(s, SayAs) for s in doc.segments):
            return doc
        return Marked(doc.original, tuple(
            Text(say_as(s, code)) if isinstance(s, SayAs) else s for s in doc.segments
        ))  # fmt: skip

    return say_as_pass


def _sentence_ends(pattern: str) -> TextFunction:
    # a line break after a mark split_sentences does not know (it knows ". " and "\n")
    def sentence_ends(text: str) -> str:
        return sub(pattern, "\\1\n", text)

    return sentence_ends


#: Languages whose G2P maps full-width forms itself: no NFKC (misaki ja, zh).
SKIP_NFKC = frozenset("jz")
#: Normalization per language (normalize.spell): the other languages' G2Ps read digits.
SPELL: dict[str, TextFunction] = {code: partial(normalize.spell, lang=code) for code in "abefip"}
#: Sentence-end marks per language beyond split_sentences' Latin punctuation.
SENTENCE_ENDS: dict[str, TextFunction] = {
    "h": _sentence_ends(r"([।॥])(?!\n)"),  # the danda
    "j": _sentence_ends(r"([。！？!?])(?!\n)"),
    "z": _sentence_ends(r"([。！？!?])(?!\n)"),
}
#: Languages written in Latin letters: letters of other scripts are dropped (with a
#: warning) rather than spelled out by the G2P in a language they are not.
LATIN = frozenset("abefip")


def _spell(code: str, normalization: Normalization) -> list[TextFunction]:
    """The normalization pass of ``code`` with ``normalization``'s rules, if any."""
    if code not in SPELL or not normalization.enabled:
        return []
    if normalization == EVERY_RULE:
        return [SPELL[code]]
    return [partial(normalize.spell, lang=code, normalization=normalization)]


@functools.cache
def text_passes(code: str, normalization: Normalization = EVERY_RULE) -> tuple[Callable[[Marked], Marked], ...]:
    """The passes from markup to sentences for the language ``code``, in order, with
    the normalization rules ``normalization`` keeps (none: no normalization pass)."""
    return (
        read_say_as(code),
        on_text(partial(clean.invisible, lang=code)),
        *([] if code in SKIP_NFKC else [on_text(clean.compatibility)]),
        on_text(clean.unconfuse),
        *map(on_text, _spell(code, normalization)),
        on_text(partial(clean.drop_symbols, lang=code)),
        *([on_text(SENTENCE_ENDS[code])] if code in SENTENCE_ENDS else []),
        *([on_text(clean.drop_other_scripts)] if code in LATIN else []),
    )


def split_sentences(code: str) -> Callable[[Marked], Sentences]:
    def sentences_pass(doc: Marked) -> Sentences:
        text, table = carrier(doc.segments, code)
        return Sentences(doc.original, parts(text, table))

    return sentences_pass


def g2p(language: G2P) -> Callable[[Sentences], Spoken]:
    def g2p_pass(doc: Sentences) -> Spoken:
        sentences = (Sentence(part, tuple(language.words(part))) for part in doc.parts)
        return Spoken(doc.original, sentences)

    return g2p_pass


def chunks(chunking: Chunking) -> Callable[[Spoken], Chunks]:
    def chunks_pass(doc: Spoken) -> Chunks:
        cut = _chunks(doc.sentences, chunking)
        if chunking.vocab is None:
            return Chunks(doc.original, cut)
        said = _Said(chunking, OriginalWords(doc.original))
        return Chunks(doc.original, said.chunks(cut), said.halve)

    return chunks_pass


def _chunks(sentences: Iterator[Sentence], chunking: Chunking) -> Iterator[TextChunk]:
    progress = chunking.progress
    for number, sentence in enumerate(sentences):
        words = list(sentence.words)
        packed: deque[Piece] = deque()  # the sentence's chunks to come, cut for `size`
        size: int | None = None
        while packed or size is None:
            wanted = chunking.limit(progress.said) if callable(chunking.limit) else chunking.limit
            wanted = max(1, min(int(wanted), chunking.build_limit))
            # pack (again, if the limit changed) what is left of the sentence, but never
            # inside a word that was cut between two phonemes
            if size is None or (wanted != size and progress.last_end != "phoneme"):
                rest = words if size is None else [w for p in packed for w in p.words]
                packed = deque(_pack(rest, wanted, sentence.end, progress.said == 0,
                                     chunking.build_limit))
                size = wanted
                if not packed:
                    break
            yield TextChunk(packed.popleft(), number)


class _Said:
    """The timing pass: each chunk with what its synthesis needs, in the order said (the
    pause before a chunk follows how the one said before it ended; a stretch of the
    original split over two chunks is reported by the first)."""

    def __init__(self, chunking: Chunking, originals: OriginalWords):
        self.vocab, self.silent = chunking.vocab, chunking.silent
        self.originals = originals
        self.previous: Break | float | None = None  # how the chunk said last ended

    def chunks(self, cut: Iterator[TextChunk]) -> Iterator[TextChunk]:
        for chunk in cut:
            if not self._speakable(chunk.piece):
                self.originals.unsaid(chunk.piece.words)  # only punctuation: not synthesized
                continue
            pause = 0.0 if self.previous is None else pause_after(self.previous)
            self.previous = chunk.piece.end
            yield self._said(chunk.piece, chunk.sentence, pause)

    def halve(self, chunk: TextChunk) -> tuple[TextChunk, ...] | None:
        """``chunk`` in two (the halves with something to say), reported again."""
        halves = split_in_two(chunk.piece)
        if halves is None:
            return None
        self.originals.restore(chunk.reported)
        out, pause = [], chunk.pause
        for half in halves:
            if self._speakable(half):
                out.append(self._said(half, chunk.sentence, pause))
                pause = pause_after(half.end)
                self.previous = half.end
            else:
                self.originals.unsaid(half.words)
        return tuple(out)

    def _speakable(self, piece: Piece) -> bool:
        return any(p in self.vocab and p not in self.silent for p in piece.phonemes)

    def _said(self, piece: Piece, sentence: int, pause: float) -> TextChunk:
        reported = self.originals.state()
        phonemes = piece.phonemes
        ids = tuple(phonemes_to_ids(phonemes, self.vocab))
        timing = token_words(piece.words, self.vocab, self.silent, self.originals)
        return TextChunk(piece, sentence, piece.text, phonemes, ids, pause, timing, reported)


def _pack(words: list[Word], limit: int, end: Break | float, first: bool,
          build_limit: int) -> list[Piece]:
    """A sentence's words in chunks of ``limit`` phonemes (pack_evenly).  The stream's
    first chunk, where its limit is below the build's (cut short for time to first
    audio), ends at the sentence's first clause punctuation if that fits."""
    cut = first_clause(words, limit) if first and limit < build_limit else 0
    if not cut:
        return pack_evenly(words, limit, end)
    first_piece = Piece(tuple(words[:cut]), words[cut - 1].end)
    return [first_piece, *pack_evenly(words[cut:], limit, end)]


# --- the pipeline ------------------------------------------------------------------------


def marked(code: str, text: str, markdown: bool = True,
           normalization: Normalization = EVERY_RULE) -> Marked:
    """The passes up to the segments, cleaned and normalized for the language ``code``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    doc = terminal_escapes(Source(text, Spanned.of(text), markdown))
    return cleaned(code, parse_markup(doc).segments, text, normalization)


def cleaned(code: str, segments, original: str = "",
            normalization: Normalization = EVERY_RULE) -> Marked:
    """``segments`` through ``text_passes(code, normalization)``, one pass after the
    other, as listed."""
    doc = Marked(original, tuple(segments))
    for text_pass in text_passes(code, _checked(normalization)):
        doc = text_pass(doc)
    return doc


def _checked(normalization: object) -> Normalization:
    if not isinstance(normalization, Normalization):
        raise TypeError(
            f"normalization must be a kokoro_ext.text.normalize.Normalization, got "
            f"{type(normalization).__name__}"
        )
    return normalization


def sentences(code: str, text: str, markdown: bool = True,
              normalization: Normalization = EVERY_RULE) -> Sentences:
    """The passes up to sentences; markup is parsed and the text cleaned now (a
    ValueError for malformed markup is raised here), sentences come lazily."""
    return split_sentences(code)(marked(code, text, markdown, normalization))


class TextPipeline:
    """The text side's one front door, for one language: every pass in order
    (``run(text)`` -> Chunks), or the passes up to one point (``sentences``,
    ``phonemize``).  The G2P (``g2p``, frontend.G2P) starts on the first sentence
    (misaki English takes about a second).  ``normalization``: the normalization rules
    its texts go through (normalize.Normalization; default all), unless a call names
    others."""

    def __init__(self, lang: str = "a", g2p: G2P | None = None,
                 normalization: Normalization = EVERY_RULE):
        self.g2p = g2p if g2p is not None else G2P(lang)
        self.language = self.g2p.language
        self.code = self.language.code
        self.normalization = _checked(normalization)

    def _sentences(self, text: str, markdown: bool, normalization: Normalization | None) -> Sentences:
        rules = self.normalization if normalization is None else normalization
        return sentences(self.code, text, markdown, rules)

    def run(self, text: str, markdown: bool = True, limit: int = 510,
            chunking: Chunking | None = None, normalization: Normalization | None = None) -> Chunks:
        """``text`` through every pass; chunks of at most ``limit`` phonemes (or as
        ``chunking`` cuts them); ``normalization`` None: the pipeline's."""
        if chunking is None:
            chunking = Chunking(limit, limit)
        doc = self._sentences(text, markdown, normalization)
        return chunks(chunking)(g2p(self.g2p)(doc))

    def sentences(self, text: str, markdown: bool = True,
                  normalization: Normalization | None = None) -> Iterator[Part]:
        """``text`` through the passes up to sentences, as Parts, in order.  Markup is
        parsed and the text normalized now (a ValueError for malformed markup is raised
        here); sentences come lazily.  ``markdown=False`` reads text that is not SSML as
        written, not as Markdown."""
        return self._sentences(text, markdown, normalization).parts

    def words(self, part: Part | str) -> list[Word]:
        """The G2P pass on one sentence (a str is one plain sentence): its Words."""
        return self.g2p.words(part)

    def phonemize(self, text: str, markdown: bool = True,
                  normalization: Normalization | None = None) -> str:
        """The phonemes of all of ``text``: the passes up to G2P, the sentences' phonemes
        joined by a space."""
        doc = self._sentences(text, markdown, normalization)
        return " ".join(
            "".join(w.phonemes for w in sentence.words).strip()
            for sentence in g2p(self.g2p)(doc).sentences
        ).strip()


#: The text front end of one language: the pipeline itself, by the name the run side
#: and the tests know it by.
FrontEnd = TextPipeline


def passes(code: str, normalization: Normalization = EVERY_RULE) -> list[str]:
    """The names of the passes ``code``'s text goes through, in order (for docs, tests)."""
    names = ["terminal_escapes", "parse_markup"]
    for text_pass in text_passes(code, normalization):
        names.append(re.sub(r"_pass$", "", text_pass.__name__))
    return names + ["sentences", "g2p", "chunks", "timing"]
