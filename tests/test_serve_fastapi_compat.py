"""kokoro_ext.serve as a drop-in for Kokoro-FastAPI: clients configured for it (Open WebUI,
SillyTavern, the OpenAI client, the requests of Kokoro-FastAPI's README) against this
server with the small build, changing only the host.  docs/server.md has the table."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import re
import shlex
import wave
from pathlib import Path

import httpx
import kokoro_ext
import numpy as np
import openai
import pytest

from kokoro_ext import Synthesizer
from kokoro_ext.run.voices import NamedVoice, VoiceDirectory
from kokoro_ext.serve import ServerOptions, create_app
from kokoro_ext.serve import audio, compat, tags
from kokoro_ext.serve.__main__ import parse_args
from kokoro_ext.serve.app import chunk_phonemes
from kokoro_ext.serve.compat import KOKORO_FASTAPI_VOICES, MODELS, NAMESAKE_VOICES, torch_file
from kokoro_ext.text import Normalization
from test_serve import _encoded, running

ROOT = Path(__file__).resolve().parent.parent
#: Kokoro-FastAPI's OpenAI voice mapping (its api/src/core/openai_mappings.json).
FASTAPI_MAPPING = {
    "alloy": "am_adam", "ash": "af_nicole", "coral": "bf_emma", "echo": "af_bella",
    "fable": "af_sarah", "onyx": "bm_george", "nova": "bf_isabella", "sage": "am_michael",
    "shimmer": "af_sky",
}  # fmt: skip
SPEECH_FIELDS = {"model", "input", "voice", "response_format", "speed"}


@pytest.fixture(scope="module")
def synth(build_dir):
    return Synthesizer(build_dir[0])  # the build's own limits: a short text is one chunk


@pytest.fixture(scope="module")
def voices(build_dir, tmp_path_factory) -> Path:
    """Every voice Kokoro-FastAPI's mapping names and af_heart, each the build's voice
    changed a little (a different pack per name, so that a wrong mapping shows)."""
    directory = tmp_path_factory.mktemp("fastapi-voices")
    base = np.load(build_dir[0] / "voice.npy").astype("<f4")
    names = sorted({"af_heart", *FASTAPI_MAPPING.values()})
    for index, name in enumerate(names):
        (base * (1 + 0.02 * index)).astype("<f4").tofile(directory / f"{name}.bin")
    return directory


@pytest.fixture(scope="module")
def server(synth, voices):
    """Kokoro-FastAPI's defaults, no API key (its default too), CORS for one origin."""
    app = create_app(ServerOptions(voices=voices, warmup=False, cors=("http://page.example",)), synth)
    with running(app) as (url, app):
        yield url, app


def pack(voices: Path, name: str) -> np.ndarray:
    return np.fromfile(voices / f"{name}.bin", "<f4").reshape(510, 1, 256)


def test_the_mapping_is_kokoro_fastapis():
    assert KOKORO_FASTAPI_VOICES == FASTAPI_MAPPING
    assert set(NAMESAKE_VOICES) < set(FASTAPI_MAPPING) and NAMESAKE_VOICES["alloy"] == "af_alloy"
    assert MODELS == ("tts-1", "tts-1-hd", "kokoro", "gpt-4o-mini-tts")
    # the option keeps the names' older meaning
    with pytest.raises(ValueError, match="kokoro-fastapi, namesake"):
        create_app(ServerOptions(openai_voices="other", warmup=False))


# --- Open WebUI: the voice list, then speech with a picked voice -------------------------


def test_open_webui_reads_id_and_name_of_every_voice(server, voices):
    url, _ = server
    listed = httpx.get(f"{url}/v1/audio/voices").json()
    assert set(listed) == {"voices"}
    names = sorted(p.stem for p in voices.iterdir())
    assert [v["id"] for v in listed["voices"]] == names
    assert all(v["name"] == v["id"] for v in listed["voices"])
    # Kokoro-FastAPI's older clients: ?legacy=true gives the names
    assert httpx.get(f"{url}/v1/audio/voices", params={"legacy": "true"}).json() == {"voices": names}
    bad = httpx.get(f"{url}/v1/audio/voices", params={"legacy": "maybe"})
    assert bad.status_code == 422 and "legacy" in bad.json()["detail"]["message"]


def test_open_webui_speech_request(server):
    # Open WebUI's OpenAI TTS: POST {base}/audio/speech with model, input, voice and the
    # body it adds for Kokoro-FastAPI (none): an mp3 back
    url, _ = server
    response = httpx.post(f"{url}/v1/audio/speech", timeout=120, headers={"Authorization": "Bearer sk-none"},
                          json={"model": "kokoro", "input": "Hello there.", "voice": "af_heart"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/mpeg"
    assert response.headers["content-disposition"] == "attachment; filename=speech.mp3"
    assert len(response.content) > 500


# --- SillyTavern: each OpenAI voice name, as its OpenAI-compatible TTS sends it ----------


def test_each_openai_voice_means_kokoro_fastapis_voice(server, voices):
    _, app = server
    directory: VoiceDirectory = app.state.voices
    for openai_name, kokoro in FASTAPI_MAPPING.items():
        assert directory.blend(openai_name).parts == ((kokoro, 1.0),), openai_name
        assert np.array_equal(directory.load(openai_name), pack(voices, kokoro))


@pytest.mark.parametrize("name", sorted(FASTAPI_MAPPING))
def test_sillytavern_request_with_each_openai_voice(server, synth, voices, name):
    url, _ = server
    body = {"input": "Hi.", "model": "tts-1", "voice": name, "speed": 1, "response_format": "pcm"}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.content == _encoded(synth.stream("Hi.", pack(voices, FASTAPI_MAPPING[name])))


# --- the OpenAI client, as Kokoro-FastAPI's README uses it --------------------------------


def test_openai_client_examples_from_kokoro_fastapis_readme(server, synth, voices):
    url, _ = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="not-needed", max_retries=0)
    with client.audio.speech.with_streaming_response.create(
        model="kokoro", voice="af_sky+af_bella", input="Hello world!"
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        assert len(response.read()) > 500
    pcm = client.audio.speech.create(model="gpt-4o-mini-tts", voice="coral", input="Hello world!",
                                     response_format="pcm")
    assert pcm.content == _encoded(synth.stream("Hello world!", VoiceDirectory(voices).voice("bf_emma")))
    assert [m.id for m in client.models.list()] == list(MODELS)
    assert client.models.retrieve("gpt-4o-mini-tts").owned_by == "kokoro"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_requests_examples_from_kokoro_fastapis_readme(server):
    url, _ = server
    voices = [v["id"] for v in httpx.get(f"{url}/v1/audio/voices").json()["voices"]]
    assert "af_bella" in voices
    for body in (
        {"model": "kokoro", "input": "Hello world!", "voice": "af_bella", "response_format": "mp3", "speed": 1.0},
        {"input": "Hello world!", "voice": "af_bella", "response_format": "pcm"},
        {"input": "Hello world!", "voice": "af_bella(2)+af_sky(1)", "response_format": "mp3"},
        {"input": "Hello world!"},  # model kokoro and voice af_heart by default
    ):
        response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)
        assert response.status_code == 200, (body, response.text)
        assert response.headers["content-type"] == audio.MEDIA_TYPES[body.get("response_format", "mp3")]


def test_captioned_speech_examples_from_kokoro_fastapis_readme(server):
    url, _ = server
    body = {"model": "kokoro", "input": "Hello world!", "voice": "af_bella", "speed": 1.0,
            "response_format": "mp3"}
    whole = httpx.post(f"{url}/dev/captioned_speech", json={**body, "stream": False}, timeout=120)
    assert whole.status_code == 200
    reply = json.loads(whole.content)
    assert reply["audio_format"] == "audio/mpeg" and len(reply["audio"]) > 100
    assert [w["word"] for w in reply["timestamps"]] == ["Hello", "world!"]
    lines = httpx.post(f"{url}/dev/captioned_speech", json={**body, "stream": True}, timeout=120)
    words = [w["word"] for line in lines.text.splitlines() if line for w in json.loads(line)["timestamps"]]
    assert words == ["Hello", "world!"]
    wav = httpx.post(f"{url}/dev/captioned_speech", timeout=120,
                     json={**body, "response_format": "wav", "stream": False}).json()
    with wave.open(io.BytesIO(base64.b64decode(wav["audio"]))) as w:  # the header states the length
        assert w.getnframes() == (len(base64.b64decode(wav["audio"])) - 44) // 2 > 0


def test_phoneme_examples_from_kokoro_fastapis_readme(server, synth, voices):
    url, _ = server
    result = httpx.post(f"{url}/dev/phonemize", json={"text": "Hello world!", "language": "a"}, timeout=120).json()
    assert result["phonemes"] == synth.phonemize("Hello world!")
    assert result["tokens"][0] == result["tokens"][-1] == 0 and len(result["tokens"]) > 4
    british = httpx.post(f"{url}/dev/phonemize", json={"text": "The water.", "language": "b"}, timeout=120)
    american = httpx.post(f"{url}/dev/phonemize", json={"text": "The water."}, timeout=120)
    assert british.json()["phonemes"] != american.json()["phonemes"]
    response = httpx.post(f"{url}/dev/generate_from_phonemes",
                          json={"phonemes": result["phonemes"], "voice": "af_bella"}, timeout=120)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    want = synth.synthesize_phonemes(result["phonemes"], pack(voices, "af_bella")).audio
    assert response.content == _encoded([_Piece(want)], "wav")
    for body, status in (({"phonemes": "", "voice": "af_bella"}, 400), ({"phonemes": "hˈi"}, 422),
                         ({"phonemes": "ə" * 600, "voice": "af_bella"}, 400),
                         ({"phonemes": "hˈi", "voice": "af_nobody"}, 400)):
        refused = httpx.post(f"{url}/dev/generate_from_phonemes", json=body, timeout=60)
        assert refused.status_code == status, (body, refused.text)
        assert refused.json()["detail"]["message"]
    empty = httpx.post(f"{url}/dev/phonemize", json={"text": " "}, timeout=60)
    assert empty.status_code == 400 and empty.json()["detail"]["message"] == "Text cannot be empty"


class _Piece:
    def __init__(self, samples):
        self.samples = samples

    def joined(self):
        return self.samples


def test_combine_returns_a_pt_voice_of_the_blend(server, voices):
    torch = pytest.importorskip("torch")  # the test reads the file with torch; the server has no torch
    url, _ = server
    response = httpx.post(f"{url}/v1/audio/voices/combine", json="af_bella(2)+af_sky(1)", timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == "attachment; filename=af_bella(0.6667)+af_sky(0.3333).pt"
    combined = torch.load(io.BytesIO(response.content), weights_only=True).numpy()
    np.testing.assert_allclose(combined, (2 * pack(voices, "af_bella").astype(np.float64) + pack(voices, "af_sky")) / 3,
                               rtol=1e-6, atol=1e-7)
    listed = httpx.post(f"{url}/v1/audio/voices/combine", json=["af_bella", "echo"], timeout=60)
    assert listed.headers["content-disposition"] == "attachment; filename=af_bella+af_bella.pt"
    assert np.array_equal(torch.load(io.BytesIO(listed.content), weights_only=True).numpy(), pack(voices, "af_bella"))
    for body, status in (("af_bella", 400), ("af_bella+af_nobody", 400), (3, 422), ([], 422)):
        refused = httpx.post(f"{url}/v1/audio/voices/combine", json=body, timeout=60)
        assert refused.status_code == status, (body, refused.text)
    # the file the server writes without torch is what torch.save writes for the tensor
    assert np.array_equal(torch.load(io.BytesIO(torch_file(np.arange(6, dtype="f4").reshape(2, 3))),
                                     weights_only=True).numpy(), np.arange(6).reshape(2, 3))


# --- Kokoro-FastAPI's fields ----------------------------------------------------------------


def speech(url: str, **fields) -> httpx.Response:
    body = {"input": "Hello there.", "voice": "af_heart", "response_format": "pcm", **fields}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def test_stream_false_sends_the_whole_file_with_its_length(server):
    url, _ = server
    streamed = speech(url, response_format="wav")
    whole = speech(url, response_format="wav", stream=False)
    assert whole.status_code == 200 and "x-accel-buffering" not in whole.headers
    assert int(whole.headers["content-length"]) == len(whole.content) == len(streamed.content)
    assert whole.content[44:] == streamed.content[44:]
    with wave.open(io.BytesIO(whole.content)) as w:  # the header states the real length
        assert w.getnframes() == (len(whole.content) - 44) // 2
    assert speech(url, stream=False, stream_format="sse").status_code == 400


def test_download_link_serves_the_same_audio(server):
    url, app = server
    response = speech(url, response_format="pcm", return_download_link=True, download_format="wav")
    path = response.headers["x-download-path"]
    assert re.fullmatch(r"/download/speech-[0-9a-f]{16}\.wav", path)
    saved = httpx.get(f"{url}/v1{path}", params={"name": "my reading!"})
    assert saved.status_code == 200 and saved.headers["content-type"] == "audio/wav"
    assert saved.headers["content-disposition"].endswith('filename="my_reading.wav"')
    assert saved.content[44:] == response.content  # the same samples, a file whose header
    with wave.open(io.BytesIO(saved.content)) as w:  # states its length
        assert w.getnframes() == len(response.content) // 2
    same = speech(url, response_format="mp3", return_download_link=True, stream=False)
    assert httpx.get(f"{url}/v1{same.headers['x-download-path']}").content == same.content
    for name in ("nothing.wav", "speech-0000000000000000.wav", "..%2F..%2Fetc%2Fpasswd"):
        missing = httpx.get(f"{url}/v1/download/{name}")
        assert missing.status_code == 404, name
    assert missing.text == "Not Found"  # a path never reaches the route
    assert httpx.get(f"{url}/v1/download/nothing.wav").json()["detail"]["error"] == "not_found"
    assert len(list(app.state.downloads.directory.iterdir())) <= 16


def test_return_timing_writes_each_chunks_times_beside_the_download(server):
    url, _ = server
    text = "Hello there. [pause:0.25s] [voice:af_bella] Bye."
    response = speech(url, input=text, allow_voice_tags=True, return_download_link=True, return_timing=True)
    path = response.headers["x-download-path"]
    assert response.headers["x-timing-path"] == f"{path}.json"
    saved = httpx.get(f"{url}/v1{path}.json", timeout=60)
    assert saved.status_code == 200 and saved.headers["content-type"] == "application/json"
    chunks = saved.json()["chunks"]
    assert [(c["text"], c.get("voice")) for c in chunks] == [
        ("Hello there.", "af_heart"), ("", None), ("Bye.", "af_bella")]
    seconds = len(response.content) / 2 / audio.SAMPLE_RATE
    assert chunks[0]["start"] == 0 and chunks[-1]["end"] == round(seconds, 3)
    assert chunks[1]["end"] - chunks[1]["start"] == pytest.approx(0.25, abs=0.002)
    assert all(a["end"] == b["start"] for a, b in zip(chunks, chunks[1:]))
    # as Kokoro-FastAPI: only a streamed response with a download link has one
    for fields in ({"return_download_link": True, "stream": False}, {}):
        assert "x-timing-path" not in speech(url, input=text, return_timing=True, **fields).headers


def test_volume_multiplier_scales_the_samples(server):
    url, _ = server
    full = np.frombuffer(speech(url).content, "<i2").astype(np.int32)
    half = np.frombuffer(speech(url, volume_multiplier=0.5).content, "<i2").astype(np.int32)
    assert len(half) == len(full) and np.abs(full).max() > 1000
    assert np.abs(half - full / 2).max() <= 1
    assert speech(url, volume_multiplier=-1).status_code == 400


def test_lang_code_reads_the_text_in_that_language(server, synth, voices):
    url, _ = server
    british = speech(url, input="The water.", lang_code="b")
    assert british.status_code == 200
    assert british.content != speech(url, input="The water.").content
    assert speech(url, input="The water.", lang_code="en-gb").content == british.content
    refused = speech(url, lang_code="xx")
    assert refused.status_code == 400 and "unknown language 'xx'" in refused.json()["error"]["message"]


def test_blends_subtract_and_mix_languages_as_kokoro_fastapi(server, synth, voices):
    url, _ = server
    bella, sky = pack(voices, "af_bella").astype(np.float64), pack(voices, "af_sky")
    response = speech(url, voice="af_bella(3)-af_sky(1)", input="Hi.")
    assert response.status_code == 200, response.text
    assert response.content == _encoded(synth.stream("Hi.", ((3 * bella - sky) / 4).astype(np.float32)))
    # two languages: read in the first voice's, as Kokoro-FastAPI reads them
    mixed = speech(url, voice="bf_emma+af_bella", input="The water.")
    assert mixed.status_code == 200
    assert mixed.content == speech(url, voice="bf_emma+af_bella", input="The water.", lang_code="b").content


#: Kokoro-FastAPI's normalization options, each with a text it changes: (option, text,
#: the Normalization switch it is)
NORMALIZATION_CASES = [
    ("normalize", "It costs $5.", "enabled"),
    ("unit_normalization", "It weighs 5 kg.", "units"),
    ("url_normalization", "See https://example.com now.", "urls"),
    ("email_normalization", "Mail bob@example.com now.", "emails"),
    ("optional_pluralization_normalization", "Pick the file(s).", "plurals"),
    ("phone_normalization", "Call 555-1234.", "phones"),
    ("replace_remaining_symbols", "Rock & roll.", "symbols"),
]


def served(synth: Synthesizer, text: str, voice: np.ndarray, **options) -> bytes:
    """``text`` as the server (its default chunk limits) sends it as pcm."""
    limits = ServerOptions()
    return _encoded(synth.stream(text, voice, chunk_limit=lambda index: chunk_phonemes(index, limits), **options))


def phonemized(url: str, text: str, **fields) -> str:
    response = httpx.post(f"{url}/dev/phonemize", json={"text": text, **fields}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["phonemes"]


@pytest.mark.parametrize("option, text, switch", NORMALIZATION_CASES)
def test_each_normalization_option_is_honoured_with_its_meaning(server, synth, option, text, switch):
    url, _ = server
    default = compat.NORMALIZATION_DEFAULTS[option]
    # a request without the option: Kokoro-FastAPI's default for it
    assert phonemized(url, text) == phonemized(url, text, normalization_options={option: default})
    said = {}
    for value in (True, False):
        said[value] = phonemized(url, text, normalization_options={option: value})
        rules = dataclasses.replace(compat.DEFAULT_NORMALIZATION, **{switch: value})
        assert said[value] == synth.phonemize(text, normalization=rules), (option, value)
    assert said[True] != said[False]


def test_a_default_request_leaves_units_as_written_as_kokoro_fastapi(server, synth, voices):
    url, _ = server
    text = "It weighs 5 kg."
    units_off = Normalization(units=False)
    assert compat.DEFAULT_NORMALIZATION == units_off
    assert phonemized(url, text) == synth.phonemize(text, normalization=units_off) != synth.phonemize(text)
    heart = pack(voices, "af_heart")
    plain = speech(url, input=text)
    assert plain.status_code == 200
    assert plain.content == served(synth, text, heart, normalization=units_off)
    spelled = speech(url, input=text, normalization_options={"unit_normalization": True})
    assert spelled.content == served(synth, text, heart) != plain.content
    # the whole default object is the default
    assert speech(url, input=text, normalization_options=compat.NORMALIZATION_DEFAULTS).content == plain.content
    # captioned speech reads it the same way: "kg" said as written is a word of its own
    words = {}
    for options, want in (({}, plain.content), ({"unit_normalization": True}, spelled.content)):
        body = {"input": text, "voice": "af_heart", "response_format": "pcm", "stream": False,
                "normalization_options": options}
        captioned = httpx.post(f"{url}/dev/captioned_speech", json=body, timeout=120)
        assert captioned.status_code == 200, captioned.text
        assert base64.b64decode(captioned.json()["audio"]) == want
        words[bool(options)] = [w["word"] for w in captioned.json()["timestamps"]]
    assert words[False] == ["It", "weighs", "5", "kg."]
    assert "kg." not in words[True] and words[True][:2] == ["It", "weighs"]


def test_normalize_false_reads_the_input_as_written(server, synth, voices):
    url, _ = server
    text = "It costs $5 on May 3rd."
    off = speech(url, input=text, normalization_options={"normalize": False})
    assert off.status_code == 200
    assert off.content == served(synth, text, pack(voices, "af_heart"), normalization=Normalization(enabled=False))
    assert off.content != speech(url, input=text).content


def test_normalization_options_of_the_wrong_type_are_refused(server):
    url, _ = server
    for options in ({"normalize": "yes"}, {"unit_normalization": 1}, ["normalize"]):
        refused = speech(url, normalization_options=options)
        assert refused.status_code == 400, options
        assert "normalization_options" in refused.json()["error"]["message"]
        body = {"input": "Hi.", "voice": "af_heart", "normalization_options": options}
        assert httpx.post(f"{url}/dev/captioned_speech", json=body, timeout=60).status_code == 422
        assert httpx.post(f"{url}/dev/phonemize", timeout=60,
                          json={"text": "Hi.", "normalization_options": options}).status_code == 422
    # an option Kokoro-FastAPI does not have is ignored, as it ignores it
    assert speech(url, input="Hi.", normalization_options={"other": "x"}).status_code == 200


def test_voice_aliases(server, synth, voices):
    url, _ = server
    aliased = speech(url, voice="Narrator", input="Hi.", voice_aliases={"narrator": "af_bella"})
    assert aliased.content == _encoded(synth.stream("Hi.", pack(voices, "af_bella")))
    paced = speech(url, voice="slow", input="Hi.", voice_aliases={"slow": {"voice": "af_bella", "rate": 0.5}})
    assert paced.content == _encoded(synth.stream("Hi.", pack(voices, "af_bella"), speed=0.5))


# --- [voice:NAME], [rate:X] and [pause:Xs] tags -----------------------------------------------


def rest(synth: Synthesizer, text: str, voice, speed: float = 1.0) -> bytes:
    """``text`` as a part after a request's first chunk is sent (pcm)."""
    return _encoded(synth.stream(text, voice, speed, chunk_limit=ServerOptions().chunk_phonemes))


def silence(seconds: float) -> bytes:
    return bytes(2 * int(seconds * audio.SAMPLE_RATE))


def test_tags_speak_each_part_in_its_voice_with_pauses_as_silence(server, synth, voices):
    url, _ = server
    heart, bella, sky = (pack(voices, name) for name in ("af_heart", "af_bella", "af_sky"))
    text = "Hello there. [voice:echo] Hi, I am Bella. [pause:0.5s] Bye. [voice: af_sky ] [rate:2] Quick."
    response = speech(url, input=text, allow_voice_tags=True)
    assert response.status_code == 200, response.text
    # each part as it is spoken alone (only the request's first chunk is cut short), the
    # pause as its silence: echo is Kokoro-FastAPI's af_bella, [rate:2] twice the speed
    expected = (served(synth, "Hello there.", heart) + rest(synth, "Hi, I am Bella.", bella)
                + silence(0.5) + rest(synth, "Bye.", bella) + rest(synth, "Quick.", sky, 2.0))
    assert response.content == expected
    # a blend, and a voice alias with its pace, in tags; the request speed scales the paces
    aliased = speech(url, input="[voice:Narrator] Hi. [voice:af_bella+af_sky] Hi.", allow_voice_tags=True,
                     speed=2.0, voice_aliases={"narrator": {"voice": "af_bella", "rate": 0.5}})
    mix = ((bella.astype(np.float64) + sky) / 2).astype(np.float32)
    assert aliased.content == served(synth, "Hi.", bella) + rest(synth, "Hi.", mix, 2.0)
    # each part in its voice's language, unless lang_code
    emma = NamedVoice(pack(voices, "bf_emma"), "bf_emma", "b")
    british = speech(url, input="[voice:bf_emma] The water.", allow_voice_tags=True)
    assert british.content == served(synth, "The water.", emma)
    american = speech(url, input="[voice:bf_emma] The water.", allow_voice_tags=True, lang_code="a")
    assert american.content == served(synth, "The water.", dataclasses.replace(emma, language="a"))
    # a whole file, in another format, is the same audio
    whole = speech(url, input=text, allow_voice_tags=True, stream=False, response_format="wav")
    assert whole.status_code == 200 and whole.content[44:] == expected


def test_without_allow_voice_tags_pauses_are_read_and_voice_tags_are_text(server, synth, voices):
    url, _ = server
    heart = pack(voices, "af_heart")
    paused = speech(url, input="Hello. [pause:0.25s] Bye.")  # Kokoro-FastAPI reads pauses always
    assert paused.content == served(synth, "Hello.", heart) + silence(0.25) + rest(synth, "Bye.", heart)
    plain = speech(url, input="Hello. [voice:af_bella] Bye.")
    assert plain.status_code == 200
    assert plain.content != speech(url, input="Hello. [voice:af_bella] Bye.", allow_voice_tags=True).content
    assert speech(url, input="[pause:1]", allow_voice_tags=False).status_code == 200  # spoken as written


def test_captioned_timestamps_run_on_across_the_parts_and_name_the_voice(server):
    url, _ = server
    body = {"input": "Hello there. [pause:0.5s] [voice:af_bella] Bye now.", "response_format": "pcm",
            "allow_voice_tags": True, "stream": False}
    reply = httpx.post(f"{url}/dev/captioned_speech", json=body, timeout=120).json()
    words = reply["timestamps"]
    assert [(w["word"], w["voice"]) for w in words] == [
        ("Hello", "af_heart"), ("there.", "af_heart"), ("Bye", "af_bella"), ("now.", "af_bella")]
    first = httpx.post(f"{url}/dev/captioned_speech", timeout=120,
                       json={**body, "input": "Hello there.", "allow_voice_tags": False}).json()
    first_seconds = len(base64.b64decode(first["audio"])) / 2 / audio.SAMPLE_RATE
    assert words[2]["start_time"] >= first_seconds + 0.5  # after the first part and the pause
    assert all(a["end_time"] <= b["start_time"] + 1e-6 for a, b in zip(words, words[1:]))
    assert "voice" not in first["timestamps"][0]  # without tags, as Kokoro-FastAPI answers
    lines = httpx.post(f"{url}/dev/captioned_speech", json={**body, "stream": True}, timeout=120)
    streamed = [w for line in lines.text.splitlines() if line for w in json.loads(line)["timestamps"]]
    assert streamed == words


@pytest.mark.parametrize("text, words", [
    ("Hi [voice:af_nobody] there.", "[voice:af_nobody]: unknown voice"),
    ("Hi [voice:] there.", "malformed tag '[voice:]'"),
    ("Hi [pause:1] there.", "malformed tag '[pause:1]'"),
    ("Hi [rate:fast] there.", "malformed tag '[rate:fast]'"),
    ("Hi [voice:@x] there.", "malformed tag '[voice:@x]'"),
])
def test_bad_tags_are_refused_before_any_audio(server, text, words):
    url, _ = server
    for path in ("/v1/audio/speech", "/dev/captioned_speech"):
        refused = httpx.post(f"{url}{path}", json={"input": text, "allow_voice_tags": True}, timeout=60)
        assert refused.status_code == 400, (path, refused.text)
        assert words in refused.json()["detail"]["message"], refused.text


def test_a_speed_out_of_range_is_refused_with_tags(server):
    url, _ = server
    refused = speech(url, input="[voice:af_bella] Hi.", allow_voice_tags=True, speed=10)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "speed"


def test_tags_split_as_kokoro_fastapi_splits_them():
    resolve = {"a": ("A", None), "n": ("B", 0.5)}.__getitem__
    parts = tags.split("x [pause:100s] y [voice:n] z [rate:2] w [voice:a] [rate:9] v", "D", True, resolve)
    assert parts == [tags.Speak("D", 1.0, "x"), tags.Pause(60.0), tags.Speak("D", 1.0, "y"),
                     tags.Speak("B", 0.5, "z"), tags.Speak("B", 1.0, "w"), tags.Speak("A", 4.0, "v")]
    # parts of one voice and pace are one; [pause:0s] is nothing
    assert tags.split("x [voice:a] y [pause:0s] z", "A", True, resolve) == [tags.Speak("A", 1.0, "x y"),
                                                                          tags.Speak("A", 1.0, "z")]
    assert tags.split("x [voice:a] y", "D", False) == [tags.Speak("D", 1.0, "x [voice:a] y")]


# --- /dev/dialogue ----------------------------------------------------------------------------


def test_dialogue_is_the_turns_as_tags(server, synth, voices):
    url, _ = server
    body = {"turns": [{"voice": "af_heart", "text": " Hello there. "}, {"voice_id": "echo", "text": "Hi."},
                      {"voice": "af_sky", "text": "Bye."}],
            "pause_between_turns": 0.25, "response_format": "pcm"}
    response = httpx.post(f"{url}/dev/dialogue", json=body, timeout=120)
    assert response.status_code == 200, response.text
    heart, bella, sky = (pack(voices, name) for name in ("af_heart", "af_bella", "af_sky"))
    assert response.content == (served(synth, "Hello there.", heart) + silence(0.25) + rest(synth, "Hi.", bella)
                                + silence(0.25) + rest(synth, "Bye.", sky))
    tagged = speech(url, input="[voice:af_heart] Hello there. [pause:0.25s] [voice:echo] Hi. [pause:0.25s] "
                    "[voice:af_sky] Bye.", allow_voice_tags=True)
    assert tagged.content == response.content
    # "inputs" is its other name; no pause: the turns follow each other; the speech fields apply
    follow = httpx.post(f"{url}/dev/dialogue", timeout=120, json={
        "inputs": body["turns"][:2], "response_format": "wav", "stream": False, "speed": 2.0})
    assert follow.status_code == 200 and "content-length" in follow.headers
    assert follow.content[44:] == served(synth, "Hello there.", heart, speed=2.0) + rest(synth, "Hi.", bella, 2.0)


@pytest.mark.parametrize("body", [
    {}, {"turns": []}, {"turns": [{"voice": "af_heart"}]}, {"turns": [{"voice": "af_heart", "text": "  "}]},
    {"turns": [{"voice": "af_heart]", "text": "Hi."}]},
    {"turns": [{"voice": "af_heart", "text": "Hi."}], "pause_between_turns": 11},
])
def test_dialogue_bodies_off_its_schema_are_422(server, body):
    url, _ = server
    refused = httpx.post(f"{url}/dev/dialogue", json=body, timeout=60)
    assert refused.status_code == 422, refused.text


def test_dialogue_unknown_voice_is_400_naming_its_tag(server):
    url, _ = server
    refused = httpx.post(f"{url}/dev/dialogue", timeout=60,
                         json={"turns": [{"voice": "af_heart", "text": "Hi."}, {"voice": "af_nobody", "text": "Hi."}]})
    assert refused.status_code == 400 and "[voice:af_nobody]" in refused.json()["detail"]["message"]


# --- SSML: ssml: true and /dev/ssml ---------------------------------------------------------------


SSML = ('<speak>Hello <break time="250ms"/> <voice name="echo">Hi <prosody rate="x-fast">there</prosody>'
        '</voice> <sub alias="Doctor">Dr</sub><desc>a sigh</desc> <emphasis>now</emphasis>.</speak>')


def test_ssml_is_translated_onto_the_tags_as_kokoro_fastapi(server, synth, voices):
    url, _ = server
    translated = httpx.post(f"{url}/dev/ssml", json={"text": SSML, "voice": "af_heart"}, timeout=60).json()
    assert translated == {"text": "Hello [pause:0.25s] [voice:echo] Hi [rate:1.5] there [rate:1.0] "
                                  "[voice:af_heart] Doctor now."}
    # without a voice, <voice> and <prosody> are their text; text that is not SSML is as it is
    plain = httpx.post(f"{url}/dev/ssml", json={"text": SSML}, timeout=60).json()["text"]
    assert plain == "Hello [pause:0.25s] Hi there Doctor now."
    assert httpx.post(f"{url}/dev/ssml", json={"text": "Hi <b>."}, timeout=60).json() == {"text": "Hi <b>."}
    # ssml: true reads that translation with the tags
    spoken = speech(url, input=SSML, ssml=True, allow_voice_tags=True)
    assert spoken.status_code == 200, spoken.text
    assert spoken.content == speech(url, input=translated["text"], allow_voice_tags=True).content
    heart, bella = pack(voices, "af_heart"), pack(voices, "af_bella")
    assert spoken.content == (served(synth, "Hello", heart) + silence(0.25) + rest(synth, "Hi", bella)
                              + rest(synth, "there", bella, 1.5) + rest(synth, "Doctor now.", heart))


def test_ssml_errors_and_capabilities(server):
    url, _ = server
    refused = speech(url, input=SSML, ssml=True)  # the translation needs the tags
    assert refused.status_code == 400 and "allow_voice_tags=true" in refused.json()["detail"]["message"]
    for bad in ("<speak>Hi <break>", '<!DOCTYPE speak [<!ENTITY a "b">]><speak>&a;</speak>',
                "<speak>" + "<p>" * 12 + "Hi" + "</p>" * 12 + "</speak>"):
        for response in (speech(url, input=bad, ssml=True, allow_voice_tags=True),
                         httpx.post(f"{url}/dev/ssml", json={"text": bad}, timeout=60)):
            assert response.status_code == 400 and "Malformed SSML" in response.json()["detail"]["message"]
    assert httpx.post(f"{url}/dev/ssml", json={"voice": "af_heart"}, timeout=60).status_code == 422
    capabilities = httpx.get(f"{url}/dev/ssml", timeout=60).json()
    assert set(capabilities["elements"]) == {"speak", "break", "voice", "prosody", "phoneme", "sub", "desc"}
    assert "emphasis" in capabilities["ignored"] and capabilities["rate_range"] == [0.25, 4.0]
    assert capabilities["break_strengths"]["strong"] == 1.0 and capabilities["prosody_rates"]["slow"] == 0.75


# --- the server's switches: voice tags, SSML, /dev/unload, /debug --------------------------------


def test_switched_off_features_are_kokoro_fastapis_403s(synth, voices):
    app = create_app(ServerOptions(voices=voices, warmup=False, voice_tags=False, ssml=False), synth)
    with running(app) as (url, _):
        refused = speech(url, input="[voice:af_bella] Hi.", allow_voice_tags=True)
        assert refused.status_code == 403
        assert refused.json()["detail"] == {"error": "permission_denied", "type": "permission_error",
                                            "message": "Voice tags are disabled on this server"}
        dialogue = {"turns": [{"voice": "af_heart", "text": "Hi."}]}
        assert httpx.post(f"{url}/dev/dialogue", json=dialogue, timeout=60).status_code == 403
        assert httpx.post(f"{url}/dev/dialogue", json={}, timeout=60).status_code == 422  # the schema first
        for response in (httpx.get(f"{url}/dev/ssml"), httpx.post(f"{url}/dev/ssml", json={"text": "Hi."}),
                         speech(url, input=SSML, ssml=True)):
            assert response.status_code == 403
            assert response.json()["detail"]["message"] == "SSML translation is disabled on this server"
        assert speech(url, input="Hi. [pause:0.1s] Bye.").status_code == 200  # pauses are always read


def test_unload_is_403_unless_allowed_and_then_drops_the_build(server, synth, voices):
    url, _ = server
    refused = httpx.post(f"{url}/dev/unload", timeout=60)
    assert refused.status_code == 403 and refused.json()["detail"]["error"] == "The /dev/unload endpoint is disabled"
    for name in ("threads", "storage", "system"):
        debug = httpx.get(f"{url}/debug/{name}", timeout=60)
        assert debug.status_code == 403 and debug.json()["detail"]["error"] == "Debug endpoints are disabled"
    before = speech(url, input="Hi.").content
    app = create_app(ServerOptions(voices=voices, warmup=False, allow_dev_unload=True), synth)
    with running(app) as (other, _):
        assert speech(other, input="Hi.").status_code == 200 and synth.loaded
        assert httpx.post(f"{other}/dev/unload", timeout=60).json() == {"status": "unloaded"}
        assert synth.loaded == []
        assert speech(other, input="Hi.").content == before  # loaded again, the same audio
        assert synth.loaded


def test_web_config_is_kokoro_fastapis(server):
    url, _ = server
    config = httpx.get(f"{url}/web/config", timeout=60).json()
    assert config == {"root_path": "", "version": kokoro_ext.__version__}


def test_long_input_is_chunked_not_refused(server):
    url, app = server
    text = "This is a long reading for the server. " * 150  # over OpenAI's 4096 characters
    with httpx.stream("POST", f"{url}/v1/audio/speech", timeout=120,
                      json={"input": text, "response_format": "pcm"}) as response:
        assert response.status_code == 200
        first = next(response.iter_bytes())
        assert len(first) > 0  # streamed as it is made; leaving cancels the rest
    assert len(text) > 4096


# --- errors, endpoints, CORS, the page ------------------------------------------------------


def test_errors_carry_both_shapes_and_dev_schema_errors_are_422(server):
    url, _ = server
    bad = httpx.post(f"{url}/v1/audio/speech", json={"input": "Hi.", "voice": "af_nobody"})
    assert bad.status_code == 400
    body = bad.json()
    assert body["error"]["param"] == "voice" and body["detail"]["type"] == "invalid_request_error"
    assert body["detail"]["message"] == body["error"]["message"]
    model = httpx.post(f"{url}/v1/audio/speech", json={"input": "Hi.", "model": "gpt-9"}).json()
    assert model["detail"]["error"] == "invalid_model"
    missing = httpx.post(f"{url}/v1/audio/speech", json={"voice": "af_heart"})
    assert missing.status_code == 400  # OpenAI's status on /v1
    captioned = httpx.post(f"{url}/dev/captioned_speech", json={"voice": "af_heart"})
    assert captioned.status_code == 422 and "input" in captioned.json()["detail"]["message"]
    assert httpx.post(f"{url}/dev/captioned_speech", content=b"{").status_code == 422


def test_test_endpoint_and_health(server):
    url, _ = server
    assert httpx.get(f"{url}/v1/test").json() == {"status": "ok"}
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"
    assert httpx.get(f"{url}/v1/models/kokoro").json() == {
        "id": "kokoro", "object": "model", "created": 1686935002, "owned_by": "kokoro"}
    missing = httpx.get(f"{url}/v1/models/gpt-9")
    assert missing.status_code == 404 and missing.json()["detail"]["error"] == "model_not_found"


def test_cors_lets_the_given_origin_only(server):
    url, _ = server
    preflight = {"Origin": "http://page.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type,authorization"}
    allowed = httpx.options(f"{url}/v1/audio/speech", headers=preflight)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://page.example"
    other = httpx.options(f"{url}/v1/audio/speech", headers={**preflight, "Origin": "http://other.example"})
    assert "access-control-allow-origin" not in other.headers
    got = httpx.get(f"{url}/v1/audio/voices", headers={"Origin": "http://page.example"})
    assert got.headers["access-control-allow-origin"] == "http://page.example"


def test_cors_preflight_passes_the_api_key(synth, voices):
    app = create_app(ServerOptions(voices=voices, warmup=False, cors=("*",), api_key="k"), synth)
    with running(app) as (url, _):
        preflight = httpx.options(f"{url}/v1/audio/speech", headers={
            "Origin": "http://page.example", "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
        assert httpx.get(f"{url}/v1/audio/voices").status_code == 401
        # the page's files need no key: a browser fetches them without it
        page = httpx.get(f"{url}/web/")
        assert page.status_code == 200 and "<html" in page.text.lower()


def test_the_page_is_served_under_web_with_a_browser_builds_headers(server):
    url, _ = server
    assert httpx.get(f"{url}/web").status_code in (307, 308)
    page = httpx.get(f"{url}/web/")
    assert page.status_code == 200
    assert page.text == (ROOT / "kokoro_ext/web/static/index.html").read_text()
    assert page.headers["cross-origin-opener-policy"] == "same-origin"
    assert page.headers["cross-origin-embedder-policy"] == "require-corp"
    script = httpx.get(f"{url}/web/tts.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert httpx.put(f"{url}/web/index.html", content=b"x").status_code == 405  # read-only
    assert httpx.get(f"{url}/web/../app.py").status_code == 404


def test_a_browser_build_is_served_with_the_page(synth, voices, tmp_path):
    build = tmp_path / "site"
    (build / "webgpu").mkdir(parents=True)
    (build / "webgpu" / "manifest.json").write_text("{}")
    app = create_app(ServerOptions(voices=voices, warmup=False, web_build=build), synth)
    with running(app) as (url, _):
        opened = httpx.get(f"{url}/web/")
        assert opened.status_code == 302
        assert opened.headers["location"] == "/web/index.html?builds=build/webgpu/"
        manifest = httpx.get(f"{url}/web/build/webgpu/manifest.json")
        assert manifest.json() == {} and manifest.headers["cross-origin-embedder-policy"] == "require-corp"
    assert create_app(ServerOptions(voices=voices, warmup=False, web=False), synth).routes[-1].path != "/web"


# --- the command line and the containers -------------------------------------------------


def test_command_line_defaults_and_options():
    options, workers = parse_args([])
    assert (options.host, options.port, options.cors, options.max_input_chars) == ("127.0.0.1", 8880, (), None)
    assert options.openai_voices == "kokoro-fastapi" and workers == 1
    options, _ = parse_args(["--host", "0.0.0.0", "--cors", "http://a.example", "*",
                             "--openai-voices", "namesake", "--max-input-chars", "5000"])
    assert (options.host, options.cors) == ("0.0.0.0", ("http://a.example", "*"))
    assert (options.openai_voices, options.max_input_chars) == ("namesake", 5000)
    # Kokoro-FastAPI's settings' defaults: voice tags and SSML on, 60 s pauses, no unloading
    assert (options.voice_tags, options.ssml, options.max_pause, options.allow_dev_unload) == (True, True, 60.0, False)
    options, _ = parse_args(["--no-voice-tags", "--no-ssml", "--max-pause", "5", "--allow-dev-unload"])
    assert (options.voice_tags, options.ssml, options.max_pause, options.allow_dev_unload) == (False, False, 5.0, True)


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_dockerfiles_run_the_server_where_kokoro_fastapi_listens(name):
    text = (ROOT / "docker" / name).read_text()
    # every path a COPY takes from the repository is there
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        *sources, _ = shlex.split(line)
        for source in sources:
            assert (ROOT / source).exists(), (name, source)
    # the server command is one the server's parser takes, on 0.0.0.0:8880
    command = json.loads(re.search(r"^CMD (\[.+\])$", text, re.M).group(1))
    assert command[:3] == ["python", "-m", "kokoro_ext.serve"], command
    options, _ = parse_args(command[3:])
    assert (options.host, options.port) == ("0.0.0.0", 8880)
    assert re.search(r"^EXPOSE 8880$", text, re.M)
    # the build the image serves is made by the project's build command
    assert "python -m kokoro_ext.build" in text and "python -m kokoro_ext.build.fetch" in text
