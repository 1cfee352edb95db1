"""Written forms spelled out as words before G2P: numbers, money, dates, units, ...

``normalize(text, lang)`` returns the text as a reader would say it, so that the G2P
sees only words and punctuation:

* for every language: Unicode NFKC (full-width letters and digits, ligatures; "…" is
  kept, the chunker splits on it), zero-width and control characters removed without a
  space (they never split a word), symbols and emoji with no pronunciation dropped with
  a warning;
* for English (``a``, ``b``) also: URLs and e-mail addresses, ISO dates and times,
  money, percentages, units after numbers, month-day dates, ordinals, ranges, negative
  and decimal numbers, years, common abbreviations and titles, "&", "+", "=", "@".

Numbers are spelled by ``num2words``.  The other languages keep their numbers as digits:
espeak-ng (es, fr, hi, it, pt-br) and misaki's Japanese and Chinese G2P read digits in
their own language, while num2words has no Hindi or Chinese and drops Italian decimals.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

# Format characters that glue or separate nothing a reader hears: removed, not spaced.
_INVISIBLE = {"\u00ad", "\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"}
# NFKC would turn these into something the chunker or G2P handles worse ("…" -> "...").
_KEEP_FROM_NFKC = {"…"}
# Symbols that have a reading wherever they stand (English); other symbols are dropped.
_SYMBOL_WORDS = {
    "&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "°": " degrees ",
    "<": " less than ", ">": " greater than ",
}  # fmt: skip
# Symbols the other languages' G2P reads itself (espeak-ng: "%" is "por ciento").
_READ_BY_G2P = set("%$€£¥₹°")
# Private-use characters are the markup layer's placeholders (kokoro_ext.text.markup).
PLACEHOLDER_RANGE = (0xF0000, 0xFFFFD)


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
    """NFKC (but "…"), zero-width and control characters removed; line breaks kept."""
    out = []
    for char in text:
        if char in _INVISIBLE:
            continue
        category = unicodedata.category(char)
        if category == "Cc" and char not in "\n\t\r":
            continue
        if category == "Cf":  # other format characters: bidi marks, ...
            continue
        out.append(char if char in _KEEP_FROM_NFKC else unicodedata.normalize("NFKC", char))
    return "".join(out).replace("\r\n", "\n").replace("\r", "\n")


def drop_symbols(text: str, lang: str = "a") -> str:
    """``text`` without emoji and symbols that have no reading, with a warning naming them.

    Kept: letters, marks, digits, punctuation, spaces, the markup placeholders, and (for
    English) the symbols ``_SYMBOL_WORDS`` reads and currency signs.
    """
    kept = (set(CURRENCIES) | {"%"}) if lang in ("a", "b") else _READ_BY_G2P
    dropped = []
    out = []
    for char in text:
        category = unicodedata.category(char)
        placeholder = PLACEHOLDER_RANGE[0] <= ord(char) <= PLACEHOLDER_RANGE[1]
        if category[0] in "SC" and char not in "\n\t" and not placeholder and char not in kept:
            dropped.append(char)
            out.append(" ")
            continue
        out.append(char)
    # variation selectors and skin-tone modifiers ride on the emoji: drop them silently
    text = re.sub(r"[\ufe0e\ufe0f\U0001f3fb-\U0001f3ff]", "", "".join(out))
    shown = "".join(dict.fromkeys(c for c in dropped if c not in "\ufe0e\ufe0f"))
    if shown:
        warnings.warn(f"dropping symbols with no pronunciation: {shown!r}", stacklevel=3)
        text = re.sub(r"(?<=\S) {2,}(?=\S)", " ", text)
    return text


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
_Rule = tuple[re.Pattern[str], Callable[[re.Match, str], str]]
_MONTH_NAMES = "|".join(
    [*MONTHS, *(m[:3] + r"\.?" for m in MONTHS), r"Sept\.?"]
)
_UNIT_NAMES = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_ENGLISH_RULES: list[_Rule] = [
    (re.compile(r"\bNo\.\s?(?=\d)"), lambda m, lang: "number "),
    (re.compile(r"#(?=\d)"), lambda m, lang: "number "),
    (re.compile(r"\b(?:https?://|www\.)[^\s<>\"]+[^\s<>\".,;:!?)]"), _url),
    (re.compile(r"\b(?P<user>[\w.+-]+)@(?P<domain>[\w-]+(?:\.[\w-]+)+)\b"), _email),
    (re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b"), _iso_date),
    (
        re.compile(
            r"\b(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?"
            rf"(?:\s*(?P<ampm>{_AMPM}))?"
        ),
        _time,
    ),
    (
        re.compile(rf"\b(?P<hour>\d{{1,2}})\s*(?P<ampm>{_AMPM})"),
        lambda m, lang: _time_hour(m, lang),
    ),
    (  # phone numbers, digit by digit in their groups: 555-1234, (555) 123-4567
        re.compile(r"(?<![\w-])(?:\(\d{3}\)\s?|\d{3}[-.\s])?\d{3}-\d{4}(?![\w-])"),
        lambda m, lang: ", ".join(digits(g) for g in re.findall(r"\d+", m[0])),
    ),
    (
        re.compile(
            rf"(?P<sign>[$€£¥₹])\s?(?P<amount>{_NUMBER})"
            rf"(?:\s(?P<scale>{'|'.join(_SCALES)})\b)?"
        ),
        _money,
    ),
    (
        re.compile(rf"(?<![\w.,])(?P<number>[-−]?(?:{_NUMBER}))\s?%"),
        lambda m, lang: _number(m["number"], lang) + " percent",
    ),
    (re.compile(r"(?<![\w.,])(?P<year>1[1-9]\d0|20\d0)(?P<s>s)\b"), _year),  # not seconds
    (
        re.compile(
            rf"(?<![\w.,])(?P<number>[-−]?(?:{_NUMBER}))\s?(?P<unit>{_UNIT_NAMES})(?![\w/])"
        ),
        _unit,
    ),
    (
        re.compile(rf"\b(?P<month>{_MONTH_NAMES})\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b"),
        _month_day,
    ),
    (
        re.compile(r"\b(?P<n>\d+)(?:st|nd|rd|th)\b"),
        lambda m, lang: ordinal(int(m["n"]), lang),
    ),
    (
        re.compile(r"(?<![\w.,-])(?P<a>\d+)\s?[-–]\s?(?P<b>\d+)(?![\w-]|[.,]\d)"),
        lambda m, lang: f"{cardinal(m['a'], lang)} to {cardinal(m['b'], lang)}",
    ),
    (re.compile(r"(?<![\w.,])(?P<year>1[1-9]\d\d|20\d\d)(?P<s>s)?(?![\w]|[.,]\d)"), _year),
    (re.compile(rf"(?<![\w.,])[-−]?(?:{_NUMBER})(?![\w]|[.,]\d)"), lambda m, lang: _number(m[0], lang)),
    (  # "Main St." is a street, "St. Louis" a saint
        re.compile(r"\b(?P<name>[A-Z][a-z]+)\s+St\.(?P<end>\s*$)?(?=\s+[a-z\d]|[,;:!?)]|$)"),
        lambda m, lang: f"{m['name']} Street" + ("." if m["end"] is not None else ""),
    ),
    (
        # "Mr." is a title wherever it stands; "St." only before a name
        re.compile(r"\b(?:(?P<title>" + "|".join(TITLES) + r")\.(?=\s+[A-Z])|"
                   r"(?P<always>Mr|Mrs|Ms|Dr|Prof)\.(?=\s))"),
        lambda m, lang: TITLES[m["title"] or m["always"]],
    ),
    (
        re.compile(
            r"(?<![\w.])(?P<abbr>" + "|".join(re.escape(a) for a in ABBREVIATIONS) + r")"
            r"(?:(?P<last>(?=\s*$))|(?P<capital>(?=\s+[A-Z])))?"
        ),
        _abbreviation,
    ),
    (re.compile("[" + re.escape("".join(_SYMBOL_WORDS)) + "]"), lambda m, lang: _SYMBOL_WORDS[m[0]]),
]


def _time_hour(m: re.Match, lang: str) -> str:
    hour = int(m["hour"])
    if not 1 <= hour <= 12:
        return m[0]
    return cardinal(hour, lang) + " " + " ".join(c for c in m["ampm"].upper() if c.isalpha())


def normalize(text: str, lang: str = "a") -> str:
    """``text`` as words for the G2P of language ``lang`` (a kokoro code: a, b, e, ...).

    See the module docstring for what is spelled out; anything else passes unchanged.
    """
    text = clean_unicode(text)
    if lang in ("a", "b"):
        # digits after the first rules are words: later rules never see them twice
        for pattern, spell in _ENGLISH_RULES:
            text = pattern.sub(lambda m: spell(m, lang), text)
        text = re.sub(r"[ \t]{2,}", " ", text)
    return drop_symbols(text, lang)
