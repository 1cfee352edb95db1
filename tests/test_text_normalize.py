"""kokoro_ext.text.normalize: written forms spelled out before G2P, case by case."""

from __future__ import annotations

import warnings

import pytest

from kokoro_ext.text.normalize import _ENGLISH_RULES, Normalization, clean_unicode, normalize

ENGLISH = [
    # numbers
    ("I have 42 apples", "I have forty-two apples"),
    ("1,234 people", "one thousand two hundred thirty-four people"),
    ("1,000,000", "one million"),
    ("pi is 3.14", "pi is three point one four"),
    ("0.5", "zero point five"),
    ("-5", "minus five"),
    ("-3.5", "minus three point five"),
    ("the 21st century", "the twenty-first century"),
    ("2nd and 3rd", "second and third"),
    ("pages 5-10", "pages five to ten"),
    ("pages 10–20", "pages ten to twenty"),
    ("in 1999", "in nineteen ninety-nine"),
    ("in 2005", "in two thousand five"),
    ("in 1999, then", "in nineteen ninety-nine, then"),
    ("aged 5-10.", "aged five to ten."),
    ("1,999 people", "one thousand nine hundred ninety-nine people"),
    ("the 1990s", "the nineteen nineties"),
    ("agent 007", "agent zero zero seven"),
    ("call 555-1234", "call five five five, one two three four"),
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    ("No. 5", "number five"),
    ("#1", "number one"),
    # money
    ("$1,234.56", "one thousand two hundred thirty-four dollars and fifty-six cents"),
    ("€5", "five euros"),
    ("£3.50", "three pounds and fifty pence"),
    ("$0.99", "ninety-nine cents"),
    ("$1", "one dollar"),
    ("$5 million", "five million dollars"),
    # percentages
    ("50%", "fifty percent"),
    ("-5%", "minus five percent"),
    ("2.5 %", "two point five percent"),
    # dates and times
    ("at 3:45 pm", "at three forty-five P M"),
    ("at 3:45 p.m. Then", "at three forty-five P M. Then"),
    ("at 9:05", "at nine oh five"),
    ("at 10:00", "at ten o'clock"),
    ("at 5pm", "at five P M"),
    ("2024-03-01", "March first, twenty twenty-four"),
    ("March 3rd", "March third"),
    ("on May 5", "on May fifth"),
    ("Sept. 11", "September eleventh"),
    # units
    ("5 km", "five kilometers"),
    ("1 km", "one kilometer"),
    ("10 kg", "ten kilograms"),
    ("3 ms", "three milliseconds"),
    ("5km", "five kilometers"),
    ("30°C", "thirty degrees Celsius"),
    ("It's 100 m.", "It's one hundred meters."),
    # abbreviations and titles
    ("Dr. Smith", "Doctor Smith"),
    ("Mr. and Mrs. Jones", "Mister and Missus Jones"),
    ("St. Louis", "Saint Louis"),
    ("on Main St. today", "on Main Street today"),
    ("fruit, e.g. apples", "fruit, for example apples"),
    ("that is, i.e. this", "that is, that is this"),
    ("apples, pears, etc. Then", "apples, pears, et cetera. Then"),
    ("apples, pears, etc.", "apples, pears, et cetera."),
    # URLs and e-mail addresses
    ("mail info@example.com", "mail info at example dot com"),
    ("see https://example.com/a.", "see example dot com slash a."),
    ("www.kokoro.org", "kokoro dot org"),
    # symbols with a reading
    ("AT&T", "AT and T"),
    ("x = 3 + 4", "x equals three plus four"),
    ("a < b", "a less than b"),
    # words and digits glued to words are the G2P's
    ("COVID-19", "COVID-nineteen"),
    ("plain words stay", "plain words stay"),
]


@pytest.mark.parametrize("text, spoken", ENGLISH)
def test_english(text, spoken):
    assert normalize(text, "a") == spoken


def test_british_keeps_and():
    assert normalize("$105", "b") == "one hundred and five dollars"
    assert normalize("2024-03-01", "b") == "the first of March twenty twenty-four"


@pytest.mark.parametrize(
    "text, clean",
    [
        ("zero\u200bwidth", "zerowidth"),  # zero-width space
        ("soft\u00adhyphen", "softhyphen"),
        ("jo\u200dined", "joined"),
        ("bi\u200edi", "bidi"),  # left-to-right mark
        ("bell\x07s", "bells"),
        ("\ufeffBOM", "BOM"),
        ("\ufb01ne", "fine"),  # ligature
        ("\uff21\uff22\uff23\uff11", "ABC1"),  # full-width
        ("wait…", "wait…"),  # kept for the chunker
        ("two\r\nlines", "two\nlines"),
    ],
)
def test_unicode_cleanup_never_splits_words(text, clean):
    assert clean_unicode(text) == clean
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert normalize(text, "a") == normalize(clean, "a")


@pytest.mark.parametrize("text, kept", [("hello 😀 world", "hello world"), ("ok 👍🏽!", "ok !")])
def test_emoji_dropped_with_a_warning(text, kept):
    with pytest.warns(UserWarning, match="no pronunciation"):
        assert normalize(text, "a") == kept


def test_other_languages_keep_digits_for_their_g2p():
    # espeak-ng and misaki ja/zh read digits in their own language
    assert normalize("Tengo 21 años y 50%.", "e") == "Tengo 21 años y 50%."
    assert normalize("价格是１２元", "z") == "价格是12元"
    with pytest.warns(UserWarning, match="no pronunciation"):
        assert normalize("C'est 🎉 bon", "f") == "C'est bon"


# --- Normalization: each switch turns exactly its rules off ---------------------------------

#: switch -> (text, read with every rule, read with that switch off)
SWITCHES = {
    "units": ("It is 10 KB, 5 km and 3/4 mi away.",
              "It is ten kilobytes, five kilometers and three quarters of a mile away.",
              "It is ten KB, five km and three quarters mi away."),
    "urls": ("See https://example.com/docs now.", "See example dot com slash docs now.",
             "See https://example.com/docs now."),
    "emails": ("Mail bob@example.com today.", "Mail bob at example dot com today.",
               "Mail bob at example.com today."),  # "@" is still a symbol read as a word
    "plurals": ("Pick the file(s).", "Pick the files.", "Pick the file(s)."),
    "phones": ("Call 555-1234.", "Call five five five, one two three four.",
               "Call five hundred fifty-five to one thousand two hundred thirty-four."),
    "symbols": ("Rock & roll + jazz, page #5", "Rock and roll plus jazz, page number five",
                "Rock & roll + jazz, page #five"),  # "&", "+", "#" left to the G2P
}


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_each_switch_turns_off_its_rules_only(switch):
    text, on, off = SWITCHES[switch]
    assert normalize(text, "a") == normalize(text, "a", Normalization()) == on
    assert normalize(text, "a", Normalization(**{switch: False})) == off
    # the other switches off leave this text's reading as it was
    others = {name: False for name in SWITCHES if name != switch}
    assert normalize(text, "a", Normalization(**others)) == on


def test_every_switch_is_a_field_and_every_rule_switch_one():
    fields = set(Normalization.__dataclass_fields__)
    assert fields == {"enabled", *SWITCHES}
    assert {rule.switch for rule in _ENGLISH_RULES} - {None} == set(SWITCHES)


def test_signs_not_kokoro_fastapis_symbols_are_read_with_symbols_off():
    # "°", "<", ">" are outside Kokoro-FastAPI's replace_remaining_symbols: still read
    assert normalize("a < b", "a", Normalization(symbols=False)) == "a less than b"


def test_normalization_off_leaves_the_written_forms_to_the_g2p():
    text = "Pay $5 on 2024-03-01 at 10:30, 3/4 of 10 KB & file(s)."
    assert normalize(text, "a", Normalization(enabled=False)) == text
    assert normalize("Necesito 3/4 de taza.", "e", Normalization(enabled=False)) == "Necesito 3/4 de taza."
    assert normalize("Necesito 3/4 de taza.", "e") == "Necesito 3 cuartos de taza."
    # "+" is read by the English G2P: left for it, not dropped as a symbol
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert normalize("1 + 1", "a", Normalization(enabled=False)) == "1 + 1"
