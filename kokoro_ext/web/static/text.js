// English text -> Kokoro phonemes and token ids in the browser (no bundler), as the
// project's Python front end (kokoro_ext/text) makes them: its English normalization
// (normalize.py), its tokenizer (tokenizer.py, spaCy's splits) and misaki's English G2P
// (misaki/en.py) over misaki's own lexicons, with espeak-ng (npm `phonemizer`, wasm) for
// words outside them.  bench/text_browser.py measures how far it agrees with Python.
//
// Files beside this module (kokoro_ext/build/web/text.py writes them into a build):
//   lexicon-en-us.json / lexicon-en-gb.json   misaki's gold and silver dictionaries
//   phonemizer.js                              espeak-ng, loaded on the first unknown word
//   config.json                                the model's vocab (the build's own)
//
//   const {phonemes, ids, words} = await phonemize("Hello there.", {language: "en-us"});
//
// words: [{text, phonemes, start, end}], start/end UTF-16 offsets into the text given.
// English only; text is read as written (no Markdown or SSML; misaki's links are read).

const BASE = new URL(".", import.meta.url);

async function readJSON(name, base) {
  const url = new URL(name, base);
  if (url.protocol === "file:") {  // node (tests, bench): fetch has no file: URLs
    const fs = await import("node:fs/promises");
    return JSON.parse(await fs.readFile(url, "utf8"));
  }
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

const cached = new Map();
function once(key, make) {
  if (!cached.has(key)) cached.set(key, make().catch((e) => { cached.delete(key); throw e; }));
  return cached.get(key);
}

// --- text with spans: each character knows the range of the original it came from ------

class Spanned {
  constructor(text, spans) {
    this.text = text;
    this.spans = spans ?? Array.from(text, (_, i) => [i, i + 1]);
  }

  // String.replace with a function, the new characters spanning what they replace; the
  // function may return [[text, from, to], ...]: each text spans the match's [from, to)
  sub(pattern, replace) {
    let text = "", spans = [], last = 0;
    for (const m of this.text.matchAll(pattern)) {
      const out = replace(m);
      if (out === m[0]) continue;
      const start = m.index, end = m.index + m[0].length;
      text += this.text.slice(last, start);
      spans.push(...this.spans.slice(last, start));
      for (const [part, from, to] of Array.isArray(out) ? out : [[out, 0, end - start]]) {
        const lo = this.spans[start + from]?.[0] ?? this.spans[start - 1]?.[1] ?? 0;
        const hi = to > from ? this.spans[start + to - 1][1] : lo;
        text += part;
        for (let i = 0; i < part.length; i++) spans.push([lo, hi]);
      }
      last = end;
    }
    if (last === 0) return this;
    return new Spanned(text + this.text.slice(last), spans.concat(this.spans.slice(last)));
  }
}

// --- numbers (num2words' English, as normalize.py and misaki call it) -------------------

const ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
  "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
  "eighteen", "nineteen"];
const TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
const SCALES = [[1e15, "quadrillion"], [1e12, "trillion"], [1e9, "billion"], [1e6, "million"],
  [1e3, "thousand"]];

function below100(n) {
  return n < 20 ? ONES[n] : TENS[Math.floor(n / 10)] + (n % 10 ? "-" + ONES[n % 10] : "");
}

function below1000(n) {
  const h = Math.floor(n / 100), r = n % 100;
  if (!h) return below100(r);
  return `${ONES[h]} hundred` + (r ? ` and ${below100(r)}` : "");
}

// num2words(n): British "and", groups joined by ", " (" and " before a last group < 100)
function num2words(n) {
  if (n < 0) return "minus " + num2words(-n);
  if (n === 0) return "zero";
  const groups = [];
  for (const [value, name] of SCALES) {
    if (n >= value) {
      groups.push([Math.floor(n / value), name]);
      n %= value;
    }
  }
  let out = groups.map(([g, name]) => `${num2words(g)} ${name}`).join(", ");
  if (n) out += out ? (n < 100 ? " and " : ", ") + below1000(n) : below1000(n);
  return out;
}

const ORDS = { one: "first", two: "second", three: "third", five: "fifth", eight: "eighth",
  nine: "ninth", twelve: "twelfth" };
function num2ordinal(n) {
  const words = num2words(n).split(" ");
  const last = words.at(-1).split("-");
  const w = last.at(-1);
  last[last.length - 1] = ORDS[w] ?? (w.endsWith("y") ? w.slice(0, -1) + "ie" : w) + "th";
  words[words.length - 1] = last.join("-");
  return words.join(" ");
}

function num2year(n) {
  const high = Math.floor(n / 100), low = n % 100;
  if (high === 0 || (high % 10 === 0 && low < 10) || high >= 100) return num2words(n);
  const lowText = low === 0 ? "hundred" : low < 10 ? `oh-${num2words(low)}` : num2words(low);
  return `${num2words(high)} ${lowText}`;
}

// --- normalization: normalize.spell's English rules ------------------------------------

const american = (words, lang) => {
  words = words.replaceAll(",", "");
  return lang === "a" ? words.replaceAll(" and ", " ") : words;
};
function cardinal(number, lang) {
  const s = String(number).replaceAll(",", "");
  if (!s.includes(".")) return american(num2words(Number(s)), lang);
  let [whole, fraction] = s.split(".");
  let head = whole !== "" && whole !== "-" ? american(num2words(Math.abs(Number(whole))), lang) : "";
  if (whole.startsWith("-")) head = "minus " + (head || "zero");
  const digits = Array.from(fraction, (d) => ONES[+d]).join(" ");
  return `${head || "zero"} point ${digits}`;
}
const ordinal = (n, lang) => american(num2ordinal(n), lang);
const year = (n, lang) => american(num2year(n), lang);
const digits = (text) => Array.from(text).filter((d) => d.trim()).map((d) => /\d/.test(d) ? ONES[+d] : d).join(" ");
const plural = (count, forms) => ["1", "1.0", "one"].includes(count) ? forms[0] : forms[1];

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];
const MONTH_ABBR = Object.fromEntries([...MONTHS.map((m) => [m.slice(0, 3), m]), ["Sept", "September"]]);
const CURRENCIES = {
  "$": [["dollar", "dollars"], ["cent", "cents"]], "€": [["euro", "euros"], ["cent", "cents"]],
  "£": [["pound", "pounds"], ["penny", "pence"]], "¥": [["yen", "yen"], ["sen", "sen"]],
  "₹": [["rupee", "rupees"], ["paisa", "paise"]],
};
const UNITS = {
  km: ["kilometer", "kilometers"], m: ["meter", "meters"], cm: ["centimeter", "centimeters"],
  mm: ["millimeter", "millimeters"], mi: ["mile", "miles"], ft: ["foot", "feet"],
  kg: ["kilogram", "kilograms"], g: ["gram", "grams"], mg: ["milligram", "milligrams"],
  lb: ["pound", "pounds"], lbs: ["pound", "pounds"], oz: ["ounce", "ounces"],
  l: ["liter", "liters"], L: ["liter", "liters"], ml: ["milliliter", "milliliters"],
  mL: ["milliliter", "milliliters"], s: ["second", "seconds"], sec: ["second", "seconds"],
  ms: ["millisecond", "milliseconds"], min: ["minute", "minutes"], h: ["hour", "hours"],
  hr: ["hour", "hours"], hrs: ["hour", "hours"], mph: ["mile per hour", "miles per hour"],
  "km/h": ["kilometer per hour", "kilometers per hour"], Hz: ["hertz", "hertz"],
  kHz: ["kilohertz", "kilohertz"], MHz: ["megahertz", "megahertz"], GHz: ["gigahertz", "gigahertz"],
  KB: ["kilobyte", "kilobytes"], MB: ["megabyte", "megabytes"], GB: ["gigabyte", "gigabytes"],
  TB: ["terabyte", "terabytes"], W: ["watt", "watts"], kW: ["kilowatt", "kilowatts"],
  V: ["volt", "volts"], "°C": ["degree Celsius", "degrees Celsius"],
  "°F": ["degree Fahrenheit", "degrees Fahrenheit"],
};
const TITLES = { Mr: "Mister", Mrs: "Missus", Ms: "Miz", Dr: "Doctor", Prof: "Professor",
  St: "Saint", Mt: "Mount", Gen: "General", Capt: "Captain", Sgt: "Sergeant", Rev: "Reverend",
  Hon: "Honorable", Gov: "Governor", Sen: "Senator" };
const ABBREVIATIONS = { "e.g.": "for example", "i.e.": "that is", "etc.": "et cetera",
  "vs.": "versus", "approx.": "approximately", "Jr.": "Junior", "Sr.": "Senior",
  "Inc.": "Incorporated", "Ltd.": "Limited", "Co.": "Company", "Dept.": "Department",
  "Fig.": "Figure", "a.m.": "A M", "p.m.": "P M" };
const CAN_END_SENTENCE = new Set(["etc.", "Inc.", "Ltd.", "Co.", "Jr.", "Sr."]);
const SYMBOL_WORDS = { "&": " and ", "+": " plus ", "=": " equals ", "@": " at ",
  "°": " degrees ", "<": " less than ", ">": " greater than " };
const FRACTION_DENOMINATORS = new Set([2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 32, 64, 100]);

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
const W = "\\p{L}\\p{N}_";  // Python's \w
const NUMBER = "\\d{1,3}(?:,\\d{3})+(?:\\.\\d+)?|\\d+(?:\\.\\d+)?";
const AMPM = "[AaPp]\\.?[Mm]\\b(?:\\.(?!\\s+[A-Z]|\\s*$))?";
const MONTH_NAMES = [...MONTHS, ...MONTHS.map((m) => m.slice(0, 3) + "\\.?"), "Sept\\.?"].join("|");
const UNIT_NAMES = Object.keys(UNITS).sort((a, b) => b.length - a.length).map(esc).join("|");
const FRACTION = `(?<![${W}/\\u2044.,-])(?:(?<whole>\\d+)(?: +|-))?(?<num>\\d+)[/\\u2044](?<den>\\d+)(?![\\d/\\u2044]|[.,]\\d)`;
const ampmWords = (ampm) => Array.from(ampm.toUpperCase()).filter((c) => /\p{L}/u.test(c)).join(" ");
const r = (source) => new RegExp(source, "gu");

function spellNumber(text, lang) {
  const sign = /^[-−]/.test(text) ? "minus " : "";
  const body = text.replace(/^[-−]+/, "");
  if (body.replaceAll(",", "").split(".")[0].length > 15 || /^0\d/.test(body)) return sign + digits(body);
  return sign + cardinal(body, lang);
}

function dateWords(mo, d, y, lang) {
  return lang === "b" ? `the ${ordinal(d, lang)} of ${MONTHS[mo - 1]} ${year(y, lang)}`
    : `${MONTHS[mo - 1]} ${ordinal(d, lang)}, ${year(y, lang)}`;
}

function spellAddress(text) {
  const spoken = { ".": " dot ", "/": " slash ", "-": " dash ", "_": " underscore ", ":": " colon ",
    "?": " question mark ", "=": " equals ", "&": " and ", "#": " hash ", "~": " tilde " };
  let out = Array.from(text, (c) => spoken[c] ?? c).join("");
  out = out.replace(/\d+/g, (d) => ` ${digits(d)} `);
  return out.replace(/\s+/g, " ").trim();
}

// [pattern, (match, lang) -> words], in normalize.py's order
const RULES = [
  [r("\\bNo\\.\\s?(?=\\d)"), () => "number "],
  [r("#(?=\\d)"), () => "number "],
  [r('\\b(?:https?://|www\\.)[^\\s<>"]+[^\\s<>".,;:!?)]'),
    (m) => spellAddress(m[0].replace(/^(https?:\/\/)?(www\.)?/, "").replace(/\/+$/, ""))],
  [r(`\\b(?<user>[${W}.+-]+)@(?<domain>[${W}-]+(?:\\.[${W}-]+)+)\\b`),
    (m) => spellAddress(m.groups.user) + " at " + spellAddress(m.groups.domain)],
  [r(`(?<=\\p{L})\\(s\\)(?![${W}])`), () => "s"],  // "file(s)": the plural a reader says
  [r("\\b(?<y>\\d{4})-(?<m>\\d{2})-(?<d>\\d{2})\\b"), (m, lang) => {
    const [y, mo, d] = [+m.groups.y, +m.groups.m, +m.groups.d];
    return 1 <= mo && mo <= 12 && 1 <= d && d <= 31 ? dateWords(mo, d, y, lang) : m[0];
  }],
  [r(`(?<![${W}/.,])(?<a>\\d{1,2})/(?<b>\\d{1,2})/(?<y>\\d{4}|\\d{2})(?![${W}/]|[.,]\\d)`), (m, lang) => {
    let [mo, d] = lang === "b" ? [+m.groups.b, +m.groups.a] : [+m.groups.a, +m.groups.b];
    const ok = () => 1 <= mo && mo <= 12 && 1 <= d && d <= 31;
    if (!ok()) { [mo, d] = [d, mo]; if (!ok()) return m[0]; }
    let y = +m.groups.y;
    if (m.groups.y.length === 2) y += y < 50 ? 2000 : 1900;
    return dateWords(mo, d, y, lang);
  }],
  [r(FRACTION + "(?<space> ?)(?<unit>°?[\\p{L}]+(?:/[\\p{L}]+)?)?"), (m, lang) => {
    const { whole, space, unit: unitText } = m.groups;
    const num = +m.groups.num, den = +m.groups.den;
    const unit = UNITS[unitText ?? ""];
    if (!(1 <= num && num < den && FRACTION_DENOMINATORS.has(den)) || (unitText && !space && !unit)) return m[0];
    let name = { 2: "half", 4: "quarter" }[den] ?? ordinal(den, lang).replace(/^one /, "");
    if (num > 1) name = den === 2 ? "halves" : name + "s";
    let words;
    if (whole === undefined) {
      words = `${cardinal(num, lang)} ${name}`;
      if (unit) words += ` of ${/^[aeiou]/.test(unit[0]) || unit[0].startsWith("hour") ? "an" : "a"} ${unit[0]}`;
    } else {
      words = `${cardinal(whole, lang)} and ${num === 1 ? "a" : cardinal(num, lang)} ${name}` + (unit ? ` ${unit[1]}` : "");
    }
    if (unit || !unitText) return words;
    // a word after the fraction that is not a unit is kept as written, over its own text
    const cut = m[0].length - space.length - unitText.length;
    return [[words, 0, cut], [space, cut, cut + space.length], [unitText, cut + space.length, m[0].length]];
  }],
  [r(`\\b(?<hour>\\d{1,2}):(?<minute>\\d{2})(?::(?<second>\\d{2}))?(?:\\s*(?<ampm>${AMPM}))?`), (m, lang) => {
    const hour = +m.groups.hour, minute = +m.groups.minute, { ampm, second } = m.groups;
    if (hour > 24 || minute > 59) return m[0];
    let words = cardinal(hour, lang);
    if (minute === 0) words += ampm ? "" : " o'clock";
    else words += minute < 10 ? ` oh ${cardinal(minute, lang)}` : ` ${cardinal(minute, lang)}`;
    if (second) words += ` and ${cardinal(+second, lang)} seconds`;
    return ampm ? words + " " + ampmWords(ampm) : words;
  }],
  [r(`\\b(?<hour>\\d{1,2})\\s*(?<ampm>${AMPM})`), (m, lang) => {
    const hour = +m.groups.hour;
    return 1 <= hour && hour <= 12 ? cardinal(hour, lang) + " " + ampmWords(m.groups.ampm) : m[0];
  }],
  [r(`(?<![${W}-])(?:\\(\\d{3}\\)\\s?|\\d{3}[-.\\s])?\\d{3}-\\d{4}(?![${W}-])`),
    (m) => m[0].match(/\d+/g).map(digits).join(", ")],
  [r(`(?<sign>[$€£¥₹])\\s?(?<amount>${NUMBER})(?:\\s(?<scale>thousand|million|billion|trillion)\\b)?`), (m, lang) => {
    const [unit, cent] = CURRENCIES[m.groups.sign];
    const amount = m.groups.amount.replaceAll(",", "");
    if (m.groups.scale) return `${cardinal(amount, lang)} ${m.groups.scale} ${unit[1]}`;
    const [whole, cents = ""] = amount.split(".");
    const units = `${cardinal(whole || "0", lang)} ${plural(whole, unit)}`;
    if (cents.length === 2) {
      if (+cents === 0) return units;
      const c = cents.replace(/^0+/, "") || "0";
      const centWords = `${cardinal(c, lang)} ${plural(c, cent)}`;
      return +(whole || 0) === 0 ? centWords : `${units} and ${centWords}`;
    }
    return cents ? `${cardinal(amount, lang)} ${unit[1]}` : units;
  }],
  [r(`(?<![${W}.,])(?<number>[-−]?(?:${NUMBER}))\\s?%`), (m, lang) => spellNumber(m.groups.number, lang) + " percent"],
  [r(`(?<![${W}.,])(?<year>1[1-9]\\d0|20\\d0)(?<s>s)\\b`), (m, lang) => yearWords(m, lang)],
  [r(`(?<![${W}.,])(?<number>[-−]?(?:${NUMBER}))\\s?(?<unit>${UNIT_NAMES})(?![${W}/])`), (m, lang) => {
    const number = m.groups.number.replace("−", "-");
    return `${cardinal(number, lang)} ${plural(number, UNITS[m.groups.unit])}`;
  }],
  [r(`\\b(?<month>${MONTH_NAMES})\\s+(?<day>\\d{1,2})(?:st|nd|rd|th)?\\b`), (m, lang) => {
    const month = MONTH_ABBR[m.groups.month.slice(0, 4).replace(/\.$/, "")] ?? MONTH_ABBR[m.groups.month.slice(0, 3)];
    const day = +m.groups.day;
    return month && 1 <= day && day <= 31 ? `${month} ${ordinal(day, lang)}` : m[0];
  }],
  [r("\\b(?<n>\\d+)(?:st|nd|rd|th)\\b"), (m, lang) => ordinal(+m.groups.n, lang)],
  [r(`(?<![${W}.,-])(?<a>\\d+)\\s?[-–]\\s?(?<b>\\d+)(?![${W}-]|[.,]\\d)`),
    (m, lang) => `${cardinal(m.groups.a, lang)} to ${cardinal(m.groups.b, lang)}`],
  [r(`(?<![${W}.,])(?<year>1[1-9]\\d\\d|20\\d\\d)(?<s>s)?(?![${W}]|[.,]\\d)`), (m, lang) => yearWords(m, lang)],
  [r(`(?<![${W}.,])[-−]?(?:${NUMBER})(?![${W}]|[.,]\\d)`), (m, lang) => spellNumber(m[0], lang)],
  // "Main St." is a street, "St. Louis" a saint
  // (JS never lets an optional group match empty: "(?:(?<end>...)|)", not "(?<end>...)?")
  [r("(?<=\\b[A-Z][a-z]+\\s+)St\\.(?:(?<end>\\s*$)|)(?=\\s+[a-z\\d]|[,;:!?)]|$)"),
    (m) => "Street" + (m.groups.end !== undefined ? "." : "")],  // "Street" spans "St."
  [r(`\\b(?:(?<title>${Object.keys(TITLES).join("|")})\\.(?=\\s+[A-Z])|(?<always>Mr|Mrs|Ms|Dr|Prof)\\.(?=\\s))`),
    (m) => TITLES[m.groups.title ?? m.groups.always]],
  [r(`(?<![${W}.])(?<abbr>${Object.keys(ABBREVIATIONS).map(esc).join("|")})(?:(?<last>(?=\\s*$))|(?<capital>(?=\\s+[A-Z]))|)`), (m) => {
    const { abbr, last, capital } = m.groups;
    const ends = last !== undefined || (capital !== undefined && CAN_END_SENTENCE.has(abbr));
    return ABBREVIATIONS[abbr] + (ends ? "." : "");
  }],
  [r(`[${esc(Object.keys(SYMBOL_WORDS).join(""))}]`), (m) => SYMBOL_WORDS[m[0]]],
];

function yearWords(m, lang) {
  const words = year(+m.groups.year, lang);
  if (!m.groups.s) return words;
  return words.endsWith("y") ? words.slice(0, -1) + "ies" : words + "s";
}

function normalize(text, lang) {
  // clean.py, in short: format and control characters out, NFKC (but "…"), one space
  text = text.sub(/[\p{Cf}]/gu, () => "");
  text = text.sub(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, () => " ");
  // NFKC a character at a time: "1½" is the mixed number "1 1⁄2" (NFKC alone: "11⁄2")
  text = text.sub(/[^\x00-\x7f…]/gu, (m) => {
    const out = m[0].normalize("NFKC");
    return out.includes("\u2044") && /\d/.test(text.text[m.index - 1] ?? "") ? " " + out : out;
  });
  const rules = /\d/.test(text.text) ? RULES : RULES.filter((_, i) => [2, 3, 4, 20, 21, 22, 23].includes(i));
  for (const [pattern, rule] of rules) text = text.sub(pattern, (m) => rule(m, lang));
  // clean.drop_symbols: symbols and emoji with no reading out (currency signs, % kept)
  text = text.sub(/[\ufe0e\ufe0f\u{1f3fb}-\u{1f3ff}]/gu, () => "");
  text = text.sub(/[\p{S}\p{C}]/gu, (m) => "\n\t$€£¥₹%".includes(m[0]) ? m[0] : " ");
  return text.sub(/\s+/g, (m) => m[0] === " " ? m[0] : " ");
}

// --- tokenizer (tokenizer.py: spaCy's splits that change what misaki says) --------------

const PREFIX = new Set("\"'“‘«([{*<¿¡$£€¥₹#&");
const SUFFIX = new Set("\"'”’»)]}>,;:!?%°#");
const CLITICS = ["'s", "’s", "'S", "n't", "n’t", "'m", "’m", "'re", "’re", "'ve", "’ve",
  "'ll", "’ll", "'d", "’d"];
const TOKEN_UNITS = /(?<=\d)(km|m|dm|cm|mm|ha|µm|nm|yd|in|ft|kg|g|mg|µg|t|lb|oz|m\/s|km\/h|kmh|mph|hPa|Pa|mbar|mb|MB|kb|KB|gb|GB|tb|TB|T|G|M|K|am|pm|a\.m\.|p\.m\.)$/u;
const TOKEN_ABBREVIATIONS = new Set(("Mr. Mrs. Ms. Dr. St. Mt. Jr. Prof. Gen. Gov. Rep. Sen. " +
  "Rev. Co. Corp. Inc. Ltd. Bros. vs. Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. " +
  "Dec. Ala. Ariz. Ark. Calif. Colo. Conn. Del. Fla. Ga. Ill. Ind. Kan. Ky. La. Md. Mass. " +
  "Mich. Minn. Miss. Mo. Mont. Neb. Nev. Okla. Ore. Pa. Tenn. Va. Wash. Wis. a.m. p.m. e.g. " +
  "i.e. Ph.D. PhD.").split(" "));
const KEEPS_PERIOD = /^(?:(?:[A-Za-z]\.)*[A-Z]\.|[a-z]\.)$/;
const INFIX = /(\.\.+|…|(?<=[\p{L}\p{N}])(?:--|-|–|—|~)(?=\p{L})|(?<=[\p{L}\p{N}])[:<>=](?=\p{L})|(?<=\p{L}),(?=\p{L})|(?<=\d)[-+*^](?=[\d-]))/u;
const WORD_CHAR = /[\p{L}\p{N}]/u;

const isPunct = (text) => /^\p{P}+$/u.test(text);
const tagOf = (text) => text === "(" ? "-LRB-" : text === ")" ? "-RRB-" : isPunct(text) ? "." : "";

function splitWord(word) {
  const prefixes = [], suffixes = [];
  for (;;) {
    if (TOKEN_ABBREVIATIONS.has(word)) break;
    if (word.length > 1 && PREFIX.has(word[0])) { prefixes.push(word[0]); word = word.slice(1); continue; }
    const bare = word.replace(/[.…]+$/, "");
    if (/(\.\.\.|…)$/.test(word) && word.length > 1 && bare) {
      suffixes.push(word.slice(bare.length)); word = bare; continue;
    }
    const unit = TOKEN_UNITS.exec(word);
    if (unit && unit.index > 0) { suffixes.push(unit[0]); word = word.slice(0, unit.index); continue; }
    if (word.length > 1 && word.endsWith(".") && !KEEPS_PERIOD.test(word)) {
      suffixes.push("."); word = word.slice(0, -1); continue;
    }
    if (word.length > 1 && SUFFIX.has(word.at(-1))) { suffixes.push(word.at(-1)); word = word.slice(0, -1); continue; }
    const clitic = CLITICS.find((c) => word.endsWith(c) && word.length > c.length);
    if (clitic) { suffixes.push(clitic); word = word.slice(0, -clitic.length); continue; }
    break;
  }
  const middle = word ? word.split(INFIX).filter((p) => p) : [];
  return [...prefixes, ...middle, ...suffixes.reverse()];
}

// Tokens {text, tag, whitespace, start, end}: start/end index the normalized text
function tokenize(text) {
  const tokens = [];
  for (const m of text.matchAll(/(\S+)(\s*)/g)) {
    let at = m.index;
    const parts = splitWord(m[1]);
    parts.forEach((part, i) => {
      const space = i === parts.length - 1 ? m[2].slice(0, 1) : "";
      tokens.push({ text: part, tag: tagOf(part), whitespace: space, start: at, end: at + part.length });
      at += part.length;
    });
  }
  return tokens;
}

// --- misaki's English G2P (misaki/en.py, version 0.9.4) --------------------------------

const DIPHTHONGS = new Set("AIOQWYʤʧ");
const SUBTOKEN = /^['‘’]+|\p{Lu}(?=\p{Lu}\p{Ll})|(?:^-)?(?:\d?[,.]?\d)+|[-_]+|['‘’]{2,}|\p{L}*?(?:['‘’]\p{L})*?\p{Ll}(?=\p{Lu})|\p{L}+(?:['‘’]\p{L})*|[^-_\p{L}'‘’\d]|['‘’]+$/gu;
const SUBTOKEN_JUNKS = new Set("',-._‘’/");
const PUNCTS = new Set(';:,.!?—…"“”');
const NON_QUOTE_PUNCTS = new Set(';:,.!?—…');
const PUNCT_TAGS = new Set([".", ",", "-LRB-", "-RRB-", "``", '""', "''", ":", "$", "#", "NFP"]);
const PUNCT_TAG_PHONEMES = { "-LRB-": "(", "-RRB-": ")", "``": "“", '""': "”", "''": "”" };
const CONSONANTS = new Set("bdfhjklmnpstvwzðŋɡɹɾʃʒʤʧθ");
const US_TAUS = new Set("AIOWYiuæɑəɛɪɹʊʌ");
const M_CURRENCIES = { "$": ["dollar", "cent"], "£": ["pound", "pence"], "€": ["euro", "cent"] };
const ORDINALS = new Set(["st", "nd", "rd", "th"]);
const ADD_SYMBOLS = { ".": "dot", "/": "slash" };
const SYMBOLS = { "%": "percent", "&": "and", "+": "plus", "@": "at" };
const PRIMARY = "ˈ", SECONDARY = "ˌ";
const VOWELS = new Set("AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ");

const isAlpha = (s) => /^\p{L}+$/u.test(s);
const isDigits = (s) => /^[0-9]+$/.test(s);
const lower = (s) => s.toLowerCase();
const upper = (s) => s.toUpperCase();
const capitalize = (s) => s.slice(0, 1).toUpperCase() + s.slice(1).toLowerCase();
const inLexiconOrds = (s) => /^['\-A-Za-z]*$/.test(s);
const hasStress = (ps) => ps.includes(PRIMARY) || ps.includes(SECONDARY);
const hasVowel = (ps) => Array.from(ps).some((c) => VOWELS.has(c));
const stressWeight = (ps) => ps ? Array.from(ps).reduce((n, c) => n + (DIPHTHONGS.has(c) ? 2 : 1), 0) : 0;

function applyStress(ps, stress) {
  const restress = (ps) => {
    const ips = Array.from(ps, (p, i) => [i, p]);
    for (const [i, p] of ips.slice()) {
      if (p !== PRIMARY && p !== SECONDARY) continue;
      const j = ips.findIndex(([, v], k) => k >= i && VOWELS.has(v));
      ips[i] = [j - 0.5, p];
    }
    return ips.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)).map(([, p]) => p).join("");
  };
  if (stress == null || ps == null) return ps;
  if (stress < -1) return ps.replaceAll(PRIMARY, "").replaceAll(SECONDARY, "");
  if (stress === -1 || ((stress === 0 || stress === -0.5) && ps.includes(PRIMARY))) {
    return ps.replaceAll(SECONDARY, "").replaceAll(PRIMARY, SECONDARY);
  }
  if ([0, 0.5, 1].includes(stress) && !hasStress(ps)) return hasVowel(ps) ? restress(SECONDARY + ps) : ps;
  if (stress >= 1 && !ps.includes(PRIMARY) && ps.includes(SECONDARY)) return ps.replaceAll(SECONDARY, PRIMARY);
  if (stress > 1 && !hasStress(ps)) return hasVowel(ps) ? restress(PRIMARY + ps) : ps;
  return ps;
}

// Lexicon.grow_dictionary's entries looked up rather than built (g2p.py's _GrownDictionary).
// The parsed JSON is not kept: its 180k small strings and hash tables are most of the
// page's JS heap (en-us: 24 MB; held as below, 6.5 MB; tests/test_web_lexicon.py measures
// both).  Held instead: the keys sorted (UTF-16 code units, as `<`) in one flat string,
// the values in another, each with a Uint32Array of offsets, and the few values that are
// not strings (misaki's {POS: phonemes}) in a Map; own() is a binary search.  Array.join
// makes flat strings (`+=` would make ropes of 180k pieces).  Exported for that test.
export class Grown {
  constructor(entries) {
    const keys = Object.keys(entries).sort(), values = [];
    this.others = new Map();
    this.keyEnds = new Uint32Array(keys.length + 1);
    this.valueEnds = new Uint32Array(keys.length + 1);
    keys.forEach((key, i) => {
      const value = entries[key], string = typeof value === "string";
      if (string) values.push(value); else this.others.set(i, value);
      this.keyEnds[i + 1] = this.keyEnds[i] + key.length;
      this.valueEnds[i + 1] = this.valueEnds[i] + (string ? value.length : 0);
    });
    this.keys = keys.join("");
    this.values = values.join("");
  }
  // key i against word: <0, 0, >0 as key < word, ===, > (no substring made)
  compare(i, word) {
    const start = this.keyEnds[i], length = this.keyEnds[i + 1] - start, n = Math.min(length, word.length);
    for (let j = 0; j < n; j++) {
      const d = this.keys.charCodeAt(start + j) - word.charCodeAt(j);
      if (d !== 0) return d;
    }
    return length - word.length;
  }
  own(word) {
    let lo = 0, hi = this.keyEnds.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1, d = this.compare(mid, word);
      if (d === 0) return this.others.has(mid) ? this.others.get(mid) : this.values.slice(this.valueEnds[mid], this.valueEnds[mid + 1]);
      if (d < 0) lo = mid + 1; else hi = mid;
    }
    return undefined;
  }
  get(word) {
    let value = this.own(word);
    if (value !== undefined) return value;
    const low = lower(word);
    if (low.length >= 2 && capitalize(low) === word && word !== low) {
      value = this.own(low);
      if (value !== undefined) return value;
    }
    const capital = capitalize(word);
    if (capital.length >= 2 && capital !== lower(capital) && lower(capital) === word) return this.own(capital);
    return undefined;
  }
  has(word) { return this.get(word) !== undefined; }
}

const parentTag = (tag) => tag == null ? tag : tag.startsWith("VB") ? "VERB" : tag.startsWith("NN") ? "NOUN"
  : tag.startsWith("ADV") || tag.startsWith("RB") ? "ADV" : tag.startsWith("ADJ") || tag.startsWith("JJ") ? "ADJ" : tag;

class Lexicon {
  constructor(data, british) {
    this.british = british;
    this.golds = new Grown(data.gold);
    this.silvers = new Grown(data.silver);
  }

  getNNP(word) {
    const ps = Array.from(word).filter(isAlpha).map((c) => this.golds.get(upper(c)));
    if (ps.some((p) => p === undefined)) return [null, null];
    const stressed = applyStress(ps.join(""), 0);
    const at = stressed.lastIndexOf(SECONDARY);
    return [at < 0 ? stressed : stressed.slice(0, at) + PRIMARY + stressed.slice(at + 1), 3];
  }

  getSpecialCase(word, tag, stress, ctx) {
    if (tag === "ADD" && word in ADD_SYMBOLS) return this.lookup(ADD_SYMBOLS[word], null, -0.5, ctx);
    if (Object.hasOwn(SYMBOLS, word)) return this.lookup(SYMBOLS[word], null, null, ctx);
    const stripped = word.replace(/^\.+|\.+$/g, "");
    if (stripped.includes(".") && isAlpha(word.replaceAll(".", "")) &&
        Math.max(...word.split(".").map((s) => s.length)) < 3) return this.getNNP(word);
    if (word === "a" || word === "A") return [tag === "DT" ? "ɐ" : "ˈA", 4];
    if (["am", "Am", "AM"].includes(word)) {
      if (tag.startsWith("NN")) return this.getNNP(word);
      if (ctx.futureVowel == null || word !== "am" || (stress && stress > 0)) return [this.golds.get("am"), 4];
      return ["ɐm", 4];
    }
    if (["an", "An", "AN"].includes(word)) {
      if (word === "AN" && tag.startsWith("NN")) return this.getNNP(word);
      return ["ɐn", 4];
    }
    if (word === "I" && tag === "PRP") return [SECONDARY + "I", 4];
    if (["by", "By", "BY"].includes(word) && parentTag(tag) === "ADV") return ["bˈI", 4];
    if (word === "to" || word === "To" || (word === "TO" && (tag === "TO" || tag === "IN"))) {
      return [ctx.futureVowel == null ? this.golds.get("to") : ctx.futureVowel ? "tʊ" : "tə", 4];
    }
    if (word === "in" || word === "In" || (word === "IN" && tag !== "NNP")) {
      return [(ctx.futureVowel == null || tag !== "IN" ? PRIMARY : "") + "ɪn", 4];
    }
    if (word === "the" || word === "The" || (word === "THE" && tag === "DT")) {
      return [ctx.futureVowel === true ? "ði" : "ðə", 4];
    }
    if (tag === "IN" && /^vs\.?$/i.test(word)) return this.lookup("versus", null, null, ctx);
    if (["used", "Used", "USED"].includes(word)) {
      const used = this.golds.get("used");
      return [(tag === "VBD" || tag === "JJ") && ctx.futureTo ? used.VBD : used.DEFAULT, 4];
    }
    return [null, null];
  }

  isKnown(word, tag) {
    if (this.golds.has(word) || Object.hasOwn(SYMBOLS, word) || this.silvers.has(word)) return true;
    if (!isAlpha(word) || !inLexiconOrds(word)) return false;
    if (word.length === 1) return true;
    if (word === upper(word) && this.golds.has(lower(word))) return true;
    return word.slice(1) === upper(word.slice(1));
  }

  lookup(word, tag, stress, ctx) {
    let isNNP = null;
    if (word === upper(word) && !this.golds.has(word)) {
      word = lower(word);
      isNNP = tag === "NNP";
    }
    let ps = this.golds.get(word) ?? null, rating = 4;
    if (ps === null && !isNNP) { ps = this.silvers.get(word) ?? null; rating = 3; }
    if (ps !== null && typeof ps === "object") {
      if (ctx && ctx.futureVowel == null && "None" in ps) tag = "None";
      else if (!(tag in ps)) tag = parentTag(tag);
      ps = Object.hasOwn(ps, tag) ? ps[tag] : ps.DEFAULT;
    }
    if (ps == null || (isNNP && !ps.includes(PRIMARY))) {
      const [nnp, nnpRating] = this.getNNP(word);
      if (nnp !== null) return [nnp, nnpRating];
    }
    return [applyStress(ps, stress), rating];
  }

  _s(stem) {
    if (!stem) return null;
    if ("ptkfθ".includes(stem.at(-1))) return stem + "s";
    if ("szʃʒʧʤ".includes(stem.at(-1))) return stem + (this.british ? "ɪ" : "ᵻ") + "z";
    return stem + "z";
  }

  stemS(word, tag, stress, ctx) {
    if (word.length < 3 || !word.endsWith("s")) return [null, null];
    let stem;
    if (!word.endsWith("ss") && this.isKnown(word.slice(0, -1), tag)) stem = word.slice(0, -1);
    else if ((word.endsWith("'s") || (word.length > 4 && word.endsWith("es") && !word.endsWith("ies"))) &&
             this.isKnown(word.slice(0, -2), tag)) stem = word.slice(0, -2);
    else if (word.length > 4 && word.endsWith("ies") && this.isKnown(word.slice(0, -3) + "y", tag)) stem = word.slice(0, -3) + "y";
    else return [null, null];
    const [ps, rating] = this.lookup(stem, tag, stress, ctx);
    return [this._s(ps), rating];
  }

  _ed(stem) {
    if (!stem) return null;
    const last = stem.at(-1);
    if ("pkfθʃsʧ".includes(last)) return stem + "t";
    if (last === "d") return stem + (this.british ? "ɪ" : "ᵻ") + "d";
    if (last !== "t") return stem + "d";
    if (this.british || stem.length < 2) return stem + "ɪd";
    if (US_TAUS.has(stem.at(-2))) return stem.slice(0, -1) + "ɾᵻd";
    return stem + "ᵻd";
  }

  stemEd(word, tag, stress, ctx) {
    if (word.length < 4 || !word.endsWith("d")) return [null, null];
    let stem;
    if (!word.endsWith("dd") && this.isKnown(word.slice(0, -1), tag)) stem = word.slice(0, -1);
    else if (word.length > 4 && word.endsWith("ed") && !word.endsWith("eed") && this.isKnown(word.slice(0, -2), tag)) stem = word.slice(0, -2);
    else return [null, null];
    const [ps, rating] = this.lookup(stem, tag, stress, ctx);
    return [this._ed(ps), rating];
  }

  _ing(stem) {
    if (!stem) return null;
    if (this.british) { if ("əː".includes(stem.at(-1))) return null; }
    else if (stem.length > 1 && stem.at(-1) === "t" && US_TAUS.has(stem.at(-2))) return stem.slice(0, -1) + "ɾɪŋ";
    return stem + "ɪŋ";
  }

  stemIng(word, tag, stress, ctx) {
    if (word.length < 5 || !word.endsWith("ing")) return [null, null];
    let stem;
    if (word.length > 5 && this.isKnown(word.slice(0, -3), tag)) stem = word.slice(0, -3);
    else if (this.isKnown(word.slice(0, -3) + "e", tag)) stem = word.slice(0, -3) + "e";
    else if (word.length > 5 && /([bcdgklmnprstvxz])\1ing$|cking$/.test(word) && this.isKnown(word.slice(0, -4), tag)) stem = word.slice(0, -4);
    else return [null, null];
    const [ps, rating] = this.lookup(stem, tag, stress, ctx);
    return [this._ing(ps), rating];
  }

  getWord(word, tag, stress, ctx) {
    let [ps, rating] = this.getSpecialCase(word, tag, stress, ctx);
    if (ps !== null) return [ps, rating];
    const wl = lower(word);
    if (word.length > 1 && isAlpha(word.replaceAll("'", "")) && word !== wl &&
        (tag !== "NNP" || word.length > 7) && !this.golds.has(word) && !this.silvers.has(word) &&
        (word === upper(word) || word.slice(1) === lower(word.slice(1))) &&
        (this.golds.has(wl) || this.silvers.has(wl) ||
         [this.stemS, this.stemEd, this.stemIng].some((fn) => fn.call(this, wl, tag, stress, ctx)[0]))) {
      word = wl;
    }
    if (this.isKnown(word, tag)) return this.lookup(word, tag, stress, ctx);
    if (word.endsWith("s'") && this.isKnown(word.slice(0, -2) + "'s", tag)) return this.lookup(word.slice(0, -2) + "'s", tag, stress, ctx);
    if (word.endsWith("'") && this.isKnown(word.slice(0, -1), tag)) return this.lookup(word.slice(0, -1), tag, stress, ctx);
    for (const [fn, s] of [[this.stemS, stress], [this.stemEd, stress], [this.stemIng, stress ?? 0.5]]) {
      [ps, rating] = fn.call(this, word, tag, s, ctx);
      if (ps !== null) return [ps, rating];
    }
    return [null, null];
  }

  static isCurrency(word) {
    if (!word.includes(".")) return true;
    if (word.split(".").length > 2) return false;
    return word.split(".")[1].length < 3;
  }

  getNumber(word, currency, isHead, numFlags) {
    let suffix = /[a-z']+$/.exec(word)?.[0] ?? null;
    if (suffix) word = word.slice(0, -suffix.length);
    const result = [];
    if (word.startsWith("-")) { result.push(this.lookup("minus", null, null, null)); word = word.slice(1); }
    const extend = (num, first = true, escape = false) => {
      const splits = (escape ? num : num2words(parseInt(num, 10))).split(/[^a-z]+/);
      splits.forEach((w, i) => {
        if (w !== "and" || numFlags.includes("&")) {
          if (first && i === 0 && splits.length > 1 && w === "one" && numFlags.includes("a")) result.push(["ə", 4]);
          else result.push(this.lookup(w, null, w === "point" ? -2 : null, null));
        } else if (w === "and" && numFlags.includes("n") && result.length) {
          result[result.length - 1] = [result.at(-1)[0] + "ən", result.at(-1)[1]];
        }
      });
    };
    if (isDigits(word) && ORDINALS.has(suffix)) extend(num2ordinal(+word), true, true);
    else if (!result.length && word.length === 4 && !(currency in M_CURRENCIES) && isDigits(word)) extend(num2year(+word), true, true);
    else if (!isHead && !word.includes(".")) {
      const num = word.replaceAll(",", "");
      if (num[0] === "0" || num.length > 3) for (const n of num) extend(n, false);
      else if (num.length === 3 && !num.endsWith("00")) {
        extend(num[0]);
        if (num[1] === "0") { result.push(this.lookup("O", null, -2, null)); extend(num[2], false); }
        else extend(num.slice(1), false);
      } else extend(num);
    } else if (word.split(".").length > 2 || !isHead) {
      let first = true;
      for (const num of word.replaceAll(",", "").split(".")) {
        if (!num) { /* nothing */ } else if (num[0] === "0" || (num.length !== 2 && Array.from(num.slice(1)).some((n) => n !== "0"))) {
          for (const n of num) extend(n, false);
        } else extend(num, first);
        first = false;
      }
    } else if (currency in M_CURRENCIES && Lexicon.isCurrency(word)) {
      let pairs = word.replaceAll(",", "").split(".").slice(0, 2).map((num, i) => [num ? parseInt(num, 10) : 0, M_CURRENCIES[currency][i]]);
      if (pairs.length > 1) { if (pairs[1][0] === 0) pairs = pairs.slice(0, 1); else if (pairs[0][0] === 0) pairs = pairs.slice(1); }
      pairs.forEach(([num, unit], i) => {
        if (i > 0) result.push(this.lookup("and", null, null, null));
        extend(String(num), i === 0);
        result.push(Math.abs(num) !== 1 && unit !== "pence" ? this.stemS(unit + "s", null, null, null) : this.lookup(unit, null, null, null));
      });
    } else {
      let words;
      if (isDigits(word)) words = num2words(+word);
      else if (!word.includes(".")) words = ORDINALS.has(suffix) ? num2ordinal(+word.replaceAll(",", "")) : num2words(+word.replaceAll(",", ""));
      else {
        const w = word.replaceAll(",", "");
        words = w[0] === "." ? "point " + Array.from(w.slice(1), (n) => ONES[+n]).join(" ") : cardinal(w, "b");
      }
      extend(words, true, true);
    }
    if (!result.length || result.some(([p]) => p == null)) return [null, null];
    const ps = result.map(([p]) => p).join(" "), rating = Math.min(...result.map(([, r]) => r));
    if (suffix === "s" || suffix === "'s") return [this._s(ps), rating];
    if (suffix === "ed" || suffix === "'d") return [this._ed(ps), rating];
    if (suffix === "ing") return [this._ing(ps), rating];
    return [ps, rating];
  }

  appendCurrency(ps, currency) {
    if (!currency) return ps;
    const unit = M_CURRENCIES[currency];
    const name = unit ? this.stemS(unit[0] + "s", null, null, null)[0] : null;
    return name ? `${ps} ${name}` : ps;
  }

  static isNumber(word, isHead) {
    if (!/[0-9]/.test(word)) return false;
    for (const s of ["ing", "'d", "ed", "'s", ...ORDINALS, "s"]) {
      if (word.endsWith(s)) { word = word.slice(0, -s.length); break; }
    }
    return Array.from(word).every((c, i) => /[0-9,.]/.test(c) || (isHead && i === 0 && c === "-"));
  }

  call(tk, ctx) {
    let word = (tk.alias ?? tk.text).replaceAll("‘", "'").replaceAll("’", "'").normalize("NFKC");
    const stress = word === lower(word) ? null : word === upper(word) ? 2 : 0.5;
    const [ps, rating] = this.getWord(word, tk.tag, stress, ctx);
    if (ps !== null) return [applyStress(this.appendCurrency(ps, tk.currency), tk.stress), rating];
    if (Lexicon.isNumber(word, tk.isHead)) {
      const [n, r] = this.getNumber(word, tk.currency, tk.isHead, tk.numFlags);
      return [applyStress(n, tk.stress), r];
    }
    return [null, null];
  }
}

// misaki's EspeakFallback: espeak-ng's IPA in misaki's symbols.  npm phonemizer writes no
// tie bars, so its two-letter diphthongs and affricates are mapped as misaki maps the tied.
const E2M = [["ʔˌn\u0329", "ʔn"], ["ʔn\u0329", "ʔn"], ["aɪ", "I"], ["aʊ", "W"], ["dʒ", "ʤ"],
  ["eɪ", "A"], ["tʃ", "ʧ"], ["ɔɪ", "Y"], ["ʲo", "jo"], ["ʲə", "jə"], ["ʲ", ""], ["ɚ", "əɹ"],
  ["e", "A"], ["r", "ɹ"], ["x", "k"], ["ç", "k"], ["ɐ", "ə"], ["ɬ", "l"], ["\u0303", ""]];
const E2M_GB = [["iə", "ɪə"], ["əʊ", "Q"]];  // misaki's "e^ə" -> "ɛː" never matches: "e" -> "A" came first
const E2M_US = [["oʊ", "O"], ["ɜːɹ", "ɜɹ"], ["ɜː", "ɜɹ"], ["ɪə", "iə"], ["ː", ""]];

const MARKS = /^[;:,.!?¡¿—…"«»“”(){}[\]]+$/;
async function espeak(text, british, phonemizerURL) {
  const { phonemize } = await once(`module:${phonemizerURL}`, () => import(phonemizerURL));
  // python phonemizer's preserve_punctuation: the marks kept where they stand ("St." is
  // "sənt."); npm phonemizer drops them
  // "en" (espeak-ng's British voice): npm phonemizer 1.2.1 set to "en-gb" after "en-us"
  // keeps speaking American
  const language = british ? "en" : "en-us";
  const pieces = text.split(/([;:,.!?¡¿—…"«»“”(){}[\]]+)/).filter((p) => p.trim());
  const said = pieces.filter((p) => !MARKS.test(p));
  let lines = await phonemize(text, language);  // whole: espeak reads "St." as a title
  if (lines.length !== said.length) lines = await Promise.all(said.map(async (p) => (await phonemize(p, language)).join(" ")));
  let ps = pieces.map((p) => MARKS.test(p) ? p : lines.shift().trim()).join("").trim();
  if (!ps) return [null, null];
  for (const [a, b] of E2M) ps = ps.replaceAll(a, b);
  ps = ps.replace(/(\S)\u0329/gu, "ᵊ$1").replaceAll("\u0329", "");
  for (const [a, b] of british ? E2M_GB : E2M_US) ps = ps.replaceAll(a, b);
  ps = ps.replaceAll("o", "ɔ").replaceAll("ɾ", "T").replaceAll("ʔ", "t");
  return [ps, 2];
}

function mergeTokens(tokens, unk) {
  const stresses = new Set(tokens.map((t) => t.stress).filter((s) => s != null));
  let phonemes = null;
  if (unk != null) {
    phonemes = "";
    for (const t of tokens) {
      if (t.prespace && phonemes && !/\s$/.test(phonemes) && t.phonemes) phonemes += " ";
      phonemes += t.phonemes ?? unk;
    }
  }
  const weight = (t) => Array.from(t.text).reduce((n, c) => n + (c === lower(c) ? 1 : 2), 0);
  const tag = tokens.reduce((best, t) => weight(t) > weight(best) ? t : best).tag;
  return {
    text: tokens.slice(0, -1).map((t) => t.text + t.whitespace).join("") + tokens.at(-1).text,
    tag, whitespace: tokens.at(-1).whitespace, phonemes, isHead: tokens[0].isHead, alias: null,
    stress: stresses.size === 1 ? [...stresses][0] : null, currency: null, numFlags: "",
    prespace: tokens[0].prespace, start: tokens[0].start, end: tokens.at(-1).end,
  };
}

function retokenize(tokens) {
  const words = [];
  tokens.forEach((token, i) => {
    const texts = token.phonemes != null ? [token.text] : token.text.match(SUBTOKEN) ?? [token.text];
    let at = token.start;
    const tks = texts.map((t) => {
      const start = token.text.indexOf(t, at - token.start) + token.start;
      at = start + t.length;
      return { ...token, text: t, whitespace: "", isHead: true, prespace: false, start, end: at };
    });
    tks.at(-1).whitespace = token.whitespace;
    tks.forEach((tk, j) => {
      if (tk.alias == null && tk.phonemes == null) {
        if (PUNCT_TAGS.has(tk.tag) && !/^[a-z]+$/.test(lower(tk.text))) {
          tk.phonemes = PUNCT_TAG_PHONEMES[tk.tag] ?? Array.from(tk.text).filter((c) => PUNCTS.has(c)).join("");
        } else if (0 < j && j < tks.length - 1 && tk.text === "2" && isAlpha(tks[j - 1].text.at(-1) + tks[j + 1].text[0])) {
          tk.alias = "to";
        }
      }
      const last = words.at(-1);
      if (tk.alias != null || tk.phonemes != null) words.push(tk);
      else if (Array.isArray(last) && !last.at(-1).whitespace) { tk.isHead = false; last.push(tk); }
      else words.push(tk.whitespace ? tk : [tk]);
    });
  });
  return words.map((w) => Array.isArray(w) && w.length === 1 ? w[0] : w);
}

function tokenContext(ctx, ps, token) {
  let vowel = ctx.futureVowel;
  for (const c of ps ?? "") {
    if (VOWELS.has(c) || CONSONANTS.has(c) || NON_QUOTE_PUNCTS.has(c)) {
      vowel = NON_QUOTE_PUNCTS.has(c) ? null : VOWELS.has(c);
      break;
    }
  }
  const t = token.text;
  return { futureVowel: vowel, futureTo: t === "to" || t === "To" || (t === "TO" && (token.tag === "TO" || token.tag === "IN")) };
}

function resolveTokens(tokens) {
  const text = tokens.slice(0, -1).map((t) => t.text + t.whitespace).join("") + tokens.at(-1).text;
  const kinds = new Set(Array.from(text).filter((c) => !SUBTOKEN_JUNKS.has(c))
    .map((c) => isAlpha(c) ? 0 : isDigits(c) ? 1 : 2));
  const prespace = text.includes(" ") || text.includes("/") || kinds.size > 1;
  tokens.forEach((tk, i) => {
    if (tk.phonemes == null) {
      if (i === tokens.length - 1 && NON_QUOTE_PUNCTS.has(tk.text)) tk.phonemes = tk.text;
      else if (Array.from(tk.text).every((c) => SUBTOKEN_JUNKS.has(c))) tk.phonemes = "";
    } else if (i > 0) tk.prespace = prespace;
  });
  if (prespace) return;
  let indices = tokens.map((tk, i) => [tk.phonemes?.includes(PRIMARY) ? 1 : 0, stressWeight(tk.phonemes), i])
    .filter(([, , i]) => tokens[i].phonemes);
  if (indices.length === 2 && tokens[indices[0][2]].text.length === 1) {
    const i = indices[1][2];
    tokens[i].phonemes = applyStress(tokens[i].phonemes, -0.5);
    return;
  }
  if (indices.length < 2 || indices.reduce((n, [b]) => n + b, 0) <= Math.floor((indices.length + 1) / 2)) return;
  indices = indices.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]).slice(0, Math.floor(indices.length / 2));
  for (const [, , i] of indices) tokens[i].phonemes = applyStress(tokens[i].phonemes, -0.5);
}

// misaki's links: [text](/phonemes/), [text](stress: -2 to 2), [text](#number flags#)
const LINK = /\[([^\]]+)\]\(([^)]*)\)/g;
function readLinks(text, features) {
  return text.sub(LINK, (m) => {
    let f = m[2];
    if (/^[-+]?[0-9]+$/.test(f)) f = parseInt(f, 10);
    else if (["0.5", "+0.5", "-0.5"].includes(f)) f = parseFloat(f);
    else if (f.length > 1 && f[0] === "/" && f.at(-1) === "/") f = "/" + f.slice(1).replace(/\/+$/, "");
    else if (f.length > 1 && f[0] === "#" && f.at(-1) === "#") f = "#" + f.slice(1).replace(/#+$/, "");
    else f = null;
    const at = m.index + 1, end = at + m[1].length;  // the link's text, over its own characters
    if (f !== null) features.push({ start: text.spans[at][0], end: text.spans[end - 1][1], f });
    return [[m[1], 1, 1 + m[1].length]];
  });
}

// G2P.tokenize's features on the tokens whose text comes from the link, then fold_left
function withFeatures(tokens, features, origin) {
  for (const { start, end, f } of features) {
    tokens.filter((t) => start <= origin(t.start) && origin(t.start) < end).forEach((t, i) => {
      if (typeof f === "number") t.stress = f;
      else if (f[0] === "/") { t.isHead = i === 0; t.phonemes = i === 0 ? f.slice(1) : ""; }
      else t.numFlags = f.slice(1);
    });
  }
  const folded = [];
  for (const t of tokens) folded.push(folded.length && !t.isHead ? mergeTokens([folded.pop(), t], "") : t);
  return folded;
}

async function g2p(tokens, lexicon, fallback) {
  tokens = retokenize(tokens);
  let ctx = { futureVowel: null, futureTo: false };
  for (let i = tokens.length - 1; i >= 0; i--) {
    const w = tokens[i];
    if (!Array.isArray(w)) {
      if (w.phonemes == null) [w.phonemes] = lexicon.call(w, ctx);
      if (w.phonemes == null) [w.phonemes] = await fallback(w.text);
      ctx = tokenContext(ctx, w.phonemes, w);
      continue;
    }
    let left = 0, right = w.length, shouldFallback = false;
    while (left < right) {
      const span = w.slice(left, right);
      const tk = span.some((t) => t.alias != null || t.phonemes != null) ? null : mergeTokens(span);
      const [ps] = tk === null ? [null] : lexicon.call(tk, ctx);
      if (ps != null) {
        w[left].phonemes = ps;
        for (const x of w.slice(left + 1, right)) x.phonemes = "";
        ctx = tokenContext(ctx, ps, tk);
        right = left;
        left = 0;
      } else if (left + 1 < right) {
        left += 1;
      } else {
        right -= 1;
        const t = w[right];
        if (t.phonemes == null) {
          if (Array.from(t.text).every((c) => SUBTOKEN_JUNKS.has(c))) t.phonemes = "";
          else { shouldFallback = true; break; }
        }
        left = 0;
      }
    }
    if (shouldFallback) {
      [w[0].phonemes] = await fallback(mergeTokens(w).text);
      for (const x of w.slice(1)) x.phonemes = "";
    } else {
      resolveTokens(w);
    }
  }
  return tokens.map((t) => Array.isArray(t) ? mergeTokens(t, "") : t).map((t) => {
    if (t.phonemes) t.phonemes = t.phonemes.replaceAll("ɾ", "T").replaceAll("ʔ", "t");
    return t;
  });
}

// chunking.group_words: tokens glued together are one word unless one ends a clause
const CLAUSE_END = new Set(",;:—…");
function groupWords(tokens) {
  const words = [];
  let text = "", phonemes = "", start = null, end = null;
  tokens.forEach((t, i) => {
    text += t.text + t.whitespace;
    phonemes += (t.phonemes ?? "") + t.whitespace;
    start ??= t.start;
    end = t.end;
    // a token without phonemes ends a word too (Python's `"" in CLAUSE_END`): "seventy-" "nine"
    const last = (t.phonemes ?? "").at(-1);
    if (t.whitespace || i === tokens.length - 1 || last === undefined || CLAUSE_END.has(last)) {
      if (text.trim() || phonemes.trim()) words.push({ text, phonemes, start, end });
      text = phonemes = "";
      start = null;
    }
  });
  return words;
}

// The words as timestamps report them (kokoro_ext/run/timestamps.py, chunk_words): each
// written word once, with the phonemes said for it.  Offsets of the normalized text map
// to the original's (a spelled-out "$16 million" is one word over its three); a word
// with no sound ('"', "—") goes with a word it touches, else is left out of the text.
const SILENT = new Set(" ;:,.!?¡¿—…\"«»“”()→↓↗↘");
function saidWords(words, spans, original, vocab) {
  const touch = (a, b) => a[0] <= b[1] && b[0] <= a[1];
  const out = [];
  let glued = [], phonemes = "";
  for (const w of words) {
    const inner = spans.slice(w.start, w.end);
    let span = [inner[0]?.[0] ?? 0, inner.at(-1)?.[1] ?? 0];
    phonemes += w.phonemes;
    const last = out.at(-1);
    if (!Array.from(w.phonemes).some((p) => Object.hasOwn(vocab, p) && !SILENT.has(p))) {
      if (last && touch([last.start, last.end], span)) {
        last.start = Math.min(last.start, span[0]);
        last.end = Math.max(last.end, span[1]);
        last.phonemes += phonemes;
        phonemes = "";
      } else if (w.text.trim()) {
        glued.push(span);
      }
      continue;
    }
    if (glued.length && touch(glued.at(-1), span)) span = [Math.min(span[0], ...glued.map((g) => g[0])), span[1]];
    glued = [];
    if (last && touch([last.start, last.end], span)) {
      last.start = Math.min(last.start, span[0]);
      last.end = Math.max(last.end, span[1]);
      last.phonemes += phonemes;
    } else {
      out.push({ start: span[0], end: span[1], phonemes });
    }
    phonemes = "";
  }
  if (out.length) out.at(-1).phonemes += phonemes;  // trailing silent words' phonemes
  else if (phonemes) out.push({ start: 0, end: 0, phonemes });
  return out.map((w) => ({ text: original.slice(w.start, w.end).trim(), ...w }));
}

// The words a chunk may end after (chunking.word_groups), each with the stretch of the
// original text its characters span ([start, end), or start = end = null for added text):
// what the chunks are cut from (chunking.js).
function originalGroups(groups, spans) {
  return groups.map((w) => {
    const inner = spans.slice(w.start, w.end).filter(([s, e]) => e > s);
    return { text: w.text, phonemes: w.phonemes,
             start: inner.length ? Math.min(...inner.map(([s]) => s)) : null,
             end: inner.length ? Math.max(...inner.map(([, e]) => e)) : null };
  });
}

// --- the module's entry ------------------------------------------------------------------

/** Phonemes -> token ids, kokoro's boundary 0 at both ends; symbols outside the vocab
 * dropped, as kokoro_ext.text.phonemes_to_ids does. */
export function phonemesToIds(phonemes, vocab) {
  const ids = [0];
  for (const p of phonemes) if (Object.hasOwn(vocab, p)) ids.push(vocab[p]);
  ids.push(0);
  return Int32Array.from(ids);
}

/** Text -> {phonemes, ids, words, groups}; groups: the words chunks are cut between
 * (their text as read and their stretch of the original).  language: "en-us" or "en-gb";
 * vocab: the model's (default: config.json's beside this module); base: where the
 * lexicon, phonemizer.js and config.json are (default: this module's folder). */
export async function phonemize(text, { language = "en-us", vocab = null, base = BASE } = {}) {
  if (language !== "en-us" && language !== "en-gb") throw new Error(`unsupported language ${language}: en-us or en-gb`);
  const british = language === "en-gb";
  const lexicon = await once(`lexicon:${language}:${base}`, async () =>
    new Lexicon(await readJSON(`lexicon-${language}.json`, base), british));
  vocab ??= (await once(`config:${base}`, () => readJSON("config.json", base))).vocab;
  const phonemizerURL = new URL("phonemizer.js", base).href;
  const fallback = (word) => once(`word:${language}:${word}`, () => espeak(word, british, phonemizerURL));
  const features = [];
  const normal = normalize(readLinks(new Spanned(text), features), british ? "b" : "a");
  const tokens = await g2p(withFeatures(tokenize(normal.text).map((t) => ({
    ...t, phonemes: null, alias: null, isHead: true, stress: null, currency: null, numFlags: "", prespace: false,
  })), features, (i) => normal.spans[i]?.[0] ?? 0), lexicon, fallback);
  const grouped = groupWords(tokens);
  const words = saidWords(grouped, normal.spans, text, vocab);
  const phonemes = words.map((w) => w.phonemes).join("").trim();
  return { phonemes, ids: phonemesToIds(phonemes, vocab), words, groups: originalGroups(grouped, normal.spans) };
}
