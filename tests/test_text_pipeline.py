"""The text pipeline's passes one at a time (kokoro_ext.text.pipeline): text before and
after each, and the spans each keeps; then the whole pipeline."""

from __future__ import annotations

import warnings
from functools import partial

import pytest

from kokoro_ext.text import clean, normalize, pipeline
from kokoro_ext.text.frontend import G2P
from kokoro_ext.text.markup import Pause, Phonemes, SayAs, Text
from kokoro_ext.text.pipeline import (
    Marked, Source, TextPipeline, on_text, parse_markup, read_say_as, terminal_escapes,
)  # fmt: skip
from kokoro_ext.text.spans import Spanned, join, original, sub


def _marked(text: str) -> Marked:
    return Marked(text, (Text(Spanned.of(text)),))


def _text(doc: Marked) -> str:
    return "".join(s.text for s in doc.segments if isinstance(s, Text))


def _apply(function, text: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = on_text(function)(_marked(text))
    assert all(isinstance(s.text, Spanned) for s in out.segments if isinstance(s, Text) and s.text)
    return _text(out)


def test_the_passes_in_order():
    common = ["terminal_escapes", "parse_markup", "say_as", "invisible"]
    tail = ["sentences", "g2p", "chunks", "timing"]
    assert pipeline.passes("a") == [*common, "compatibility", "unconfuse", "spell",
                                    "drop_symbols", "drop_other_scripts", *tail]
    assert pipeline.passes("e") == pipeline.passes("a")
    assert pipeline.passes("h") == [*common, "compatibility", "unconfuse", "drop_symbols",
                                    "sentence_ends", *tail]
    assert pipeline.passes("j") == pipeline.passes("z") == [
        *common, "unconfuse", "drop_symbols", "sentence_ends", *tail]


@pytest.mark.parametrize("code", ["a", "h", "j"])
def test_the_text_passes_run_as_listed(code, monkeypatch):
    listed = pipeline.text_passes(code)
    ran = []

    def recorded(text_pass):
        def run(doc):
            ran.append(text_pass)
            return text_pass(doc)

        return run

    monkeypatch.setattr(pipeline, "text_passes", lambda c, rules: tuple(map(recorded, listed)))
    pipeline.marked(code, "Pay $3 to Hello there. <b>Bye</b>")
    assert ran == list(listed)  # each pass once, in the listed order, none merged


def test_one_front_door():
    front = TextPipeline("a")
    assert pipeline.FrontEnd is TextPipeline and isinstance(front.g2p, G2P)
    text = "Hello there. It costs $3."
    chunks = front.run(text).chunks
    joined = " ".join(c.piece.phonemes.strip() for c in chunks)
    # the passes up to G2P, and all of them, say the same
    assert "".join(front.phonemize(text).split()) == "".join(joined.split())
    assert [p.text for p in front.sentences(text)] == ["Hello there.", "It costs three dollars."]


@pytest.mark.parametrize(
    "before, after",
    [("\x1b[31mred\x1b[0m text", "red text"), ("\x1b]0;title\x07Hi", "Hi"),
     ("B\bBo\bold", "Bold"), ("[33mwarn[0m now [5min]", "warn now [5min]")],
)  # fmt: skip
def test_terminal_escapes(before, after):
    doc = terminal_escapes(Source(before, Spanned.of(before)))
    assert doc.text == after
    assert [original(w, before) for w in doc.text.split(" ")] == after.split(" ")


def test_markup_keeps_the_spans_of_what_is_said():
    text = "# Title\n\n**Bold** and [link](https://x.org) and [Kokoro](/kˈOkəɹO/)."
    doc = parse_markup(Source(text, Spanned.of(text)))
    said = join(s.text for s in doc.segments)
    words = ["Title.", "Bold", "and", "link", "and", "Kokoro."]
    assert said.split() == words and [original(w, text) for w in said.split()] == words
    assert any(isinstance(s, Phonemes) and s.phonemes == "kˈOkəɹO" for s in doc.segments)

    ssml = '<speak>A <break time="1s"/> <say-as interpret-as="digits">42</say-as> &amp; b</speak>'
    doc = parse_markup(Source(ssml, Spanned.of(ssml)))
    assert [type(s) for s in doc.segments] == [Text, Pause, Text, SayAs, Text]
    assert original(doc.segments[3].text, ssml) == "42"
    # "&amp;" is "&": its data stands where the reference starts
    assert original(doc.segments[4].text.strip(), ssml) == "& b"


def test_say_as_spans_its_content():
    text = "12/25/2024"
    doc = read_say_as("a")(Marked(text, (SayAs(Spanned.of(text), "date"),)))
    said = doc.segments[0].text
    assert said.strip() == "December twenty-fifth, twenty twenty-four"
    assert original(said, text) == text


@pytest.mark.parametrize(
    "lang, before, after",
    [("a", "Hello\0world", "Hello world"), ("a", "Hello \0world", "Hello world"),
     ("a", "\0Hello\x1f", "Hello"), ("a", "bell\x07s", "bells"), ("a", "a\x0cb", "a b"),
     ("a", "zero\u200bwidth", "zerowidth"), ("a", "soft\u00adhyphen", "softhyphen"),
     ("a", "two\r\nlines", "two\r\nlines"), ("j", "今日\rは", "今日は"), ("z", "你\u200d好", "你好")],
)  # fmt: skip
def test_invisible_and_control_characters(lang, before, after):
    assert _apply(partial(clean.invisible, lang=lang), before) == after


@pytest.mark.parametrize(
    "before, after",
    [("ｆｕｌｌ ＡＢＣ１", "full ABC1"), ("1½ cups", "1 1⁄2 cups"), ("ﬁne…", "fine…"),
     ("a\r\nb\rc", "a\nb\nc")],
)  # fmt: skip
def test_compatibility(before, after):
    assert _apply(clean.compatibility, before) == after


def test_look_alikes_keep_the_word_span():
    text = "say Неllо"
    assert _apply(clean.unconfuse, text) == "say Hello"
    word = on_text(clean.unconfuse)(_marked(text)).segments[0].text.split(" ")[1]
    assert original(word, text) == "Неllо"


@pytest.mark.parametrize(
    "lang, before, after",
    [("a", "Pay $3.50 now", "Pay three dollars and fifty cents now"),
     ("b", "On 2024-03-01.", "On the first of March twenty twenty-four."),
     ("a", "Main St. is 5 km away", "Main Street is five kilometers away"),
     ("e", "1/2 taza", "un medio taza"), ("f", "2 3/4 litres", "2 et 3 quarts litres")],
)  # fmt: skip
def test_spelling_per_language(lang, before, after):
    assert _apply(pipeline.SPELL[lang], before) == after


def test_spelling_spans_the_written_form():
    text = "Pay $3.50 to Main St. now"
    said = on_text(pipeline.SPELL["a"])(_marked(text)).segments[0].text
    words = said.split(" ")
    assert [original(w, text) for w in words] == [
        "Pay", "$3.50", "$3.50", "$3.50", "$3.50", "$3.50", "to", "Main", "St.", "now"]


def test_symbols_and_other_scripts():
    assert _apply(partial(clean.drop_symbols, lang="a"), "hi 🙂 there & 5%") == "hi there & 5%"
    assert _apply(partial(clean.drop_symbols, lang="e"), "50% + 2") == "50% 2"
    assert _apply(clean.drop_other_scripts, "in Москва now") == "in now"


@pytest.mark.parametrize(
    "lang, before, after",
    [("h", "नमस्ते। ठीक", "नमस्ते।\n ठीक"), ("j", "はい。いいえ", "はい。\nいいえ"),
     ("z", "好！走", "好！\n走")],
)  # fmt: skip
def test_sentence_ends(lang, before, after):
    assert _apply(pipeline.SENTENCE_ENDS[lang], before) == after


def test_sentences_g2p_and_chunks_keep_the_spans():
    text = "**Hello** there, \x1b[1mworld\x1b[0m! I have 3 cats; fine.\n\nBye."
    pipe = TextPipeline("a")
    chunks = list(pipe.run(text, limit=12).chunks)
    assert [c.sentence for c in chunks] == sorted(c.sentence for c in chunks)
    words = [w for c in chunks for w in c.words]
    said = [original(w.text.strip(), text) for w in words]
    assert said == ["Hello", "there,", "world!", "I", "have", "3", "cats;", "fine.", "Bye."]
    assert all(len(c.piece.phonemes) <= 12 or len(c.words) == 1 for c in chunks)
    # the same phonemes as the front end's sentences and words
    front = TextPipeline("a")
    assert " ".join(c.piece.phonemes for c in chunks) == front.phonemize(text)


def test_a_changing_chunk_limit_is_asked_per_chunk():
    asked = []

    def limit(index: int) -> int:
        asked.append(index)
        return 10 if index == 0 else 40

    progress = pipeline.Progress()
    chunking = pipeline.Chunking(limit, 40, progress)
    out = []
    text = "Sure, I can help you with that today."
    for chunk in TextPipeline("a").run(text, chunking=chunking).chunks:
        out.append(chunk.piece.text)
        progress.said += 1
        progress.last_end = chunk.end
    assert out[0] == "Sure," and len(out) >= 2  # the first clause, cut short
    assert asked[0] == 0 and 1 in asked


def test_the_normalize_function_is_the_passes():
    text = "Ｐａｙ $3 to Неllо\0there 🙂"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        passes = _apply(lambda t: clean.drop_symbols(normalize.spell(clean.unconfuse(
            clean.compatibility(clean.invisible(t))))), text)
        assert normalize.normalize(text) == passes
        assert passes.strip() == "Pay three dollars to Hello there"


def test_spans_survive_sub_join_and_strip():
    text = Spanned.of("  ab cd  ", 10)
    assert text.strip().starts == (12, 13, 14, 15, 16)
    swapped = sub(r"(\w+) (\w+)", r"\2 \1", text)
    assert str(swapped) == "  cd ab  " and swapped.starts[2:4] == (15, 16)
    joined = join(["x", text.strip(), "!"])
    assert str(joined) == "xab cd!" and joined.starts[0] == joined.ends[0] == 12


def test_the_english_rules_skipped_without_digits_need_one():
    import text_corpus

    skipped = [rule.pattern for rule in normalize._ENGLISH_RULES
               if all(rule is not other for other in normalize._ENGLISH_RULES_WITHOUT_DIGITS)]
    assert len(skipped) == 17
    texts = [e["text"] for e in text_corpus.read(text_corpus.CORPUS)]
    texts += ["No. 5", "#5", "May 5th", "3/4", "$5", "5%", "1990s", "5 km", "10:30 am", "5 pm"]
    for text in texts:
        assert all(p.search(text) is None for p in skipped if not any(c.isdigit() for c in text))
        digitless = "".join(c for c in text if not c.isdigit())
        assert all(p.search(digitless) is None for p in skipped), text


# --- normalization switches through the pipeline -------------------------------------------


def test_the_passes_are_kept_per_language_and_normalization():
    Normalization = normalize.Normalization
    assert pipeline.text_passes("a") is pipeline.text_passes("a")
    no_units = pipeline.text_passes("a", Normalization(units=False))
    assert no_units is pipeline.text_passes("a", Normalization(units=False))
    assert no_units is not pipeline.text_passes("a")
    spell = [p.function for p in no_units if p.__name__ == "spell"]
    assert spell[0].keywords == {"lang": "a", "normalization": Normalization(units=False)}
    # no normalization: the pass is left out, the cleaning stays
    off = pipeline.passes("a", Normalization(enabled=False))
    assert off == [p for p in pipeline.passes("a") if p != "spell"] and "drop_symbols" in off
    with pytest.raises(TypeError, match="Normalization"):
        pipeline.marked("a", "text", normalization={"units": False})


@pytest.fixture(scope="module")
def g2p_a() -> G2P:
    return G2P("a")


#: switch -> (text, a word of its phonemes read with every rule, one with the switch off)
PHONEMES = {
    "enabled": ("It costs $5.", "fˈIv dˈɑləɹz", "dˈɑləɹ fˈIv"),
    "units": ("It weighs 5 kg.", "kˈɪləɡɹˌæmz", "kˌAʤˈi"),
    "plurals": ("Pick the file(s).", "fˈIlz", "fˈIl(ˈɛs)"),
    "symbols": ("C = D", "ˈikwᵊlz", None),  # off: "=" has no reading, dropped
}


@pytest.mark.parametrize("switch", sorted(PHONEMES))
def test_each_switch_changes_the_phonemes_as_meant(switch, g2p_a):
    text, on, off = PHONEMES[switch]
    Normalization = normalize.Normalization
    front = TextPipeline("a", g2p_a)
    said = front.phonemize(text)
    assert on in said and said == front.phonemize(text, normalization=Normalization())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unsaid = front.phonemize(text, normalization=Normalization(**{switch: False}))
        # the pipeline's own normalization, or one given per call
        assert unsaid == TextPipeline("a", g2p_a, Normalization(**{switch: False})).phonemize(text)
        chunks = TextPipeline("a", g2p_a).run(text, normalization=Normalization(**{switch: False})).chunks
        ran = " ".join(c.piece.phonemes for c in chunks)  # run takes it too
    assert on not in unsaid and (off is None or off in unsaid)
    assert on not in ran and (off is None or off in ran)
