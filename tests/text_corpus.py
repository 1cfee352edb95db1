"""The front end's corpus (tests/data/text_corpus.jsonl) and what the front end makes of
it (tests/data/text_golden.jsonl), which test_text_corpus.py holds the front end to.

    python tests/text_corpus.py            # writes both files
    python tests/text_corpus.py --corpus   # the corpus only

The sentences come from templates filled from word lists by a seeded random generator:
the same file on every run, no network.  They cover what the front end handles: plain
prose, numbers, dates, times, money, units, abbreviations, addresses, Markdown, SSML and
inline phonemes, terminal output (ANSI escapes, overstrike), control and invisible
characters, look-alike letters, symbols and emoji, other scripts, long sentences, and
the nine languages (kokoro_ext.text.languages).

The golden record of an entry is its phonemes, its sentences' words and ends, their
chunks (pack_evenly at ``CHUNK`` phonemes) and the words timestamps report for them,
or the error the text raises.
"""

from __future__ import annotations

import json
import random
import sys
import warnings
from pathlib import Path

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "text_corpus.jsonl"
GOLDEN = DATA / "text_golden.jsonl"
#: Chunk limit for the golden chunks: small, so that sentences are cut.
CHUNK = 60

NAMES = ["Alice", "Bob", "Carol", "Dmitri", "Eve", "Farah", "Gustavo", "Hannah", "Ines",
         "Jonas", "Keiko", "Liam", "Maya", "Noor", "Oscar", "Priya", "Quinn", "Rosa"]
NOUNS = ["cat", "report", "window", "garden", "train", "letter", "server", "river",
         "bridge", "recipe", "meeting", "library", "concert", "budget", "island", "engine",
         "password", "kitchen", "museum", "bicycle"]
VERBS = ["fixed", "painted", "found", "opened", "missed", "wrote", "cleaned", "sold",
         "visited", "checked", "moved", "shared", "closed", "tested"]
ADJECTIVES = ["old", "quiet", "bright", "broken", "famous", "tiny", "remote", "green",
              "heavy", "strange", "lovely", "dusty"]
PLACES = ["Paris", "Main St.", "the station", "Tokyo", "the office", "St. Louis",
          "Lake Como", "the market", "Mt. Fuji", "Berlin"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
UNITS = ["km", "m", "cm", "kg", "g", "mph", "MB", "GB", "ms", "min", "°C", "°F", "l", "ft"]
CURRENCY = ["$", "€", "£", "¥", "₹"]
EMOJI = ["🙂", "🚀", "👍🏽", "❤️", "★", "→", "©", "™", "✓"]
LOOKALIKE = ["Неllо", "pаypal", "Аpple", "Gооgle", "Пpивет", "ѕtar", "Κafka"]
CONTROL = ["\x00", "\x07", "\x01", "\x7f", "\x1f", "\x85"]
INVISIBLE = ["\u200b", "\u200d", "\u00ad", "\ufeff", "\u200e", "\u2060"]
ANSI = ["\x1b[31m", "\x1b[1;32m", "\x1b[0m", "\x1b[4m", "\x1b[38;5;208m", "\x1b[K",
        "\x1b]0;title\x07", "\x1b]8;;https://x.org\x1b\\", "[33m"]

OTHER = {
    "e": (["El {n} está en la {p}.", "Mañana compramos {k} libros por {m} euros.",
           "¿Dónde está la estación?", "Hoy es {d} de {mo} de {y}.",
           "Necesito {f} de taza de azúcar.", "¡Qué día tan bonito!",
           "Son las {h}:{mi} y llueve en Madrid.", "El precio subió un {k}%."],
          ["gato", "casa", "ciudad", "playa", "escuela"], ["mesa", "cocina", "plaza"]),
    "f": (["Le {n} est dans la {p}.", "Nous avons {k} pommes et {m} euros.",
           "Où est la gare, s'il vous plaît ?", "Aujourd'hui, c'est le {d} {mo} {y}.",
           "Il faut {f} de litre de lait.", "Quelle belle journée !",
           "Il est {h} h {mi} à Paris.", "Les prix ont baissé de {k} %."],
          ["chat", "livre", "jardin", "train", "musée"], ["maison", "cuisine", "ville"]),
    "h": (["मेरा नाम {n} है।", "आज मौसम बहुत अच्छा है।", "मेरे पास {k} किताबें हैं।",
           "हम कल दिल्ली जाएंगे॥", "यह {n} बहुत सुंदर है।", "क्या आप चाय पीएंगे?"],
          ["राम", "सीता", "घर", "बगीचा"], ["घर"]),
    "i": (["Il {n} è nella {p}.", "Abbiamo {k} mele e {m} euro.",
           "Dov'è la stazione, per favore?", "Oggi è il {d} {mo} {y}.",
           "Servono {f} di farina.", "Che bella giornata!",
           "Sono le {h}:{mi} a Roma.", "Il prezzo è salito del {k}%."],
          ["gatto", "libro", "giardino", "treno"], ["casa", "cucina", "piazza"]),
    "p": (["O {n} está na {p}.", "Temos {k} maçãs e {m} reais.",
           "Onde fica a estação, por favor?", "Hoje é dia {d} de {mo} de {y}.",
           "Preciso de {f} de xícara de açúcar.", "Que dia lindo!",
           "São {h}:{mi} em São Paulo.", "O preço subiu {k}%."],
          ["gato", "livro", "jardim", "trem"], ["casa", "cozinha", "praça"]),
    "j": (["今日は{k}月{d}日です。", "{n}さんは東京に住んでいます。",
           "駅はどこですか？", "このりんごは{m}円です。", "ありがとうございます！",
           "明日は雨が降るでしょう。", "私は毎朝コーヒーを飲みます、そして新聞を読みます。"],
          ["田中", "鈴木", "佐藤", "山田"], []),
    "z": (["今天是{k}月{d}日。", "{n}住在北京。", "火车站在哪里？", "这本书{m}元。",
           "谢谢你的帮助！", "明天会下雨吗？", "我每天早上喝咖啡，然后看报纸。"],
          ["小明", "王老师", "李华", "张伟"], []),
}
OTHER_MONTHS = {
    "e": ["enero", "marzo", "julio", "octubre"], "f": ["janvier", "mars", "juillet", "octobre"],
    "i": ["gennaio", "marzo", "luglio", "ottobre"], "p": ["janeiro", "março", "julho", "outubro"],
}


def _english(rng: random.Random) -> list[dict]:
    """English entries (American, and a share British), by kind."""
    out: list[dict] = []

    def add(kind: str, text: str, lang: str = "a", markdown: bool = True) -> None:
        out.append({"lang": lang, "markdown": markdown, "kind": kind, "text": text})

    def pick(seq):
        return rng.choice(seq)

    def clause() -> str:
        return (f"{pick(NAMES)} {pick(VERBS)} the {pick(ADJECTIVES)} {pick(NOUNS)}")

    for i in range(120):
        text = f"{clause()}."
        if i % 3:
            text += f" Then {clause().lower()} near {pick(PLACES)}{pick(['.', '!', '?'])}"
        if i % 5 == 0:
            text = f'"{clause()}," {pick(NAMES)} said; {clause().lower()}.'
        if i % 7 == 0:
            text += f" {clause()} — and {clause().lower()}…"
        add("plain", text, "b" if i % 4 == 0 else "a")
    for i in range(140):
        n = rng.randint(0, 10**rng.randint(1, 7))
        choices = [
            f"I counted {n:,} {pick(NOUNS)}s.",
            f"The {pick(NOUNS)} costs {pick(CURRENCY)}{rng.randint(0, 999)}.{rng.randint(0, 99):02d}.",
            f"Revenue reached ${rng.randint(1, 99)} {pick(['million', 'billion'])} last year.",
            f"About {rng.randint(0, 100)}% of the {pick(NOUNS)}s were {pick(ADJECTIVES)}.",
            f"It is {rng.randint(1, 999)} {pick(UNITS)} away.",
            f"Mix {rng.randint(1, 3)} {rng.randint(1, 3)}/{pick([2, 4, 8])} cups of flour.",
            f"She finished {rng.randint(1, 40)}{pick(['st', 'nd', 'rd', 'th'])} of {rng.randint(40, 99)}.",
            f"Read pages {rng.randint(1, 50)}-{rng.randint(51, 200)} by tomorrow.",
            f"The temperature fell to -{rng.randint(1, 30)}.{rng.randint(0, 9)} degrees.",
            f"Call 555-{rng.randint(1000, 9999)} or ({rng.randint(200, 999)}) {rng.randint(200, 999)}-{rng.randint(1000, 9999)}.",
            f"Order No. {rng.randint(1, 9999)} and ticket #{rng.randint(1, 999)} are ready.",
            f"The code is {rng.randint(0, 9)}{rng.randint(0, 9)}{rng.randint(100, 999)}.",
            f"That was in the {rng.randint(185, 201)}0s, wasn't it?",
            f"Version {rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)} fixed {rng.randint(2, 99)} bugs.",
            f"Score: {rng.randint(0, 9)}½ to {rng.randint(0, 9)}¼.",
        ]
        add("numbers", pick(choices), "b" if i % 5 == 0 else "a")
    for i in range(90):
        y, mo, d = rng.randint(1890, 2040), rng.randint(1, 12), rng.randint(1, 28)
        choices = [
            f"The launch is on {y}-{mo:02d}-{d:02d}.",
            f"Born {mo}/{d}/{y}, moved {d}/{mo}/{str(y)[2:]}.",
            f"We meet on {MONTHS[mo - 1]} {d}{pick(['', 'th', 'st'])} at {rng.randint(1, 12)}:{rng.choice([0, 5, 15, 30, 45]):02d} {pick(['am', 'p.m.', 'PM', 'a.m.'])}.",
            f"The shop opens at {rng.randint(0, 23)}:{rng.randint(0, 59):02d} and closes at {rng.randint(1, 12)}pm.",
            f"In {y}, {pick(NAMES)} moved to {pick(PLACES)}.",
            f"Due {MONTHS[mo - 1][:3]}. {d}, {y}.",
            f"The race lasted {rng.randint(0, 2)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} exactly.",
        ]
        add("dates", pick(choices), "b" if i % 4 == 0 else "a")
    for i in range(60):
        choices = [
            f"Dr. {pick(NAMES)} and Mr. {pick(NAMES)} met Prof. {pick(NAMES)}.",
            f"Bring fruit, bread, etc. {pick(NAMES)} will bring the rest.",
            f"Use a tool, e.g. a hammer, i.e. something heavy.",
            f"{pick(NAMES)} vs. {pick(NAMES)} is at {rng.randint(1, 9)} p.m. tonight.",
            f"Visit https://www.example.com/{pick(NOUNS)}?id={rng.randint(1, 99)} or www.{pick(NOUNS)}.org today.",
            f"Write to {pick(NAMES).lower()}.{pick(NOUNS)}@mail-{rng.randint(1, 9)}.example.co.uk please.",
            f"Tom & Jerry: {rng.randint(1, 9)} + {rng.randint(1, 9)} = {rng.randint(2, 18)}.",
            f"Meet me @ the {pick(NOUNS)}, {pick(['Acme Inc.', 'Foo Ltd.', 'Bar Co.'])}",
            f"The U.S. team won; {pick(NAMES)} Jr. scored.",
            f"A < B and C > D, so {pick(NAMES)} was right.",
        ]
        add("abbreviations", pick(choices), "b" if i % 6 == 0 else "a")
    for i in range(110):
        choices = [
            f"# {clause()}\n\n{clause()}. **{pick(ADJECTIVES).title()}** {pick(NOUNS)}s are *{pick(ADJECTIVES)}*.",
            f"- {clause()}\n- {clause()}\n- [x] {clause()}",
            f"1. {clause()}\n2. {clause()}\n3) {clause()}",
            f"> {clause()}.\n> > {clause()}",
            f"Read [the {pick(NOUNS)} guide](https://docs.example.com/{pick(NOUNS)}) and ![a {pick(NOUNS)}](img.png).",
            f"Run `pip install {pick(NOUNS)}` then ```\ncode {pick(NOUNS)}\n``` now.",
            f"Before.\n\n```python\nprint('{pick(NOUNS)}')\n```\n\nAfter the code.",
            f"| Name | Age |\n|---|---:|\n| {pick(NAMES)} | {rng.randint(1, 99)} |\n| {pick(NAMES)} | {rng.randint(1, 99)} |",
            f"{clause()}\n===\n\nSome ~~old~~ new __{pick(NOUNS)}__ and ***{pick(ADJECTIVES)}*** text.",
            f"Keep 2*3*4 and snake_case_{pick(NOUNS)} as they are, \\*really\\*.",
            f"See <https://{pick(NOUNS)}.example.com> and [ref][{rng.randint(1, 9)}].\n\n[{rng.randint(1, 9)}]: https://x.org",
            f"Say [Kokoro](/kˈOkəɹO/) and [{pick(NOUNS)}](-1) twice.",
            f"Title\n---\n\n---\n\n* {clause()}\n+ {clause()}",
        ]
        markdown = i % 9 != 0
        add("markdown" if markdown else "as-written", pick(choices), "b" if i % 7 == 0 else "a", markdown)
    for i in range(90):
        choices = [
            f'<speak>{clause()}. <break time="{rng.randint(1, 20) * 100}ms"/> {clause()}.</speak>',
            f'<speak><p>{clause()}.</p><p><s>{clause()}.</s><s>{clause()}.</s></p></speak>',
            f'<speak>Code <say-as interpret-as="characters">{pick(["abc", "XYZ", "k9p"])}</say-as>, pin <say-as interpret-as="digits">{rng.randint(100, 99999)}</say-as>.</speak>',
            f'<speak>On <say-as interpret-as="date" format="{pick(["mdy", "dmy"])}">{rng.randint(1, 12)}/{rng.randint(1, 12)}/{rng.randint(1900, 2030)}</say-as> we left.</speak>',
            f'<speak>The <sub alias="World Health Organization">WHO</sub> met {pick(NAMES)}.</speak>',
            f'<speak>Say <phoneme ph="kˈOkəɹO">Kokoro</phoneme> and <break strength="{pick(["weak", "strong", "x-strong", "none"])}"/> go.</speak>',
            f'<speak>{pick(NAMES)} &amp; {pick(NAMES)} &lt;3 the {pick(NOUNS)}.</speak>',
            f'<speak>Broken <break time="forever"/> markup.</speak>',
            f'<speak>Unclosed <p>{clause()}.</speak>',
            f'<speak><break time="500ms"/>{clause()}.<break time="2s"/></speak>',
        ]
        add("ssml", pick(choices), "b" if i % 8 == 0 else "a")
    for i in range(90):
        word = f"{pick(NAMES)}"
        choices = [
            f"{pick(ANSI)}error{pick(ANSI)}: the {pick(NOUNS)} {pick(ANSI)}failed{pick(ANSI)} to start.",
            f"\x1b]0;{pick(NOUNS)}\x07{clause()}.\x1b[2J",
            f"B\x08Bo\x08ol\x08ld text and _\x08u_\x08n_\x08d_\x08e_\x08r.",
            f"{pick(ANSI)}PASS{pick(ANSI)} tests/{pick(NOUNS)}.py ({rng.randint(1, 999)} ms)",
            f"$ ls -la\ntotal {rng.randint(1, 99)}\ndrwxr-xr-x  2 {pick(NAMES).lower()} staff {rng.randint(64, 999)} {MONTHS[rng.randint(0, 11)][:3]} {rng.randint(1, 28)} {pick(NOUNS)}",
            f"[{rng.randint(30, 37)}m{word}[0m wrote [5min] ago.",
            f"Progress: {rng.randint(0, 100)}%\r{clause()}.",
            f"\x1b[1m{clause()}\x1b[0m.\n\x1b[33mwarning:\x1b[0m {clause().lower()}.",
        ]
        add("terminal", pick(choices), "b" if i % 9 == 0 else "a", i % 4 != 0)
    for i in range(90):
        a, b = clause(), clause()
        words = a.split()
        k = rng.randint(1, len(words) - 1)
        choices = [
            # a control or invisible character beside a space, at an end, or in a word
            f"{a} {pick(CONTROL)}{b.lower()}.",
            f"{pick(CONTROL)}{a}.{pick(CONTROL)}",
            f"{a}{pick(INVISIBLE)} and {b.lower()}.",
            " ".join(words[:k]) + " " + words[k][:2] + pick(INVISIBLE) + words[k][2:] + " " + " ".join(words[k + 1:]) + ".",
            f"{a}\t{pick(['and', 'or'])}\t{b.lower()}.",
            f"{a}.\r\n{b}.",
            f"{pick(LOOKALIKE)} said {a.lower()}.",
            f"{a} {pick(EMOJI)} {b.lower()} {pick(EMOJI)}",
            f"{a} in Москва and 東京.",
            f"Ｆｕｌｌ ｗｉｄｔｈ {rng.randint(1, 99)} and the ﬁnal ﬂight at ①.",
            # a control character between two words: they glue today
            " ".join(words[:k]) + pick(CONTROL) + " ".join(words[k:]) + ".",
        ]
        add("characters", pick(choices), "b" if i % 5 == 0 else "a")
    for i in range(20):
        text = " ".join(f"{clause()}{pick([',', ';', '', ' and'])}" for _ in range(rng.randint(6, 14)))
        add("long", text + ".")
    add("long", " ".join(pick(NOUNS) for _ in range(260)))
    return out


def _others(rng: random.Random) -> list[dict]:
    out = []
    for code, (templates, nouns, places) in OTHER.items():
        months = OTHER_MONTHS.get(code, ["1"])
        for i in range(40):
            def fill(t: str) -> str:
                return t.format(
                    n=rng.choice(nouns), p=rng.choice(places or nouns), k=rng.randint(1, 12),
                    m=rng.randint(2, 500), d=rng.randint(1, 28), mo=rng.choice(months),
                    y=rng.randint(1950, 2030), f=rng.choice(["1/2", "3/4", "2 1/3", "1/4"]),
                    h=rng.randint(1, 23), mi=f"{rng.randint(0, 59):02d}",
                )

            text = fill(rng.choice(templates))
            if i % 3 == 0:
                text += " " + fill(rng.choice(templates))
            if i % 10 == 1:
                text = f"**{text}**"
            if i % 10 == 2:
                text = f"\x1b[32m{text}\x1b[0m"
            if i % 10 == 3:
                text = f'<speak>{text} <break time="300ms"/> {fill(rng.choice(templates))}</speak>'
            if i % 10 == 4:
                text = text.replace(" ", " \u200b", 1) + " 🙂"
            if i % 10 == 5:
                text = f"# {text}\n\n- {fill(rng.choice(templates))}"
            kind = "lang-" + code
            out.append({"lang": code, "markdown": i % 10 != 6, "kind": kind, "text": text})
    return out


def corpus() -> list[dict]:
    """The corpus entries, in order: each {"id", "lang", "markdown", "kind", "text"}."""
    rng = random.Random(20261127)
    entries = _english(rng) + _others(rng)
    return [{"id": i, **e} for i, e in enumerate(entries)]


def record(front, entry: dict) -> dict:
    """What the front end makes of ``entry``: see the module docstring."""
    from kokoro_ext.run.synthesizer import SILENT_SYMBOLS
    from kokoro_ext.run.timestamps import OriginalWords, chunk_words
    from kokoro_ext.text.chunking import pack_evenly

    import numpy as np

    vocab = json.loads(
        (Path(__file__).parents[1] / "kokoro_ext/configs/kokoro-82m.json").read_text()
    )["vocab"]
    text, markdown = entry["text"], entry["markdown"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sentences, chunks = [], []
            originals = OriginalWords(text)
            said: list[str] = []
            for part in front.sentences(text, markdown):
                words = front.words(part)
                end = part.end
                sentences.append({"end": end, "words": [[w.text, w.phonemes] for w in words]})
                for piece in pack_evenly(words, CHUNK, end):
                    chunks.append([piece.text, piece.phonemes, piece.end])
                    ids = [p for p in piece.phonemes if p in vocab]
                    if not ids:
                        continue
                    durations = np.ones(len(ids) + 2, dtype=np.int64)
                    timed = chunk_words(piece.words, durations, vocab, SILENT_SYMBOLS, 0.0, 1.0,
                                        originals, lead_frames=0)
                    said += [w.text for w in timed]
        except ValueError as err:
            return {"id": entry["id"], "error": str(err)}
        phonemes = " ".join(
            "".join(w[1] for w in s["words"]).strip() for s in sentences
        ).strip()
    return {"id": entry["id"], "phonemes": phonemes, "sentences": sentences, "chunks": chunks,
            "said": said}


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")


def read(path: Path) -> list[dict]:
    # not splitlines(): it also splits at the NEL and separators some texts hold
    return [json.loads(line) for line in path.read_text("utf-8").split("\n") if line]


def main(argv: list[str]) -> None:
    entries = corpus()
    _write(CORPUS, entries)
    print(f"{len(entries)} entries -> {CORPUS}")
    if "--corpus" in argv:
        return
    from kokoro_ext.text.pipeline import FrontEnd

    fronts: dict[str, FrontEnd] = {}
    rows = [record(fronts.setdefault(e["lang"], FrontEnd(e["lang"])), e) for e in entries]
    _write(GOLDEN, rows)
    print(f"{len(rows)} records -> {GOLDEN}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))  # this checkout's kokoro_ext
    main(sys.argv[1:])
