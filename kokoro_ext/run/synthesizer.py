"""``Synthesizer``: text or phonemes to a 24 kHz waveform with the compiled stages."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_ext.run import artifacts, contract, cpu, cuda, native
from kokoro_ext.run.errors import BadSpeed, NothingToSay, TooLong
from kokoro_ext.run.manifest import Manifest
from kokoro_ext.run.pipeline import LengthOverflow, Trace, synthesize_ids, voice_style
from kokoro_ext.run.resident import Steps, Transfers, cuda_transfers, load_cuda_steps
from kokoro_ext.run.resident import synthesize_resident
from kokoro_ext.run.runner import NamedStage, StageRunner, load_library
from kokoro_ext.run.timestamps import TimedWord, times
from kokoro_ext.run.voices import NamedVoice, check_voice_pack, load_voice_array, voice_language
from kokoro_ext.run.wav import SAMPLE_RATE
from kokoro_ext.run.weights import load_weights
from kokoro_ext.text import phonemes_to_ids
from kokoro_ext.text.languages import resolve_language
from kokoro_ext.text.normalize import Normalization
from kokoro_ext.text.pipeline import Chunking, Chunks, Progress, TextChunk, TextPipeline

# OpenAI's range.  Durations are divided by the speed and rounded, at least a frame per
# token (pipeline.synthesize_ids): at 4 short tokens stay one frame, so speech gains less
# than 4x; at 0.25 a chunk needs 4x the frames, and one over the limit is halved (stream).
SPEED_RANGE = (0.25, 4.0)
#: Vocab symbols that are pauses and intonation, not sounds: a chunk of only these is skipped.
SILENT_SYMBOLS = frozenset(" ;:,.!?¡¿—…\"«»“”()→↓↗↘")

#: A voice: a file, name or blend of names (``af_bella(2)+af_sky``: kokoro_ext.run.voices),
#: a NamedVoice, an array [510, 1, 256] (or anything np.asarray takes: a CPU torch
#: tensor), or None for the build's voice.
Voice = str | Path | NamedVoice | np.ndarray | None
#: Most phonemes per chunk (``Synthesizer.stream``): a number, a function of the chunk's
#: index, or None for the build's limit.
ChunkLimit = int | Callable[[int], int] | None


@dataclass
class Chunk:
    """One synthesized piece of a longer text, as ``Synthesizer.stream`` yields it."""

    text: str  # the text spoken ("" for the rest of a word cut between two phonemes)
    phonemes: str
    audio: np.ndarray  # float32 [samples] at 24 kHz
    pause: float  # seconds of silence that go before ``audio`` when chunks are joined
    index: int  # position in the stream, from 0
    seed: int  # seed of this chunk's harmonic source noise: stream's seed + chunk index
    trace: Trace
    # when each word is spoken, in seconds of the stream's joined audio (kokoro_ext.run.timestamps)
    words: tuple[TimedWord, ...] = ()

    def joined(self) -> np.ndarray:
        """The pause before this chunk, then its audio: what it adds to the whole."""
        silence = np.zeros(round(self.pause * SAMPLE_RATE), dtype=np.float32)
        return np.concatenate([silence, self.audio])


def join(chunks: Iterable[Chunk]) -> np.ndarray:
    """Chunks as one waveform, each after its pause."""
    return np.concatenate([np.zeros(0, np.float32), *(c.joined() for c in chunks)])


def check_speed(speed: float) -> None:
    """ValueError unless ``speed`` is a number in SPEED_RANGE (NaN is not)."""
    try:
        value = float(speed)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float's range
        value = math.nan
    if not SPEED_RANGE[0] <= value <= SPEED_RANGE[1]:
        raise BadSpeed(f"speed must be in [{SPEED_RANGE[0]}, {SPEED_RANGE[1]}], got {speed!r}")


def check_cpu(manifest: Manifest, host: cpu.HostCPU | None = None) -> None:
    """ValueError if the build's code cannot run on this machine: for a CPU build, if it
    uses instructions ``host`` (this CPU) lacks; for a CUDA build, without a GPU that
    runs its kernels (kokoro_ext.run.cuda.check_device).

    The target's architecture (its ``mtriple``, where it has one; a CUDA build's host
    code's) against the host's, then the manifest's ``cpu_features`` (the build side's
    LLVM computed them for its target) against the host's CPU flags: no LLVM here.
    """
    kind = manifest.target.get("kind")
    if kind == "cuda":
        host_target = manifest.target.get("host") or {}
        cpu.check_architecture(host_target.get("mtriple"), "these artifacts' host code was", host)
        cuda.check_device(manifest.requires)
        return
    if kind != "llvm":
        raise ValueError(
            f"these artifacts were compiled for {kind}, not for a CPU: a webgpu build runs "
            "in a browser (python -m kokoro_ext.web --artifacts DIR serves it); build "
            "for this CPU with `python -m kokoro_ext.build --target llvm`"
        )
    if cpu.architecture(manifest.target.get("mtriple") or "") == "wasm32":
        raise ValueError(
            "these artifacts were compiled for wasm32, a browser's CPU: a --target wasm "
            "build runs in a browser (python -m kokoro_ext.web --artifacts DIR serves it); "
            "build for this CPU with `python -m kokoro_ext.build --target llvm`"
        )
    cpu.check_architecture(manifest.target.get("mtriple"), "these artifacts were", host)
    mcpu = manifest.target.get("mcpu", "the build host")
    what = f"these artifacts were compiled for CPU {mcpu!r} and"
    cpu.check_features(manifest.cpu_features, what, host)


class Synthesizer:
    """Loads a build (``python -m kokoro_ext.build --out DIR``) and synthesizes speech.

    Loading refuses a build it cannot run faithfully, naming why: another TVM version, a
    CPU this host is not, a missing file, or a file whose SHA-256 differs
    from the manifest (a stage's files are checked when the stage is loaded, before
    anything of it is; a file this user verified before and that is unchanged since is
    not hashed again: kokoro_ext.run.stamps).  Each stage (one library for every length)
    is loaded on its first use, its weights memory-mapped as ``main`` takes them.

    One Synthesizer may be shared between threads.  Calls are serialized by a lock, one
    chunk at a time: each compiled stage already uses every core (TVM's thread pool and
    the native kernels), so parallel calls would only contend for them, and a Relax
    VirtualMachine is not documented as safe to call from several threads at once.
    Streams interleave chunk by chunk; G2P and stage loading have locks of their own.

    A CUDA build whose manifest lists a steps module runs each chunk with its tensors on
    the GPU (kokoro_ext.run.resident): the durations, alignments and source noise are
    device kernels, and the noise is the device's Philox noise of the seed, not torch's
    CPU draws.  ``device_steps=False`` runs the host steps instead (torch's CPU noise, every
    stage's outputs in ``Trace.stages``): what the fidelity tools compare engines with.
    """

    def __init__(
        self, artifacts_dir: str | Path = "artifacts", lang: str | None = None,
        device_steps: bool = True,
    ):  # fmt: skip
        # lang: a Kokoro language code (a b e f h i j p z, kokoro_ext.text.languages);
        # None speaks the language each call's voice name implies (ef_dora: Spanish)
        self.lang = None if lang is None else resolve_language(lang).code
        self.directory = Path(artifacts_dir)
        self.manifest = artifacts.read_manifest(self.directory)
        installed = native.runtime_library().version
        if self.manifest.tvm != installed:
            raise ValueError(
                f"{self.directory} was built with TVM {self.manifest.tvm}, this is TVM "
                f"{installed}; rebuild with `python -m kokoro_ext.build --out {self.directory}`"
            )
        # The TVM patch series changes only the compiler (Python side): the stage libraries
        # do not depend on it, so loading does not check it (kokoro_ext.build.environment
        # does, where a build is compared or rebuilt).
        check_cpu(self.manifest)
        # every file must be present now; the stages' bytes are checked when each is
        # loaded (hashing 500 MB of weights takes a third of a second or more)
        artifacts.verify(self.directory, self.manifest, check_bytes=False)
        artifacts.verify(self.directory, self.manifest, [artifacts.CONFIG, artifacts.VOICE])
        self.config = json.loads((self.directory / artifacts.CONFIG).read_text())
        self.vocab: dict[str, int] = self.config["vocab"]
        self.geometry = self.manifest.geometry
        self.voice = load_voice_array(self.directory / artifacts.VOICE)
        self.limits = self.manifest.limits
        self._runners: dict[str, NamedStage] = {}
        self._pipelines: dict[str, TextPipeline] = {}
        self._lock = threading.Lock()
        # a lock per stage: the first chunk's text stage need not wait for the decoder's load
        self._load_locks = {name: threading.Lock() for name in self.manifest.stages}
        self._text_lock = threading.Lock()
        self.device_steps = device_steps
        self._steps: Steps | None = None
        self._transfers: Transfers | None = None
        self._device_stages: dict[str, NamedStage] = {}
        self._steps_lock = threading.Lock()

    def _stage(self, name: str) -> NamedStage:
        """The compiled stage ``name``, called by the names of its signature."""
        if name in self._runners:
            return self._runners[name]
        entry = self.manifest.stages[name]
        with self._load_locks[name]:  # two threads' first use of a stage must load it once
            if name not in self._runners:
                artifacts.verify(self.directory, self.manifest, [entry.file, entry.weights.file])
                device = "cuda" if self.manifest.target.get("kind") == "cuda" else "cpu"
                if device == "cuda":
                    cuda.load_runtime()
                    cuda.load_libraries(self.directory, self.manifest.requires)
                library = load_library(self.directory / entry.file, device)
                arrays = load_weights(self.directory / entry.weights.file, entry.weights.tensors)
                signature = entry.signature
                self._runners[name] = NamedStage(
                    StageRunner(library, arrays, device),
                    signature.input_names,
                    signature.output_names,
                )
            return self._runners[name]

    def _device_stage(self, name: str) -> NamedStage:
        """Stage ``name`` on tensors on its device, its outputs left there."""
        if name not in self._device_stages:
            stage = self._stage(name)
            self._device_stages[name] = NamedStage(stage.call.call_tensors, stage.inputs,
                                                   stage.outputs)  # fmt: skip
        return self._device_stages[name]

    def resident(self) -> tuple[Steps, Transfers] | None:
        """The device steps and transfers of a CUDA build with a steps module (loaded
        once), None where chunks run the host steps (another build, or
        ``device_steps=False``)."""
        if not self.device_steps or self.manifest.target.get("kind") != "cuda":
            return None
        if self._steps is None:
            with self._steps_lock:
                if self._steps is None:
                    steps = load_cuda_steps(self.directory, self.manifest.requires)
                    if steps is None:
                        self.device_steps = False  # a build without one: the host steps
                        return None
                    self._transfers, self._steps = cuda_transfers(), steps
        return self._steps, self._transfers

    def synthesize_ids(
        self, ids: list[int], style: np.ndarray, speed: float = 1.0, seed: int = 0,
        noise: np.ndarray | None = None,
    ) -> Trace:  # fmt: skip
        """One chunk of token ids (kokoro's boundary 0s included) and a [1, 256] style row
        -> Trace, on the device where the build has device steps (``resident``), else
        through the host steps.  ``noise`` [1, samples, harmonics]: the source noise to
        use instead of the seed's (the host steps' torch draws, or the device's Philox)."""
        resident = self.resident()
        with self._lock:
            if resident is not None:
                steps, transfers = resident
                transfers.reset()
                return synthesize_resident(self._device_stage, steps, transfers, self.geometry,
                                           ids, style, self.limits, speed, seed, noise)  # fmt: skip
            return synthesize_ids(self._stage, self.geometry, ids, style, self.limits, speed,
                                  seed, noise)  # fmt: skip

    def load(self) -> None:
        """Load every stage now (each is otherwise loaded on its first use).

        Safe to call from another thread while this one phonemizes: a process that
        speaks at once can overlap the two.  The stages load in the order they run, so
        that the first can start while the loader is at the next.
        """
        for name in sorted(self.manifest.stages, key=list(contract.STAGES).index):
            self._stage(name)

    def unload(self) -> None:
        """Drop every loaded stage, its code and weights, so that their memory can be
        returned; each loads again on its next use.  Not while another thread synthesizes
        (kokoro_ext.serve runs it as a job of its own, between chunks)."""
        for name in list(self._runners):
            with self._load_locks[name]:
                self._runners.pop(name, None)
                self._device_stages.pop(name, None)  # it holds the runner and its weights
        with self._steps_lock:  # the device steps' buffers (CUDA builds)
            self._steps = self._transfers = None

    @property
    def loaded(self) -> list[str]:
        """The stages loaded now."""
        return sorted(self._runners)

    def _pipeline(self, voice: Voice = None) -> TextPipeline:
        # a blend's or NamedVoice's language is that of its voices' names
        code = resolve_language(self.lang or voice_language(voice), voice).code
        if code not in self._pipelines:
            self._pipelines.setdefault(code, TextPipeline(code))  # kokoro_ext.text.pipeline
        return self._pipelines[code]

    def phonemize(self, text: str, voice: Voice = None, markdown: bool = True,
                  normalization: Normalization | None = None) -> str:
        """Text (markup, numbers, ...: kokoro_ext.text.frontend) -> Kokoro phonemes;
        ``normalization`` as for ``stream``."""
        with self._text_lock:
            return self._pipeline(voice).phonemize(text, markdown, normalization)

    @property
    def chunk_limit(self) -> int:
        """Most phonemes in one chunk: the token limit less kokoro's two boundaries."""
        return self.limits.tokens - 2

    def stream(
        self,
        text: str,
        voice: Voice = None,
        speed: float = 1.0,
        seed: int = 0,
        chunk_limit: ChunkLimit = None,
        markdown: bool = True,
        normalization: Normalization | None = None,
    ) -> Iterator[Chunk]:
        """Text of any length -> Chunks, each yielded as soon as it is synthesized.

        The text is split into sentences and phonemized one sentence at a time, and the
        phonemes are packed into chunks that fit the token limit, as even as they can be
        (and, if the audio would not fit the frame limit, halved again): see
        kokoro_ext.text.chunking.  Chunk ``i`` uses noise seed ``seed + i``: the output is
        deterministic, and each chunk is ``synthesize_phonemes(chunk.phonemes, voice,
        speed, seed + i)``.  ``Chunk.pause`` is the silence
        to put before it (kokoro_ext.text.chunking.PAUSES); ``join`` applies it.

        The text is read in the Synthesizer's ``lang``, else the language the voice's name
        implies, else American English, with SSML, numbers and symbols handled as
        kokoro_ext.text.frontend says; text that is not SSML is read as Markdown (markers
        unsaid, code blocks skipped) unless ``markdown=False``, which reads it as
        written.  ``normalization`` (kokoro_ext.text.normalize.Normalization) turns kinds
        of written forms' reading off (None: all are read: units, URLs, ...).  Letters of
        scripts the language does not write are dropped with a warning; text
        that leaves nothing to say raises ValueError (when the stream is exhausted).
        Arguments are checked here, before the first chunk is asked for.

        ``chunk_limit``: the most phonemes in one chunk, at most (and by default)
        ``self.chunk_limit``; or a function of a chunk's index giving that chunk's limit,
        called just before the chunk is cut, so that a caller can bound each chunk's work
        as it goes (kokoro_ext.serve makes a request's first chunk smaller while other
        requests wait for their first audio).  When the limit changes, the rest of the
        sentence is packed again with the new one; a chunk already halved for the frame
        limit, or the rest of a word cut between two phonemes, is kept as it was cut.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise NothingToSay("no text to synthesize: the text is empty or only whitespace")
        check_speed(speed)
        limit = self._chunk_limits(chunk_limit)
        voice_pack = self._voice_pack(voice)
        pipeline = self._pipeline(voice)
        progress = Progress()
        chunking = Chunking(limit, self.chunk_limit, progress, self.vocab, SILENT_SYMBOLS)
        # markup is parsed and the text cleaned now; the G2P and chunks come lazily, each
        # with all its synthesis needs (ids, pause, its words' tokens): the text side is
        # entered again only to halve a chunk whose audio is over the frame limit
        chunks = pipeline.run(text, markdown, chunking=chunking, normalization=normalization)
        language = pipeline.language.name.split()[-1]
        return self._chunks(chunks, progress, text, language, voice_pack, speed, seed)

    def _chunk_limits(self, chunk_limit: ChunkLimit) -> int | Callable[[int], int]:
        """``chunk_limit`` checked (the pipeline keeps each chunk's in [1, self.chunk_limit])."""
        if chunk_limit is None or callable(chunk_limit):
            return self.chunk_limit if chunk_limit is None else chunk_limit
        if isinstance(chunk_limit, bool) or not isinstance(chunk_limit, int) or chunk_limit < 1:
            raise ValueError(f"chunk_limit must be a whole number of phonemes >= 1, got {chunk_limit!r}")
        return chunk_limit

    def _chunks(
        self, chunks: Chunks, progress: Progress, text: str, language: str, voice,
        speed: float, seed: int,
    ) -> Iterator[Chunk]:
        index = 0
        elapsed = 0  # samples of joined audio before the next chunk's pause
        seconds_per_frame = self.geometry.samples_per_frame / SAMPLE_RATE
        while True:
            with self._text_lock:  # the G2P of the next sentence, if the chunk needs it
                cut = next(chunks.chunks, None)
            if cut is None:
                break
            halves: list[TextChunk] = [cut]  # a chunk too long for the frame limit, halved
            while halves:
                chunk = halves.pop()
                try:
                    trace = self._run(list(chunk.ids), voice, speed, seed + index)
                except LengthOverflow:
                    # durations are known only after the text stage: halve and try again
                    # (the one way back into the text side, for a chunk the limit missed)
                    split = chunks.halve(chunk)
                    if split is None:
                        raise TooLong(
                            f"{chunk.phonemes!r} needs more than this build takes in one call "
                            "and cannot be cut shorter"
                        )
                    halves += split[::-1]
                    continue
                elapsed += round(chunk.pause * SAMPLE_RATE)  # as Chunk.joined puts it
                timed = times(chunk.timing, trace.durations, elapsed / SAMPLE_RATE, seconds_per_frame)
                elapsed += len(trace.audio)
                yield Chunk(
                    text=chunk.text,
                    phonemes=chunk.phonemes,
                    audio=trace.audio,
                    pause=chunk.pause,
                    index=index,
                    seed=seed + index,
                    trace=trace,
                    words=timed,
                )
                index += 1
                # the chunk limit of the next chunk may depend on these (Chunking)
                progress.said, progress.last_end = index, chunk.piece.end
        if index == 0:
            raise NothingToSay(
                f"nothing to say in {language} in {text[:60]!r}{'...' if len(text) > 60 else ''}: "
                "it has no words, only punctuation or symbols without a pronunciation"
            )

    def synthesize(
        self,
        text: str,
        voice: Voice = None,
        speed: float = 1.0,
        seed: int = 0,
        markdown: bool = True,
        normalization: Normalization | None = None,
    ) -> np.ndarray:
        """Text of any length -> float32 waveform at 24 kHz: ``join(stream(...))``."""
        return join(self.stream(text, voice, speed, seed, markdown=markdown, normalization=normalization))

    def synthesize_phonemes(
        self,
        phonemes: str,
        voice: Voice = None,
        speed: float = 1.0,
        seed: int = 0,
    ) -> Trace:
        """Kokoro phonemes (one chunk) -> Trace (audio, durations and stage outputs).

        ``voice``: a voice pack file (.bin, .npy or .pt), the name of a fetched voice
        (``af_heart``: kokoro_ext.run.voices), a blend of them (``af_bella(2)+af_sky``),
        a NamedVoice or an array [510, 1, 256]; the build's voice by default.  ``seed`` fixes the harmonic source noise (kokoro's draws after
        manual_seed(seed)).  Raises LengthOverflow (a ValueError) if the phonemes do not
        fit the limits; ``stream`` splits such input instead.
        """
        check_speed(speed)
        ids = phonemes_to_ids(phonemes, self.vocab)
        if not phonemes.strip() or len(ids) <= 2:
            raise NothingToSay(f"no phonemes to synthesize in {phonemes!r}")
        return self._run(ids, self._voice_pack(voice), speed, seed)

    def _voice_pack(self, voice: Voice) -> np.ndarray:
        if voice is None:
            return self.voice
        if isinstance(voice, NamedVoice):
            return voice.pack
        if not isinstance(voice, (str, Path)):
            return check_voice_pack(np.asarray(voice), "voice array")
        # a file (.bin, .npy, .pt), the name of a fetched voice (af_heart) or a blend of
        # names (af_bella+af_sky), checked alike
        return load_voice_array(voice)

    def _run(self, ids: list[int], voice: np.ndarray, speed: float, seed: int) -> Trace:
        return self.synthesize_ids(ids, voice_style(voice, len(ids) - 2), speed, seed)

