"""G2P of the nine Kokoro languages: as kokoro's KPipeline does it, offline."""

from __future__ import annotations

import sys
import types
import warnings

import pytest

from kokoro_ext.text.pipeline import FrontEnd

# (language, text, phonemes): the phonemes are what kokoro 0.9.4's KPipeline(model=False)
# gives for the text (checked again below where KPipeline runs offline)
EXAMPLES = [
    ("e", "Hola, ¿cómo estás? Tengo 21 años.", "ˈola, ¿kˈomo estˈas? tˈɛŋɡo βˌAntiˈuno ˈaɲos."),
    ("e", "El perro corre rápido por el parque.", None),
    ("f", "Bonjour, comment allez-vous ? J'ai 21 ans.",
     "bɔ̃ʒˈuʁ, kɔmˌɑ̃ alˈevˈu ? ʒe vɛ̃teˈœ̃ ˈɑ̃."),
    ("f", "Le chat dort sur le canapé.", None),
    ("h", "नमस्ते, आप कैसे हैं? मेरी उम्र 21 साल है।",
     "nəmˈʌsteː, ˌaːp kˈɛːseː hɛ̃? mˌeːɾi ˈʊmɾə ɪkːˈis sˈaːl hɛː"),
    ("h", "आज मौसम बहुत अच्छा है।", None),
    ("i", "Ciao, come stai? Ho 21 anni.", "ʧˈao, kˌome stˈaj? o ventˈuno ˈannɪ."),
    ("i", "La pizza è molto buona.", None),
    ("p", "Olá, como vai você? Eu tenho 21 anos.",
     "olˈa, kˌomʊ vI vosˈe? eʊ tˌeɲʊ vˈiŋʧyiˈu\u0303ŋ ˈɐ̃nʊs."),
    ("p", "O Brasil é um país muito grande.", None),
    ("j", "こんにちは、お元気ですか？私は21歳です。",
     "koɲɲiʨiβa, o ɡeŋkʲi desɨ ka? βatakɯɕi βa ɲiʥɨːiʨi sai desɨ."),
    ("j", "東京は日本の首都です。", None),
    ("z", "你好，你好吗？我今年21岁。", "ni↓xau↓, ni↓xau↓ ma? wo↓ ʨi→nnjɛ↗n ɚ↘ʂɨ↗i→swei↘."),
    ("z", "今天天气很好，我们去公园散步吧。", None),
]  # fmt: skip


@pytest.fixture(scope="module")
def front_ends():
    return {}


def _front(front_ends, code):
    if code not in front_ends:
        front_ends[code] = FrontEnd(code)
    return front_ends[code]


@pytest.mark.parametrize("code, text, phonemes", [e for e in EXAMPLES if e[2]])
def test_example_phonemes(front_ends, code, text, phonemes):
    assert _front(front_ends, code).phonemize(text) == phonemes


@pytest.fixture(scope="module")
def kpipeline():
    """kokoro's KPipeline in quiet mode (G2P only), built per language on demand."""
    # misaki.ja imports pyopenjtalk at the top, but JAG2P() reads with cutlet (fugashi)
    # and never calls it; pyopenjtalk has no wheel and downloads its dictionary
    stand_in = "pyopenjtalk" not in sys.modules
    if stand_in:
        sys.modules["pyopenjtalk"] = types.ModuleType("pyopenjtalk")
    from kokoro import KPipeline

    pipelines = {}

    def get(code):
        if code not in pipelines:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pipelines[code] = KPipeline(lang_code=code, model=False, repo_id="hexgrad/Kokoro-82M")
        return pipelines[code]

    yield get
    if stand_in:
        del sys.modules["pyopenjtalk"]


@pytest.mark.parametrize("code, text, phonemes", EXAMPLES)
def test_same_phonemes_as_kokoro_kpipeline(front_ends, kpipeline, code, text, phonemes):
    theirs = " ".join(r.phonemes for r in kpipeline(code)(text))
    assert _front(front_ends, code).phonemize(text) == theirs


def test_latin_languages_drop_other_scripts_cjk_keeps_them(front_ends):
    with pytest.warns(UserWarning, match="not English"):
        assert _front(front_ends, "e").phonemize("Hola 你好 amigo.") == "ˈola amˈiɣo."
    assert "ni" in _front(front_ends, "z").phonemize("你好")


def test_sentences_split_at_cjk_sentence_ends(front_ends):
    parts = list(_front(front_ends, "z").sentences("你好。我很好！你呢？"))
    assert [p.text for p in parts] == ["你好。", "我很好！", "你呢？"]


def test_words_carry_their_text(front_ends):
    spanish = _front(front_ends, "e").words("Hola amigo mío.")
    assert [(w.text, w.phonemes) for w in spanish] == [
        ("Hola ", "ˈola "), ("amigo ", "amˈiɣo "), ("mío.", "mˈio.")
    ]
    # no spaces to pair words by: the sentence goes with the first word
    chinese = _front(front_ends, "z").words("你好，你好吗？")
    assert chinese[0].text.strip() == "你好，你好吗？" and all(not w.text for w in chinese[1:])
    assert "".join(w.phonemes for w in chinese).strip() == "ni↓xau↓, ni↓xau↓ ma?"


def test_hindi_sentences_end_at_the_danda(front_ends):
    parts = list(_front(front_ends, "h").sentences("आज मौसम अच्छा है। चलो चलें।"))
    assert [p.text for p in parts] == ["आज मौसम अच्छा है।", "चलो चलें।"]
