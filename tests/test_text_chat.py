"""Text as chat models and terminals write it, read as a person reads it: Markdown,
terminal escapes, look-alike letters, fractions; ``markdown=False`` reads as written."""

from __future__ import annotations

import json
import warnings

import pytest

from kokoro_ext.text.pipeline import FrontEnd
from kokoro_ext.text.markup import Inline, Phonemes, Text, parse
from kokoro_ext.text.normalize import normalize, strip_terminal, unconfuse


@pytest.fixture(scope="module")
def front():
    return FrontEnd("a")


def said(front, text, markdown=True):
    """Phonemes of ``text``; any text dropped as unpronounceable fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        return front.phonemize(text, markdown)


# --- Markdown ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "marked, plain",
    [
        ("This is **bold**, *italic*, __strong__ and _light_.",
         "This is bold, italic, strong and light."),
        ("***Very*** ~~old~~ **new *and* improved**.", "Very old new and improved."),
        ("Run `pip install kokoro` now.", "Run pip install kokoro now."),
        ("Use `` two ticks `` here.", "Use two ticks here."),
        ("# Getting started\nInstall it.", "Getting started. Install it."),
        ("## Step two ##\n\nThen wait.", "Step two. Then wait."),
        ("Overview\n========\nIt works.", "Overview. It works."),
        ("Shopping:\n- Apples\n- Pears\n* Plums\n+ Figs", "Shopping: Apples. Pears. Plums. Figs."),
        ("1. Wash them.\n2) Dry them\n10. Eat", "Wash them. Dry them. Eat."),
        ("- [x] Done\n- [ ] Not yet", "Done. Not yet."),
        ("> To be or not to be.\n> > That is the question.",
         "To be or not to be. That is the question."),
        ('See [the docs](https://example.com/docs "Docs") and ![a cat](cat.png).',
         "See the docs and a cat."),
        ("Read [the **guide**][intro].\n\n[intro]: https://example.com/intro", "Read the guide."),
        ("Visit <https://example.com> today.", "Visit https://example.com today."),
        ("| Name | Age |\n|:-----|----:|\n| Ann | 30 |\n| Bo | 4 |\n\nEnd.",
         "Name, Age. Ann, thirty. Bo, four. End."),
        ("One.\n\n---\n\nTwo.\n***\nThree.", "One. Two. Three."),
        ("Run this:\n```bash\nrm -rf build/ && echo **done**\n```\nThen restart.",
         "Run this: Then restart."),
        ("Try:\n~~~\nprint(1)\n~~~\nOK.", "Try: OK."),
        ("Almost.\n```python\nx = 1  # never closed", "Almost."),
        ("# The [Kokoro](/kˈOkəɹO/) model\n- say [Kokoro](/kˈOkəɹO/) *twice*",
         "The [Kokoro](/kˈOkəɹO/) model. say [Kokoro](/kˈOkəɹO/) twice."),
    ],
)  # fmt: skip
def test_markdown_reads_as_the_plain_sentence(front, marked, plain):
    assert said(front, marked) == said(front, plain, markdown=False)


def test_headings_and_list_items_are_sentences_with_their_pauses(front):
    parts = list(front.sentences("# Title\nIntro text\n- first\n- second\n\nLast"))
    assert [(p.text, p.end) for p in parts] == [
        ("Title.", "paragraph"), ("Intro text", "sentence"), ("first.", "sentence"),
        ("second.", "paragraph"), ("Last", "sentence"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text", ["2*3*4 is 24", "5 * 3", "snake_case_name", "a_b and c_d", "x > y", "C# and F#"]
)
def test_markers_that_are_not_markdown_stay(front, text):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "*" may have no reading: the same either way
        assert front.phonemize(text) == front.phonemize(text, markdown=False)


def test_escapes_and_inline_code_keep_their_symbols(front):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert front.phonemize(r"\*not emphasis\*") == front.phonemize(
            "*not emphasis*", markdown=False
        )
        assert front.phonemize("Type `a*b*c` here.") == front.phonemize(
            "Type a*b*c here.", markdown=False
        )


def test_phoneme_links_work_as_before():
    # misaki's inline forms are kept; a link to an address says its text
    assert parse("Say [Kokoro](/kˈOkəɹO/), [read](-1) and [docs](https://x.org).") == [
        Text("Say "), Phonemes("kˈOkəɹO", "Kokoro"), Text(", "), Inline("read", "-1"),
        Text(" and docs."),
    ]  # fmt: skip
    assert parse("**[Kokoro](/kˈOkəɹO/)**") == [Phonemes("kˈOkəɹO", "Kokoro")]
    assert parse("[docs](https://x.org)", markdown=False) == [Inline("docs", "https://x.org")]
    assert parse("`[Kokoro](/kˈOkəɹO/)`") == [Text("[Kokoro](/kˈOkəɹO/)")]  # code is literal


def test_phoneme_links_are_said(front):
    for markdown in (True, False):
        assert "kˈOkəɹO" in said(front, "I like [Kokoro](/kˈOkəɹO/).", markdown)
    with pytest.raises(ValueError, match="empty phonemes .* at character 9"):
        front.sentences("**Say** [this](//) now")


def test_ssml_is_not_markdown():
    assert parse("<speak>**x** and _y_</speak>") == [Text("**x** and _y_")]


def test_markdown_false_reads_as_written(front):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        literal = front.phonemize("Use **bold** now.", markdown=False)
        code = front.phonemize("Run this:\n```\nls\n```", markdown=False)
    assert "ˈæstəɹ" in literal  # the asterisks are read, as before
    assert literal != said(front, "Use bold now.")
    assert code.startswith(said(front, "Run this:")) and code != said(front, "Run this:")


# --- terminal escapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("\x1b[1;31mError:\x1b[0m file not found.", "Error: file not found."),
        ("\x1b[2K\x1b[1G\x1b[?25lDone.\x1b[?25h", "Done."),
        ("\x1b[38;5;208mOrange\x1b[39m and \x1b[48;2;0;0;0mblack\x1b[m.", "Orange and black."),
        ("\x1b]0;my title\x07Hello.", "Hello."),
        ("\x1b]8;;https://example.com\x1b\\Click here\x1b]8;;\x1b\\ now.", "Click here now."),
        ("\x1b(B\x1b7Saved\x1b8.", "Saved."),
        ("\x9b31mred\x9b0m light.", "red light."),
        ("[32mPASS[0m all tests; [1;33mwarn[0m.", "PASS all tests; warn."),
        ("N\bNA\bAM\bME\bE: _\bl_\bs", "NAME: ls"),
        ("Ring\x07 the\x00 bell.", "Ring the bell."),
        ("\x1b]2;unterminated title\nNext line.", "\nNext line."),
    ],
)
def test_terminal_escapes_are_removed_whole(front, raw, clean):
    assert said(front, raw) == said(front, clean)
    assert said(front, raw, markdown=False) == said(front, clean)


def test_strip_terminal():
    assert strip_terminal("\x1b[1;31mError:\x1b[0m [2Kx\x1b]0;t\x07") == "Error: [2Kx"
    assert strip_terminal("\x1b]2;title\nrest") == "\nrest"  # unterminated: to the line end
    assert strip_terminal("N\bNA\bA\x1bc") == "NA"


def test_bracketed_text_that_looks_like_a_colour_code_stays():
    assert strip_terminal("Wait [5min] or [2m].") == "Wait [5min] or [2m]."
    assert strip_terminal("[m](/ɛm/)") == "[m](/ɛm/)"


# --- look-alike letters -------------------------------------------------------------------


@pytest.mark.parametrize(
    "mixed, latin",
    [
        ("Неllо wоrld.", "Hello world."),  # Cyrillic Н, е, о
        ("Pay with pаypаl.", "Pay with paypal."),  # Cyrillic а
        ("Ρуthоn is fun.", "Python is fun."),  # Greek Ρ, Cyrillic у, о
        ("Νοw οr never.", "Now or never."),  # Greek Ν, ο
    ],
)
def test_latin_words_with_look_alike_letters_are_read_as_latin(front, mixed, latin):
    assert unconfuse(mixed) == latin
    assert said(front, mixed) == said(front, latin)


def test_words_of_other_scripts_keep_their_script():
    assert unconfuse("Привет, мир. Αθήνα. Tシャツ. naïve café") == (
        "Привет, мир. Αθήνα. Tシャツ. naïve café"
    )
    assert unconfuse("Пpивет") == "Привет"  # a Latin p in a Russian word is Cyrillic
    assert unconfuse("Αθhνα") == "Αθhνα"  # no Greek look-alike of h: left as it is


def test_cyrillic_words_are_still_dropped_in_english(front):
    with pytest.warns(UserWarning, match="not English"):
        assert front.phonemize("Hello Пpивет.") == said(front, "Hello.")


# --- fractions and slashed dates ----------------------------------------------------------


@pytest.mark.parametrize(
    "written, spoken",
    [
        ("3/4 cup", "three quarters cup"),
        ("1 1/2 cups", "one and a half cups"),
        ("1-1/2 inch", "one and a half inch"),
        ("2 3/4 miles", "two and three quarters miles"),
        ("1½ cups", "one and a half cups"),
        ("½", "one half"),
        ("¾ cup and ⅛ teaspoon", "three quarters cup and one eighth teaspoon"),
        ("2/3 of them", "two thirds of them"),
        ("5/8", "five eighths"),
        ("1/100", "one hundredth"),
        ("3/16", "three sixteenths"),
        ("1/2 km", "one half of a kilometer"),
        ("3/4 h", "three quarters of an hour"),
        ("2 1/2 km", "two and a half kilometers"),
        ("12/25/2024", "December twenty-fifth, twenty twenty-four"),
        ("25/12/2024", "December twenty-fifth, twenty twenty-four"),
        ("7/4/76", "July fourth, nineteen seventy-six"),
        ("24/7", "twenty-four/seven"),
        ("9/11", "nine/eleven"),
        ("50/50", "fifty/fifty"),
        ("3/2", "three/two"),
        ("12/25", "twelve/twenty-five"),
        ("13/13/2024", "thirteen/thirteen/twenty twenty-four"),
    ],
)
def test_english_fractions_and_dates(front, written, spoken):
    assert normalize(written) == spoken
    assert said(front, written) == said(front, spoken)


def test_british_dates_are_day_first():
    assert normalize("1/3/2024", "b") == "the first of March twenty twenty-four"
    assert normalize("1/3/2024", "a") == "January third, twenty twenty-four"


@pytest.mark.parametrize(
    "lang, written, spoken",
    [
        ("e", "3/4 taza", "3 cuartos taza"),
        ("e", "1 1/2", "1 y medio"),
        ("e", "½", "un medio"),
        ("e", "2 1/4", "2 y un cuarto"),
        ("f", "1/2", "un demi"),
        ("f", "2 3/4", "2 et 3 quarts"),
        ("i", "1 1/2", "1 e mezzo"),
        ("p", "1/4", "um quarto"),
        ("e", "24/7", "24/7"),
    ],
)
def test_fractions_in_languages_whose_g2p_reads_digits(lang, written, spoken):
    assert normalize(written, lang) == spoken


def test_spanish_fraction_phonemes():
    spanish = FrontEnd("e")
    assert spanish.phonemize("3/4 taza") == spanish.phonemize("tres cuartos taza")


# --- the switch where text enters ---------------------------------------------------------


class _Voices:
    def blend(self, voice):
        return voice


@pytest.mark.parametrize("value, markdown", [(None, True), (True, True), (False, False)])
def test_speech_request_takes_markdown(value, markdown):
    from kokoro_ext.serve.app import ServerOptions, parse_speech

    body = {"model": "tts-1", "input": "**Hi**", "voice": "af_heart"}
    if value is not None:
        body["markdown"] = value
    spec = parse_speech(json.dumps(body).encode(), _Voices(), ServerOptions())
    assert spec.markdown is markdown


def test_speech_request_refuses_a_markdown_that_is_not_a_boolean():
    from kokoro_ext.serve.app import HTTPError, ServerOptions, parse_speech

    body = {"model": "tts-1", "input": "Hi", "voice": "af_heart", "markdown": "no"}
    with pytest.raises(HTTPError) as err:
        parse_speech(json.dumps(body).encode(), _Voices(), ServerOptions())
    assert err.value.status == 400 and err.value.param == "markdown"
