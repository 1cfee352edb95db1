"""kokoro_ext.text.markup and the front end: markup is never spoken beyond what it means."""

from __future__ import annotations

import warnings

import pytest

from kokoro_ext.text.pipeline import FrontEnd
from kokoro_ext.text.markup import Inline, Pause, Phonemes, SayAs, Text, is_ssml, parse


@pytest.fixture(scope="module")
def front():
    return FrontEnd("a")


def spoken(front, text):
    """Phonemes of ``text`` with word spacing removed: what is said, not how it is cut."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # markup must leave no text to drop
        return "".join(front.phonemize(text).split())


def test_ssml_only_when_the_text_starts_with_speak():
    assert is_ssml('<speak>Hi</speak>') and is_ssml('  \n<speak version="1.1">Hi</speak>')
    assert not is_ssml("a < b") and not is_ssml("Say <speak> later") and not is_ssml("<speaker>")
    assert parse("a < b & c") == [Text("a < b & c")]


def test_ssml_segments():
    text = (
        '<speak>One<break time="500ms"/>two<break time="1.5s"/><break strength="weak"/>'
        '<say-as interpret-as="characters">ab</say-as><sub alias="Doctor">Dr.</sub>'
        '<phoneme ph="kˈOkəɹO">Kokoro</phoneme> &amp; &lt;</speak>'
    )
    assert parse(text) == [
        Text("One"), Pause(0.5), Text("two"), Pause(1.5), Pause(0.15),
        SayAs("ab", "characters"), Text("Doctor"), Phonemes("kˈOkəɹO", "Kokoro"), Text(" & <"),
    ]  # fmt: skip


def test_inline_links_in_plain_text():
    assert parse("Say [Kokoro](/kˈOkəɹO/) and [read](-1).") == [
        Text("Say "), Phonemes("kˈOkəɹO", "Kokoro"), Text(" and "), Inline("read", "-1"),
        Text("."),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text, where, what",
    [
        ("<speak>Hello", "line 1, column 13", "no element found"),
        ("<speak>a <b>bold</b></speak>", "line 1, column 10", "<b> is not supported"),
        ("<speak>\n<break time='fast'/></speak>", "line 2, column 1", "not a duration"),
        ("<speak><break time='11s'/></speak>", "line 1, column 8", "longer than 10 s"),
        ("<speak><break strength='huge'/></speak>", "column 8", "strength='huge'"),
        ("<speak>a &nbsp; b</speak>", "line 1, column 10", "undefined entity"),
        ("<speak>a < b</speak>", "line 1, column 11", "&lt;"),
        ("<speak><sub>x</sub></speak>", "column 8", "alias"),
        ("<speak><phoneme>x</phoneme></speak>", "column 8", "ph="),
        ("<speak><say-as interpret-as='telephone'>1</say-as></speak>", "column 8", "characters"),
        ("<speak><sub alias='x'><break/></sub></speak>", "column 23", "only text"),
        ("<speak><speak>x</speak></speak>", "column 8", "inside <speak>"),
        ("<speak>x</speak><speak>y</speak>", "line 1, column 17", "junk after document"),
        ("<speak><break time='1s' foo='2'/></speak>", "column 8", "no attribute 'foo'"),
        ("Say [this](//) now", "character 5", "empty phonemes"),
    ],
)
def test_malformed_markup_names_the_position(text, where, what):
    with pytest.raises(ValueError) as err:
        FrontEnd("a").sentences(text)
    assert where in str(err.value) and what in str(err.value)


def test_breaks_end_the_sentence_before_them(front):
    parts = list(front.sentences('<speak><break time="2s"/>Hello<break time="700ms"/> big '
                                 'world.<break strength="x-strong"/> Bye. Now.<p>New.</p></speak>'))
    assert [(p.text, p.end) for p in parts] == [
        ("Hello", 0.7), ("big world.", 1.0), ("Bye.", "sentence"), ("Now.", "paragraph"),
        ("New.", "paragraph"),
    ]


@pytest.mark.parametrize(
    "marked, plain",
    [
        ("<speak>Hello world.</speak>", "Hello world."),
        ("<speak>\n  Hello\n  world.\n</speak>", "Hello world."),
        ('<speak>Hello <break time="300ms"/> world.</speak>', "Hello world."),
        ('<speak><s>Hello world.</s></speak>', "Hello world."),
        ('<speak><sub alias="Doctor">Dr.</sub> Smith is here.</speak>', "Doctor Smith is here."),
        ('<speak><phoneme ph="həlˈO">Hi</phoneme> world.</speak>', "Hello world."),
        ("[Hi](/həlˈO/) world.", "Hello world."),
        ('<speak>Call <say-as interpret-as="digits">42</say-as> now.</speak>', "Call four two now."),
        ('<speak><say-as interpret-as="characters">tts</say-as> works.</speak>', "T T S works."),
        ('<speak>On <say-as interpret-as="date">2024-03-01</say-as>.</speak>',
         "On March first, twenty twenty-four."),
        ('<speak>On <say-as interpret-as="date" format="dmy">1/3/2024</say-as>.</speak>',
         "On March first, twenty twenty-four."),
        ("<speak>Fish &amp; chips.</speak>", "Fish and chips."),
        ("He\u200bllo wo\u2060rld\u200d.", "Hello world."),
        ("Hel\u00adlo\ufeff world.", "Hello world."),
        ("a < b", "a less than b"),
    ],
)
def test_markup_and_invisible_characters_say_only_what_they_mean(front, marked, plain):
    assert spoken(front, marked) == spoken(front, plain)


def test_phoneme_markup_works_for_other_languages():
    # no G2P is needed for a sentence that is all phonemes
    front = FrontEnd("e")
    part = next(front.sentences('<speak><phoneme ph="ˈola">hola</phoneme></speak>'))
    assert [w.phonemes for w in front.words(part)] == ["ˈola"]
