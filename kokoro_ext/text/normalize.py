"""Written forms spelled out as words before G2P: numbers, money, dates, units, ...

``normalize(text, lang)`` returns the text as a reader would say it, so that the G2P
sees only words and punctuation:

* for every language: the cleaning of kokoro_ext.text.clean (terminal escapes,
  invisible and control characters, NFKC, look-alike letters), and after the rules
  below symbols and emoji with no pronunciation dropped with a warning;
* for English (``a``, ``b``) also: URLs and e-mail addresses, ISO and slashed dates,
  times, fractions and mixed numbers, money, percentages, units after numbers,
  month-day dates, ordinals, ranges, negative and decimal numbers, years, common
  abbreviations and titles, optional plurals ("file(s)"), "&", "+", "=", "@";
* for Spanish, French, Italian and Portuguese: fractions and mixed numbers
  ("3/4" -> "3 cuartos"; the G2P reads the digits).

``Normalization`` switches rules off, a kind at a time (Kokoro-FastAPI's
``normalization_options``: kokoro_ext.serve.compat).

Numbers are spelled by ``num2words``.  The other languages keep their numbers as digits:
espeak-ng (es, fr, hi, it, pt-br) and misaki's Japanese and Chinese G2P read digits in
their own language, while num2words has no Hindi or Chinese and drops Italian decimals.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import NamedTuple

from kokoro_ext.text.clean import (  # noqa: F401  (the cleaning's earlier home)
    PLACEHOLDER_RANGE,
    compatibility,
    drop_symbols,
    invisible,
    strip_terminal,
    unconfuse,
)
from kokoro_ext.text.spans import group, standing_for, sub


@dataclass(frozen=True)
class Normalization:
    """Which written forms ``spell`` reads as words; each switch turns off exactly its
    rules, and what they matched goes to the G2P as written.  The default reads them all.

    ``enabled`` False: no rule at all, in any language (the cleaning of
    kokoro_ext.text.clean still runs).  The others are English rules:

    ``units``    a unit after a number: "10 KB" -> "ten kilobytes", "3/4 km" -> "three
                 quarters of a kilometer" (off: "ten KB", "three quarters km")
    ``urls``     "https://example.com/a" -> "example dot com slash a"
    ``emails``   "bob@example.com" -> "bob at example dot com"
    ``plurals``  an optional plural: "file(s)" -> "files"
    ``phones``   "555-1234" -> "five five five, one two three four"
    ``symbols``  "&", "+", "=", "@" as words, and "#" before a number as "number"
    """

    enabled: bool = True
    units: bool = True
    urls: bool = True
    emails: bool = True
    plurals: bool = True
    phones: bool = True
    symbols: bool = True


# Symbols that have a reading wherever they stand (English); other symbols are dropped.
# The first four are ``Normalization.symbols``; the others are read whatever it is.
_SYMBOL_WORDS = {
    "&": " and ", "+": " plus ", "=": " equals ", "@": " at ",
}  # fmt: skip
_SIGN_WORDS = {"°": " degrees ", "<": " less than ", ">": " greater than "}
@dataclass(frozen=True)
class Currency:
    """A currency sign and its English unit names (singular, plural)."""

    unit: tuple[str, str]
    cent: tuple[str, str]


CURRENCIES = {
    "$": Currency(("dollar", "dollars"), ("cent", "cents")),
    "€": Currency(("euro", "euros"), ("cent", "cents")),
    "£": Currency(("pound", "pounds"), ("penny", "pence")),
    "¥": Currency(("yen", "yen"), ("sen", "sen")),
    "₹": Currency(("rupee", "rupees"), ("paisa", "paise")),
}
_SCALES = ("thousand", "million", "billion", "trillion")

#: Unit abbreviations after a number -> (singular, plural).
UNITS: dict[str, tuple[str, str]] = {
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"), "mm": ("millimeter", "millimeters"),
    "mi": ("mile", "miles"), "ft": ("foot", "feet"), "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"), "mg": ("milligram", "milligrams"), "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"), "l": ("liter", "liters"),
    "L": ("liter", "liters"), "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"), "s": ("second", "seconds"),
    "sec": ("second", "seconds"), "ms": ("millisecond", "milliseconds"),
    "min": ("minute", "minutes"), "h": ("hour", "hours"), "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"), "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"), "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"), "KB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"), "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"),
    "V": ("volt", "volts"), "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
}  # fmt: skip

#: Abbreviations that stand before a name ("Dr. Smith"): the period goes with them.
TITLES = {
    "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Dr": "Doctor", "Prof": "Professor",
    "St": "Saint", "Mt": "Mount", "Gen": "General", "Capt": "Captain", "Sgt": "Sergeant",
    "Rev": "Reverend", "Hon": "Honorable", "Gov": "Governor", "Sen": "Senator",
}  # fmt: skip
#: Abbreviations read as words anywhere; a final period that ends a sentence is kept.
ABBREVIATIONS = {
    "e.g.": "for example", "i.e.": "that is", "etc.": "et cetera", "vs.": "versus",
    "approx.": "approximately", "Jr.": "Junior", "Sr.": "Senior", "Inc.": "Incorporated",
    "Ltd.": "Limited", "Co.": "Company", "Dept.": "Department", "Fig.": "Figure",
    "a.m.": "A M", "p.m.": "P M",
}  # fmt: skip

#: Abbreviations that often end a sentence, keeping its period before a capital.
_CAN_END_SENTENCE = {"etc.", "Inc.", "Ltd.", "Co.", "Jr.", "Sr."}
MONTHS = [m for m in calendar.month_name if m]  # English: Python's C locale
_MONTH_ABBR = {m[:3]: m for m in MONTHS} | {"Sept": "September"}
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"


def clean_unicode(text: str) -> str:
    """Terminal escapes removed, zero-width and control characters removed (a control
    character between two words is a space), NFKC (but "…"); line breaks kept
    (kokoro_ext.text.clean: strip_terminal, invisible, compatibility)."""
    return compatibility(invisible(strip_terminal(text)))


def num2words(number, **options) -> str:
    """``num2words.num2words``, imported on first use: it loads its fifty languages (0.02 s
    of every start), which text without numbers never needs."""
    from num2words import num2words as spell

    return spell(number, **options)


def _american(words: str, lang: str) -> str:
    # num2words writes British "one hundred and five"; Americans say "one hundred five".
    words = words.replace(",", "")
    return words.replace(" and ", " ") if lang == "a" else words


def cardinal(number: str | int, lang: str = "a") -> str:
    """"1,234" -> "one thousand two hundred thirty-four"; decimals digit by digit."""
    value = Decimal(str(number).replace(",", ""))
    if value == value.to_integral_value() and "." not in str(number):
        return _american(num2words(int(value), lang="en"), lang)
    whole, _, fraction = str(value).partition(".")
    head = _american(num2words(int(whole), lang="en"), lang) if whole not in ("", "-") else ""
    if whole.startswith("-"):
        head = "minus " + (head.removeprefix("minus ") or "zero")
    digits = " ".join(num2words(int(d), lang="en") for d in fraction)
    return f"{head or 'zero'} point {digits}"


def ordinal(number: int, lang: str = "a") -> str:
    return _american(num2words(number, lang="en", to="ordinal"), lang)


def year(number: int, lang: str = "a") -> str:
    return _american(num2words(number, lang="en", to="year"), lang)


def digits(text: str) -> str:
    """"007" -> "zero zero seven"."""
    return " ".join(num2words(int(d), lang="en") if d.isdigit() else d for d in text if d.strip())


def _plural(count: str, forms: tuple[str, str]) -> str:
    return forms[0] if count in ("1", "1.0", "one") else forms[1]


def _money(m: re.Match, lang: str) -> str:
    currency = CURRENCIES[m["sign"]]
    amount = m["amount"].replace(",", "")
    scale = m["scale"]
    if scale:
        return f"{cardinal(amount, lang)} {scale} {currency.unit[1]}"
    whole, _, cents = amount.partition(".")
    units = f"{cardinal(whole or '0', lang)} {_plural(whole, currency.unit)}"
    if len(cents) == 2:
        if int(cents) == 0:
            return units
        cent_words = f"{cardinal(cents.lstrip('0') or '0', lang)} {_plural(cents.lstrip('0'), currency.cent)}"
        return cent_words if int(whole or 0) == 0 else f"{units} and {cent_words}"
    if cents:
        return f"{cardinal(amount, lang)} {currency.unit[1]}"
    return units


def _time(m: re.Match, lang: str) -> str:
    hour, minute = int(m["hour"]), int(m["minute"])
    if hour > 24 or minute > 59:
        return m[0]
    ampm = m["ampm"]
    words = cardinal(hour, lang)
    if minute == 0:
        words += "" if ampm else " o'clock"
    elif minute < 10:
        words += f" oh {cardinal(minute, lang)}"
    else:
        words += f" {cardinal(minute, lang)}"
    if m["second"]:
        words += f" and {cardinal(int(m['second']), lang)} seconds"
    if ampm:
        # capitals: misaki reads "a" as the article, and "m." would swallow the period
        words += " " + " ".join(c for c in ampm.upper() if c.isalpha())
    return words


def _iso_date(m: re.Match, lang: str) -> str:
    y, mo, d = int(m["y"]), int(m["m"]), int(m["d"])
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return m[0]
    if lang == "b":
        return f"the {ordinal(d, lang)} of {MONTHS[mo - 1]} {year(y, lang)}"
    return f"{MONTHS[mo - 1]} {ordinal(d, lang)}, {year(y, lang)}"


def _slashed_date(m: re.Match, lang: str) -> str:
    first, second, y = int(m["a"]), int(m["b"]), int(m["y"])
    # American month/day, British day/month; the other order where only it is a date
    mo, d = (second, first) if lang == "b" else (first, second)
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        mo, d = d, mo
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            return m[0]
    if len(m["y"]) == 2:  # '24 is 2024, '99 1999
        y += 2000 if y < 50 else 1900
    if lang == "b":
        return f"the {ordinal(d, lang)} of {MONTHS[mo - 1]} {year(y, lang)}"
    return f"{MONTHS[mo - 1]} {ordinal(d, lang)}, {year(y, lang)}"


#: Denominators read as fractions ("5/8" is "five eighths"); a slash between other
#: numbers ("24/7", "9/11", "12/25", "50/50", "3/2") is silent: "twenty-four seven".
FRACTION_DENOMINATORS = frozenset((*range(2, 11), 12, 16, 32, 64, 100))
_SLASH = "[/\u2044]"  # "/" and NFKC's fraction slash ("½" is "1⁄2")
_FRACTION = (
    rf"(?<![\w/\u2044.,-])(?:(?P<whole>\d+)(?: +|-))?(?P<num>\d+){_SLASH}(?P<den>\d+)"
    rf"(?![\d/\u2044]|[.,]\d)"
)


def _is_fraction(num: int, den: int, denominators=FRACTION_DENOMINATORS) -> bool:
    return 1 <= num < den and den in denominators


def _fraction(m: re.Match, lang: str, units: bool = True) -> str:
    num, den = int(m["num"]), int(m["den"])
    unit = UNITS.get(m["unit"] or "") if units else None  # units off: a word like another
    if not _is_fraction(num, den) or (m["unit"] and not m["space"] and not unit):
        return m[0]  # not a fraction, or glued to a word ("1/2x")
    name = {2: "half", 4: "quarter"}.get(den) or ordinal(den, lang).removeprefix("one ")
    if num > 1:
        name = "halves" if den == 2 else name + "s"
    # a word after the fraction that is not a unit is kept as written
    after = "" if unit or not m["unit"] else group(m, "space") + group(m, "unit")
    if after:  # the words say the fraction, the unit after it is its own
        fraction = m.string[m.start() : m.start("space")]
        return standing_for(_fraction_words(m, num, den, name, unit, lang), fraction) + after
    return _fraction_words(m, num, den, name, unit, lang)


def _fraction_words(m: re.Match, num: int, den: int, name: str, unit, lang: str) -> str:
    if m["whole"] is None:
        words = f"{cardinal(num, lang)} {name}"
        if unit:  # "three quarters of a kilometer"
            article = "an" if unit[0][0] in "aeiou" or unit[0].startswith("hour") else "a"
            words += f" of {article} {unit[0]}"
        return words
    # "one and a half", "two and three quarters"
    words = f"{cardinal(m['whole'], lang)} and {'a' if num == 1 else cardinal(num, lang)} {name}"
    return words + (f" {unit[1]}" if unit else "")


def _month_day(m: re.Match, lang: str) -> str:
    month = _MONTH_ABBR.get(m["month"][:4].rstrip("."), None) or _MONTH_ABBR.get(m["month"][:3])
    day = int(m["day"])
    if month is None or not 1 <= day <= 31:
        return m[0]
    return f"{month} {ordinal(day, lang)}"


def _unit(m: re.Match, lang: str) -> str:
    number = m["number"].replace("−", "-")
    forms = UNITS[m["unit"]]
    return f"{cardinal(number, lang)} {_plural(number, forms)}"


def _number(text: str, lang: str) -> str:
    sign = "minus " if text[0] in "-−" else ""
    body = text.lstrip("-−")
    if len(body.replace(",", "").split(".")[0]) > 15 or (
        len(body) > 1 and body[0] == "0" and body[1].isdigit()
    ):
        return sign + digits(body)  # an identifier, not a quantity
    return sign + cardinal(body, lang)


def _year(m: re.Match, lang: str) -> str:
    words = year(int(m["year"]), lang)
    if m["s"]:  # 1990s -> nineteen nineties
        words = re.sub(r"y$", "ies", words) if words.endswith("y") else words + "s"
    return words


def _abbreviation(m: re.Match, lang: str) -> str:
    abbr = m["abbr"]
    # "apples, pears, etc. Then ..." - the abbreviation's period also ended the sentence
    ends = m["last"] is not None or (m["capital"] is not None and abbr in _CAN_END_SENTENCE)
    return ABBREVIATIONS[abbr] + ("." if ends else "")


def _url(m: re.Match, lang: str) -> str:
    url = re.sub(r"^(https?://)?(www\.)?", "", m[0]).rstrip("/")
    return _spell_address(url)


def _email(m: re.Match, lang: str) -> str:
    return _spell_address(m["user"]) + " at " + _spell_address(m["domain"])


def _spell_address(text: str) -> str:
    spoken = {".": " dot ", "/": " slash ", "-": " dash ", "_": " underscore ", ":": " colon ",
              "?": " question mark ", "=": " equals ", "&": " and ", "#": " hash ", "~": " tilde "}
    out = "".join(spoken.get(c, c) for c in text)
    out = re.sub(r"\d+", lambda d: " " + digits(d[0]) + " ", out)
    return re.sub(r"\s+", " ", out).strip()


# "p.m." keeps its last period where it ends the sentence
_AMPM = r"[AaPp]\.?[Mm]\b(?:\.(?!\s+[A-Z]|\s*$))?"


class _Rule(NamedTuple):
    """A written form (``pattern``) and its words (``words(match, lang)``)."""

    pattern: re.Pattern[str]
    words: Callable[[re.Match, str], str]
    #: the Normalization switch that turns the rule off (None: none does)
    switch: str | None = None
    #: its words when ``switch`` is off, if not the text as written
    otherwise: Callable[[re.Match, str], str] | None = None
    #: it can match only text with a digit (``spell`` skips it for text without one)
    digit: bool = True


_MONTH_NAMES = "|".join(
    [*MONTHS, *(m[:3] + r"\.?" for m in MONTHS), r"Sept\.?"]
)
_UNIT_NAMES = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_ENGLISH_RULES: list[_Rule] = [
    _Rule(re.compile(r"\bNo\.\s?(?=\d)"), lambda m, lang: "number "),
    _Rule(re.compile(r"#(?=\d)"), lambda m, lang: "number ", "symbols"),
    _Rule(re.compile(r"\b(?:https?://|www\.)[^\s<>\"]+[^\s<>\".,;:!?)]"), _url, "urls", digit=False),
    _Rule(re.compile(r"\b(?P<user>[\w.+-]+)@(?P<domain>[\w-]+(?:\.[\w-]+)+)\b"), _email, "emails",
          digit=False),
    # "file(s)": the plural a reader says
    _Rule(re.compile(r"(?<=[^\W\d_])\(s\)(?!\w)"), lambda m, lang: "s", "plurals", digit=False),
    _Rule(re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b"), _iso_date),
    _Rule(
        re.compile(r"(?<![\w/.,])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4}|\d{2})(?![\w/]|[.,]\d)"),
        _slashed_date,
    ),
    # a word after the fraction: the unit's name if it is one (checked in _fraction: an
    # alternation of every unit would cost milliseconds of every start to compile)
    _Rule(re.compile(_FRACTION + r"(?P<space> ?)(?P<unit>°?[^\W\d_]+(?:/[^\W\d_]+)?)?"), _fraction,
          "units", partial(_fraction, units=False)),
    _Rule(
        re.compile(
            r"\b(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?"
            rf"(?:\s*(?P<ampm>{_AMPM}))?"
        ),
        _time,
    ),
    _Rule(
        re.compile(rf"\b(?P<hour>\d{{1,2}})\s*(?P<ampm>{_AMPM})"),
        lambda m, lang: _time_hour(m, lang),
    ),
    _Rule(  # phone numbers, digit by digit in their groups: 555-1234, (555) 123-4567
        re.compile(r"(?<![\w-])(?:\(\d{3}\)\s?|\d{3}[-.\s])?\d{3}-\d{4}(?![\w-])"),
        lambda m, lang: ", ".join(digits(g) for g in re.findall(r"\d+", m[0])),
        "phones",
    ),
    _Rule(
        re.compile(
            rf"(?P<sign>[$€£¥₹])\s?(?P<amount>{_NUMBER})"
            rf"(?:\s(?P<scale>{'|'.join(_SCALES)})\b)?"
        ),
        _money,
    ),
    _Rule(
        re.compile(rf"(?<![\w.,])(?P<number>[-−]?(?:{_NUMBER}))\s?%"),
        lambda m, lang: _number(m["number"], lang) + " percent",
    ),
    _Rule(re.compile(r"(?<![\w.,])(?P<year>1[1-9]\d0|20\d0)(?P<s>s)\b"), _year),  # not seconds
    _Rule(
        re.compile(
            rf"(?<![\w.,])(?P<number>[-−]?(?:{_NUMBER}))\s?(?P<unit>{_UNIT_NAMES})(?![\w/])"
        ),
        _unit,
        "units",
    ),
    _Rule(
        re.compile(rf"\b(?P<month>{_MONTH_NAMES})\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b"),
        _month_day,
    ),
    _Rule(
        re.compile(r"\b(?P<n>\d+)(?:st|nd|rd|th)\b"),
        lambda m, lang: ordinal(int(m["n"]), lang),
    ),
    _Rule(
        re.compile(r"(?<![\w.,-])(?P<a>\d+)\s?[-–]\s?(?P<b>\d+)(?![\w-]|[.,]\d)"),
        lambda m, lang: f"{cardinal(m['a'], lang)} to {cardinal(m['b'], lang)}",
    ),
    _Rule(re.compile(r"(?<![\w.,])(?P<year>1[1-9]\d\d|20\d\d)(?P<s>s)?(?![\w]|[.,]\d)"), _year),
    _Rule(re.compile(rf"(?<![\w.,])[-−]?(?:{_NUMBER})(?![\w]|[.,]\d)"), lambda m, lang: _number(m[0], lang)),
    _Rule(  # "Main St." is a street, "St. Louis" a saint
        re.compile(r"\b(?P<name>[A-Z][a-z]+)\s+St\.(?P<end>\s*$)?(?=\s+[a-z\d]|[,;:!?)]|$)"),
        lambda m, lang: group(m, "name") + standing_for(  # "Street" spans "St."
            " Street" + ("." if m["end"] is not None else ""),
            m.string[m.end("name") : m.end()].lstrip(),
        ),
        digit=False,
    ),
    _Rule(
        # "Mr." is a title wherever it stands; "St." only before a name
        re.compile(r"\b(?:(?P<title>" + "|".join(TITLES) + r")\.(?=\s+[A-Z])|"
                   r"(?P<always>Mr|Mrs|Ms|Dr|Prof)\.(?=\s))"),
        lambda m, lang: TITLES[m["title"] or m["always"]],
        digit=False,
    ),
    _Rule(
        re.compile(
            r"(?<![\w.])(?P<abbr>" + "|".join(re.escape(a) for a in ABBREVIATIONS) + r")"
            r"(?:(?P<last>(?=\s*$))|(?P<capital>(?=\s+[A-Z])))?"
        ),
        _abbreviation,
        digit=False,
    ),
    _Rule(re.compile("[" + re.escape("".join(_SYMBOL_WORDS)) + "]"), lambda m, lang: _SYMBOL_WORDS[m[0]],
          "symbols", digit=False),
    _Rule(re.compile("[" + re.escape("".join(_SIGN_WORDS)) + "]"), lambda m, lang: _SIGN_WORDS[m[0]],
          digit=False),
]


# The rules that can match text without a digit: addresses, "(s)", "Main St.", titles,
# abbreviations, symbols (tests/test_text_pipeline.py checks the others need one).
_ENGLISH_RULES_WITHOUT_DIGITS = [rule for rule in _ENGLISH_RULES if not rule.digit]


@functools.cache
def _english_rules(normalization: Normalization, digit: bool) -> tuple[_Rule, ...]:
    """The English rules ``normalization`` keeps, for text with a digit or without one,
    in order; a rule switched off is left out, or gives its ``otherwise`` words."""
    rules = []
    for rule in _ENGLISH_RULES if digit else _ENGLISH_RULES_WITHOUT_DIGITS:
        if rule.switch is not None and not getattr(normalization, rule.switch):
            if rule.otherwise is None:
                continue
            rule = rule._replace(words=rule.otherwise)
        rules.append(rule)
    return tuple(rules)
_SPACES = re.compile(r"[ \t]{2,}")


def _time_hour(m: re.Match, lang: str) -> str:
    hour = int(m["hour"])
    if not 1 <= hour <= 12:
        return m[0]
    return cardinal(hour, lang) + " " + " ".join(c for c in m["ampm"].upper() if c.isalpha())


class FractionWords(NamedTuple):
    """How a language names fractions: the article for one ("un medio"), the "and" of a
    mixed number ("1 y medio") and each denominator's names (singular, plural)."""

    one: str
    and_: str
    names: dict[int, tuple[str, str]]


#: Fractions in the languages whose G2P reads digits: the numerator stays digits.
FRACTIONS = {
    "e": FractionWords("un", "y", {
        2: ("medio", "medios"), 3: ("tercio", "tercios"), 4: ("cuarto", "cuartos"),
        5: ("quinto", "quintos"), 6: ("sexto", "sextos"), 7: ("séptimo", "séptimos"),
        8: ("octavo", "octavos"), 9: ("noveno", "novenos"), 10: ("décimo", "décimos"),
        12: ("doceavo", "doceavos"), 16: ("dieciseisavo", "dieciseisavos"),
        100: ("centésimo", "centésimos")}),
    "f": FractionWords("un", "et", {
        2: ("demi", "demis"), 3: ("tiers", "tiers"), 4: ("quart", "quarts"),
        5: ("cinquième", "cinquièmes"), 6: ("sixième", "sixièmes"),
        7: ("septième", "septièmes"), 8: ("huitième", "huitièmes"),
        9: ("neuvième", "neuvièmes"), 10: ("dixième", "dixièmes"),
        12: ("douzième", "douzièmes"), 16: ("seizième", "seizièmes"),
        100: ("centième", "centièmes")}),
    "i": FractionWords("un", "e", {
        2: ("mezzo", "mezzi"), 3: ("terzo", "terzi"), 4: ("quarto", "quarti"),
        5: ("quinto", "quinti"), 6: ("sesto", "sesti"), 7: ("settimo", "settimi"),
        8: ("ottavo", "ottavi"), 9: ("nono", "noni"), 10: ("decimo", "decimi"),
        12: ("dodicesimo", "dodicesimi"), 16: ("sedicesimo", "sedicesimi"),
        100: ("centesimo", "centesimi")}),
    "p": FractionWords("um", "e", {
        2: ("meio", "meios"), 3: ("terço", "terços"), 4: ("quarto", "quartos"),
        5: ("quinto", "quintos"), 6: ("sexto", "sextos"), 7: ("sétimo", "sétimos"),
        8: ("oitavo", "oitavos"), 9: ("nono", "nonos"), 10: ("décimo", "décimos"),
        12: ("doze avos", "doze avos"), 16: ("dezesseis avos", "dezesseis avos"),
        100: ("centésimo", "centésimos")}),
}  # fmt: skip
_OTHER_FRACTION = _FRACTION + r"(?!\w)"


def _other_fraction(m: re.Match, words: FractionWords) -> str:
    num, den = int(m["num"]), int(m["den"])
    if not _is_fraction(num, den, words.names):
        return m[0]
    name = words.names[den][num > 1]
    if m["whole"] is None:
        return f"{words.one if num == 1 else num} {name}"
    if num == 1 and den == 2:  # "1 y medio", "1 et demi": no article
        return f"{m['whole']} {words.and_} {name}"
    return f"{m['whole']} {words.and_} {words.one if num == 1 else num} {name}"


#: Every rule (the default).
EVERY_RULE = Normalization()


def normalize(text: str, lang: str = "a", normalization: Normalization = EVERY_RULE) -> str:
    """``text`` as words for the G2P of language ``lang`` (a kokoro code: a, b, e, ...).

    See the module docstring for what is spelled out (``normalization``: which of it);
    anything else passes unchanged.
    """
    return drop_symbols(spell(unconfuse(clean_unicode(text)), lang, normalization), lang)


def spell(text: str, lang: str = "a", normalization: Normalization = EVERY_RULE) -> str:
    """The written forms of ``text`` as words (fractions; for English all the rules of the
    module docstring), those ``normalization`` keeps; text already cleaned
    (kokoro_ext.text.clean)."""
    if not normalization.enabled:
        return text
    if lang in FRACTIONS:
        text = sub(_OTHER_FRACTION, lambda m: _other_fraction(m, FRACTIONS[lang]), text)
    if lang in ("a", "b"):
        # rules that need a digit are skipped for text without one (no rule adds digits)
        rules = _english_rules(normalization, re.search(r"\d", text) is not None)
        # digits after the first rules are words: later rules never see them twice
        for pattern, rule, *_ in rules:
            if pattern.search(text):  # most rules match nothing: no call for them
                text = sub(pattern, lambda m: rule(m, lang), text)
        text = sub(_SPACES, " ", text)
    return text
