"""What a user gets: the real model speaking real texts, cold and warm, engine by engine.

Texts (TEXTS, plain English prose): one word, "Hello world.", a 20-word sentence, a
100-word paragraph and a 400-word page.  Engines, all with the Kokoro-82M v1.0 weights
of the fetched ``kokoro-v1.0.int8.onnx`` dequantized to float32 (except onnx-int8, which
runs that file itself) and the voice af_heart:

  tvm        this project's build (``--artifacts``), public API only: a fresh process is
             ``python -m kokoro_ext.say TEXT -o WAV --artifacts DIR --voice af_heart
             --stream``; warm is ``Synthesizer(DIR).stream(text, "af_heart")`` after
             ``kokoro_ext.run.prefer_runtime_library()``, as ``say`` calls it.  More
             builds, each an engine of its own: ``--build [NAME=]DIR`` (repeatable), as
             engine ``tvm-NAME``; NAME defaults to the build's precision (build_facts)
  eager      kokoro 0.9.4 ``KModel`` loaded by kokoro itself from a .pth of the
             dequantized weights (cached once), called per chunk as KPipeline does
             (``model(phonemes, voice[len(phonemes) - 1])``)
  compile    the same, with ``forward_with_tokens = torch.compile(..., dynamic=True)``
             (inductor).  Only on request: the warm-up compile took 341 s on 2 shared
             cores and a new length still recompiles, so warm runs of it get one untimed
             run per text first (reported), and fresh processes run "hello" only
  onnx       kokoro's ``KModelForONNX`` exported once to fp32 ONNX (TorchScript exporter,
             opset 20, dynamic token axis; cached as ~/.cache/kokoro-tvm-ext/
             kokoro-v1.0.fp32.onnx), run by kokoro-onnx's ``Kokoro`` (ONNX Runtime, CPU)
  onnx-int8  kokoro-onnx 0.6.1 ``Kokoro(kokoro-v1.0.int8.onnx, voices.npz)``

An engine that cannot load (a package, model file or build missing, a build this
kokoro_ext cannot run) is checked for by a child before anything is timed, reported in
one line and left out; a run that fails later is a failed cell of the table.

Text to phonemes to chunks is the same code for every engine: kokoro_ext.text (misaki's
English G2P offline, espeak-ng fallback) and its chunker (a chunk per sentence, split
further only past ``--chunk-limit`` phonemes; pauses between chunks from
kokoro_ext.text.PAUSES).  tvm does it inside ``Synthesizer.stream`` (with its build's own
chunk limit); the others call the same functions, then hand each chunk's phonemes to
their model (kokoro-onnx: ``create(phonemes, is_phonemes=True, trim=False)``).  G2P is
inside every timing.  The chunks each engine spoke are recorded.

fresh  one new process per (engine, text): wall time from spawning it to its exit (the
       WAV written; interpreter start, imports, model load and G2P included); first
       audio: when the process reports its first chunk on stdout (``say --stream``
       prints ``chunk 0``, the children of this script do the same); peak RSS: that
       process's ``ru_maxrss`` from ``os.wait4`` (the kernel's high-water mark).
warm   one process per engine, all loaded at once (one after another: load, a warm-up
       call, the sentence), then ``--repeat`` rounds of every text, each round running
       it on every engine in turn, so that a slow stretch of the machine hits all
       engines alike (half a second apart: an engine's threads spin-wait for a while
       after a run); medians of total time and of time to the first chunk.  Texts
       whose first warm run takes longer than ``--long-seconds`` are run once.
       "x eager" is the warm total over eager's.  The page gets fresh runs only from
       ``--fresh-long-engines`` (tvm builds, onnx, onnx-int8): elsewhere it is about
       the load plus a warm run, minutes of eager for nothing new.
warm peak RSS, per text: the memory a loaded engine needs to speak that text again.
       One new process per (engine, text) (``--skip-rss``: none): load, speak the text
       once (untimed: first-call allocations, arenas and pools sized for this length),
       reset the kernel's high-water mark (``5`` into /proc/self/clear_refs: VmHWM
       becomes the current RSS), speak it again, read VmHWM.  A process per text, so
       that no longer text or warm-up call has grown the heap first, and the reset, so
       that the load's own transient peak is not counted.  Where the reset is refused
       the peak is since the process started (the result says ``reset: false``).
size   on disk, per engine, what it loads besides the shared voice and config: a tvm
       build's directory (every file), the .pth for eager and compile, the fp32 export
       for onnx, ``kokoro-v1.0.int8.onnx`` for onnx-int8; apparent sizes (st_size).

Writes ``user.json`` and ``user.txt`` (the tables) to ``--out`` (default bench/results),
then ``user.png`` if matplotlib is installed, with the machine (CPU, cores, load,
versions).  The machine is shared: read the load.

    python bench/user.py [--engines tvm,eager,onnx,onnx-int8[,compile]]
                         [--texts word,hello,sentence,paragraph,page] [--repeat 3]
                         [--artifacts artifacts] [--build [NAME=]DIR ...]
                         [--skip-fresh | --skip-fresh-long] [--skip-rss] [--out DIR]

A quick look: ``--texts word,hello --repeat 1 --engines tvm,onnx-int8 --skip-fresh``.

The cached files (the .pth, the fp32 export, the voices npz) are made once, by a child,
before anything is timed: this process stays small so that no child inherits its RSS.

Needs ``pip install --no-build-isolation -e ".[bench]"`` (torch, kokoro, kokoro-onnx,
onnxruntime, matplotlib...).  The one place a build's manifest is read: build_facts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench/harness.py, also when loaded by file path (tests)

from harness import machine_record, one_line, read_wav, skipped, write_results  # noqa: E402

VOICE = "af_heart"
#: kokoro's context is 512 tokens, two of them the boundaries.
KOKORO_CHUNK_LIMIT = 510
FRESH_CHUNK = "chunk "  # a child's stdout line that says its first audio is ready
RESULT = "RESULT "  # a child's stdout line with its results, JSON
READY = "READY"  # a warm child's stdout line: loaded and warmed up, ready for texts
RUN = "RUN "  # a warm child's stdout line with one run's results, JSON
#: Seconds between two warm runs: an engine's threads spin-wait for up to ~0.15 s after
#: its run (TVM's pool, ONNX Runtime's), which would slow the next engine's start.
SETTLE_S = 0.5

SENTENCE = (
    "The old lighthouse keeper climbed the narrow stairs every evening to light the lamp "
    "that guided the ships safely home."
)
PARAGRAPH = (
    "Every morning the small bakery on the corner opened its doors before the sun came up. "
    "The smell of fresh bread drifted down the quiet street and woke the neighbors one by one. "
    "Children on their way to school pressed their faces against the window to look at the cakes. "
    "The baker, a patient woman with flour on her sleeves, always saved a few warm rolls for them. "
    "In the afternoon the shop grew calm, and she sat by the door with a cup of tea. "
    "She liked to watch people pass and wonder where their lives would take them."
)
PAGE = (
    "The river that runs through our valley begins as a thin stream high in the mountains. "
    "In early spring, when the snow starts to melt, the water rushes down the slopes and "
    "gathers strength with every mile. "
    "By the time it reaches the first village, it has become wide enough for a small boat, and "
    "the fishermen wait on its banks with their nets. "
    "Farther down, the river slows and turns, cutting long curves through the fields of wheat "
    "and barley.\n\n"
    "When I was a child, my grandfather took me walking along the water almost every weekend. "
    "He knew the name of every bird that nested in the reeds and every tree that leaned over "
    "the current. "
    "He would stop without warning, raise a hand, and point at a heron standing perfectly still"
    " in the shallows. "
    "We would watch it together for a long time, neither of us saying a word, until it struck "
    "at a fish or lifted into the air. "
    "Those quiet hours taught me more patience than any lesson at school.\n\n"
    "The river is not always gentle, though. "
    "Some years the autumn rains fall for weeks, and the water rises until it spills over the "
    "low meadows and into the lanes of the town. "
    "People move their furniture upstairs, pile sandbags against their doors, and wait for the "
    "flood to pass. "
    "Afterward everyone helps to clean the mud from the streets and the cellars, and for a "
    "while neighbors who rarely spoke become close companions. "
    "The old people say that the floods remind the town that it lives by the river's permission"
    " and not the other way around.\n\n"
    "Today the valley is changing very quickly. "
    "New houses climb the hills, a wide road follows the old towpath, and the mill where my "
    "grandfather worked has become a museum. "
    "It still carries the melted snow down from the mountains, still floods the meadows in the "
    "wet years, and still shelters herons in its reeds. "
    "When I walk along its banks now, I sometimes take my own daughter with me, and I find "
    "myself stopping without warning to raise a hand and point. "
    "She laughs at first, but then she grows quiet, and together we watch the water move slowly"
    " toward the sea. "
    "Rivers outlast the people who love them, but the love can be passed along, like a story "
    "told again and again beside the same slow water."
)
TEXTS = {
    "word": "Hello",
    "hello": "Hello world.",
    "sentence": SENTENCE,
    "paragraph": PARAGRAPH,
    "page": PAGE,
}
LONG_TEXTS = ("page",)  # fresh only for --fresh-long-engines
WARM_UP = "sentence"
#: The engines by kind (a kind's child code); the engines of a run are named by kind,
#: or ``tvm-NAME`` for a ``--build``.
ENGINES = {
    "tvm": "TVM (kokoro_ext)",
    "eager": "PyTorch eager",
    "compile": "torch.compile",
    "onnx": "ONNX Runtime fp32",
    "onnx-int8": "kokoro-onnx int8",
}
#: torch.compile is asked for by name: its compile takes minutes on 2 cores, in every
#: fresh process (which is therefore run on COMPILE_FRESH_TEXTS only).
DEFAULT_ENGINES = ("tvm", "eager", "onnx", "onnx-int8")
COMPILE_FRESH_TEXTS = ("hello",)


# -- the builds of this project ---------------------------------------------------------


def build_facts(directory: Path) -> dict:
    """What this bench reads from a build's manifest, the one place it does: whether the
    manifest is there, whether the weights are trained ones (a random-weights build has
    its own voice shape and is measured for plumbing only), and the precision of its
    weights (the manifest's ``precision``, else the narrowest dtype of its weights
    files' tensors: "fp32", "int8"...)."""
    try:
        manifest = json.loads((Path(directory) / "manifest.json").read_text())
    except (OSError, ValueError):
        return {"manifest": False, "real_weights": True, "precision": None}
    if not isinstance(manifest, dict):
        return {"manifest": False, "real_weights": True, "precision": None}
    weights = manifest.get("weights") or {}
    dtypes = set()
    for stage in (manifest.get("stages") or {}).values():
        dtypes |= {t[1] for t in stage.get("weights", {}).get("tensors", [])}
    return {"manifest": True, "real_weights": "random_seed" not in weights,
            "precision": manifest.get("precision") or precision_name(dtypes)}


def precision_name(dtypes: set[str]) -> str | None:
    """The narrowest of ``dtypes`` as a short name: {"float32", "int8"} -> "int8"."""
    if not dtypes:
        return None

    def bits(dtype: str) -> int:
        digits = "".join(c for c in dtype if c.isdigit())
        return int(digits) if digits else 64

    narrowest = min(dtypes, key=lambda d: (bits(d), d))
    if narrowest.startswith("bfloat"):
        return "bf" + str(bits(narrowest))
    if narrowest.startswith("float"):
        return "fp" + str(bits(narrowest))
    return narrowest


def real_weights(artifacts: Path) -> bool:
    return build_facts(artifacts)["real_weights"]


def artifacts_info(directory: Path) -> dict:
    if not directory.is_dir():
        return {"path": str(directory), "exists": False}
    files = [p for p in directory.rglob("*") if p.is_file()]
    return {"path": str(directory.resolve()), "exists": True,
            "bytes": sum(p.stat().st_size for p in files),
            "so_files": sum(p.suffix == ".so" for p in files), **build_facts(directory)}


def parse_build(value: str) -> tuple[str | None, Path]:
    """``NAME=DIR`` or ``DIR`` (named by its precision later)."""
    name, sep, directory = value.partition("=")
    if sep and name and "/" not in name:
        return name, Path(directory)
    return None, Path(value)


def engine_specs(args: argparse.Namespace) -> dict[str, dict]:
    """The engines of this run: name -> kind, label and, for a tvm build, its directory."""
    specs: dict[str, dict] = {}
    for engine in args.engines:
        specs[engine] = {"kind": engine, "label": ENGINES[engine]}
        if engine == "tvm":
            specs[engine]["artifacts"] = str(args.artifacts)
            precision = build_facts(args.artifacts)["precision"]
            if precision:
                specs[engine]["label"] = f"TVM {precision} (kokoro_ext)"
    for name, directory in args.builds:
        name = name or build_facts(directory)["precision"] or directory.name
        engine = f"tvm-{name}"
        if engine in specs:
            engine = f"tvm-{name}-{directory.name}"
        specs[engine] = {"kind": "tvm", "label": f"TVM {name}", "artifacts": str(directory)}
    return specs


# -- files made once, before anything is timed ----------------------------------------


def cache_files() -> dict[str, Path]:
    from kokoro_ext.run.cache import cache_dir, model_path

    root = cache_dir()
    return {
        "pth": root / "kokoro-v1.0.dequantized.pth",
        "onnx": root / "kokoro-v1.0.fp32.onnx",
        "int8": model_path(),  # fetched, never made here
        "voices": root / "voices-kokoro-onnx.npz",
        "config": root / "kokoro-v1.0.config.json",
    }


def prepare(specs: dict[str, dict], log=print) -> dict:
    """Check that every engine can load and make the files they load that the fetch does
    not give, cheapest checks first (a missing package costs no export).

    Returns ``unavailable`` (engine -> the reason, one line), ``sizes`` (engine -> its
    model's path and bytes) and ``spent`` (seconds per file made).
    """
    unavailable: dict[str, str] = {}
    for engine, spec in specs.items():
        try:
            RUNNERS[spec["kind"]].imports()
        except Exception as error:  # noqa: BLE001 - any reason skips the engine
            unavailable[engine] = one_line(error)
    wanted = {f for e, s in specs.items() if e not in unavailable
              for f in RUNNERS[s["kind"]].needs}
    spent, failed = make_files(wanted, log)
    sizes = {}
    for engine, spec in specs.items():
        if engine in unavailable:
            continue
        runner = RUNNERS[spec["kind"]]
        try:
            for name in runner.needs:
                if name in failed:
                    raise RuntimeError(f"making {cache_files()[name].name}: {failed[name]}")
            path = runner.check(spec)
        except Exception as error:  # noqa: BLE001
            unavailable[engine] = one_line(error)
            continue
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        sizes[engine] = {"path": str(path.resolve()), "bytes": sum(p.stat().st_size for p in files)}
    return {"unavailable": unavailable, "sizes": sizes, "spent": spent}


def make_files(wanted: set[str], log=print) -> tuple[dict[str, float], dict[str, str]]:
    """Write the ``wanted`` cache files that are missing: kokoro's own checkpoint format (a
    dict of submodule state dicts) for eager and compile, the fp32 ONNX export for onnx,
    kokoro-onnx's voices file (an npz of name -> [510, 1, 256]) and kokoro's config.json.
    (seconds spent per file, the reason per file that could not be made)."""
    files = cache_files()
    wanted = set(wanted)
    if "onnx" in wanted and not files["onnx"].exists():
        wanted.add("pth")  # the export starts from it
    missing = [k for k in ("config", "voices", "pth", "onnx")
               if k in wanted and not files[k].exists()]
    spent: dict[str, float] = {}
    failed: dict[str, str] = {}
    if not missing:
        return spent, failed
    try:
        import numpy as np
        import torch

        from kokoro_ext.build.model import build_model, load_config, load_voice_array
        from kokoro_ext.run.cache import default_weights

        config = load_config(None)
    except Exception as error:  # noqa: BLE001
        return spent, {k: one_line(error) for k in missing}
    start = time.perf_counter()
    try:
        if "config" in missing:
            files["config"].write_text(json.dumps(config, ensure_ascii=False))
        if "voices" in missing:
            with open(files["voices"], "wb") as f:  # np.savez would add .npz to a str path only
                np.savez(f, **{VOICE: load_voice_array(VOICE)})
    except Exception as error:  # noqa: BLE001
        failed.update({k: one_line(error) for k in ("config", "voices") if k in missing})
    spent["config+voices"] = time.perf_counter() - start
    if "pth" in missing:
        start = time.perf_counter()
        try:
            model = build_model(config, weights=default_weights()).eval()
            spent["dequantize"] = time.perf_counter() - start
            parts = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
            torch.save({p: getattr(model, p).state_dict() for p in parts}, _partial(files["pth"]))
            _partial(files["pth"]).rename(files["pth"])
        except Exception as error:  # noqa: BLE001
            failed["pth"] = one_line(error)
    if "onnx" in missing:
        try:
            if "pth" in failed:
                raise RuntimeError(f"no .pth to export from ({failed['pth']})")
            from kokoro import KModel

            log(f"exporting kokoro's model to fp32 ONNX: {files['onnx']} (once)")
            start = time.perf_counter()
            # kokoro's export: its STFT without complex tensors, which ONNX does not have
            model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(files["pth"]),
                           disable_complex=True).eval()
            export_fp32_onnx(model, files["onnx"])
            spent["onnx export"] = time.perf_counter() - start
        except Exception as error:  # noqa: BLE001
            failed["onnx"] = one_line(error)
    return spent, failed


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def export_fp32_onnx(model, path: Path) -> None:
    """kokoro's ``KModelForONNX`` as kokoro's own export does it: TorchScript exporter,
    inputs named as in kokoro-onnx's int8 file, any number of tokens."""
    import warnings

    import torch
    from kokoro.model import KModelForONNX

    ids = torch.LongTensor([[0, *range(1, 40), 0]])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            KModelForONNX(model).eval(),
            (ids, torch.randn(1, 256), torch.tensor([1.0])),
            str(_partial(path)),
            input_names=["tokens", "style", "speed"],
            output_names=["waveform", "duration"],
            dynamic_axes={"tokens": {1: "tokens"}, "waveform": {0: "samples"},
                          "duration": {0: "tokens"}},
            opset_version=20,
            do_constant_folding=True,
            dynamo=False,
        )
    _partial(path).rename(path)


# -- the engines, as a user's process runs them -----------------------------------------


class Chunker:
    """kokoro_ext.text's G2P and chunker, as Synthesizer.stream uses them: text ->
    (phonemes, pause before) per chunk."""

    def __init__(self, limit: int):
        from kokoro_ext.text import Phonemizer

        self.g2p = Phonemizer()
        self.limit = limit

    def __call__(self, text: str):
        from kokoro_ext.text import PAUSES
        from kokoro_ext.text.chunking import drop_other_scripts, pack, split_sentences

        previous = None
        for sentence in split_sentences(drop_other_scripts(text)):
            for piece in pack(self.g2p.words(sentence.text), self.limit, sentence.end):
                if not any(c.isalpha() for c in piece.phonemes):
                    continue  # only punctuation: Synthesizer skips these too
                yield piece.phonemes, 0.0 if previous is None else PAUSES[previous]
                previous = piece.end


class Engine:
    """``load()`` once, then ``stream(text)`` yields (phonemes, float32 audio with its
    leading pause) per chunk.  ``imports()`` and ``check(spec)`` (the model's path) say
    cheaply, by raising, that it cannot load; ``needs`` are the cache files it loads."""

    warm_each_text = False
    modules: tuple[str, ...] = ()  # what load() imports
    needs: tuple[str, ...] = ()

    def __init__(self, args: argparse.Namespace):
        self.args = args

    @classmethod
    def imports(cls) -> None:
        import importlib

        for module in cls.modules:
            importlib.import_module(module)

    @staticmethod
    def check(spec: dict) -> Path:
        raise NotImplementedError

    def load(self) -> None:
        raise NotImplementedError

    def stream(self, text: str):
        import numpy as np

        from kokoro_ext.run.wav import SAMPLE_RATE

        for phonemes, pause in self.chunker(text):
            audio = np.asarray(self.speak(phonemes), np.float32).ravel()
            silence = np.zeros(round(pause * SAMPLE_RATE), np.float32)
            yield phonemes, np.concatenate([silence, audio])

    def speak(self, phonemes: str):
        raise NotImplementedError


def existing(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"no {path}")
    return path


class Tvm(Engine):
    modules = ("kokoro_ext.run.synthesizer",)

    @staticmethod
    def check(spec: dict) -> Path:
        from kokoro_ext import Synthesizer

        Synthesizer(spec["artifacts"])  # its format, TVM version, CPU and files
        return Path(spec["artifacts"])

    def load(self) -> None:
        from kokoro_ext.run import prefer_runtime_library

        # as `python -m kokoro_ext.say` (the fresh runs) does: without it tvm_ffi imports
        # torch when it is installed, a few hundred MB no run-side install has
        prefer_runtime_library()
        from kokoro_ext import Synthesizer

        self.synth = Synthesizer(self.args.artifacts)
        self.voice = VOICE if real_weights(self.args.artifacts) else None

    def stream(self, text: str):
        for chunk in self.synth.stream(text, self.voice):
            yield chunk.phonemes, chunk.joined()


class Torch(Engine):
    compile = False
    modules = ("torch", "kokoro", "kokoro_ext.build.model")
    needs = ("config", "pth")

    @staticmethod
    def check(spec: dict) -> Path:
        files = cache_files()
        existing(files["config"])
        return existing(files["pth"])

    def load(self) -> None:
        import torch
        from kokoro import KModel

        from kokoro_ext.build.model import load_voice_array

        torch.set_num_threads(self.args.threads)
        files = cache_files()
        self.model = KModel(repo_id="hexgrad/Kokoro-82M", config=str(files["config"]),
                            model=str(files["pth"])).eval()
        if self.compile:
            forward = self.model.forward_with_tokens
            self.model.forward_with_tokens = torch.compile(forward, dynamic=True)
        self.voice = torch.from_numpy(load_voice_array(VOICE))
        self.chunker = Chunker(self.args.chunk_limit)

    def speak(self, phonemes: str):
        import torch

        with torch.inference_mode():  # KPipeline.infer: the style row for len(phonemes)
            return self.model(phonemes, self.voice[len(phonemes) - 1], 1.0).numpy()


class Compiled(Torch):
    compile = True
    warm_each_text = True  # a new length may recompile: one untimed run per text first


class KokoroOnnx(Engine):
    model_file = "onnx"
    modules = ("kokoro_onnx",)
    needs = ("config", "voices", "onnx")

    @classmethod
    def check(cls, spec: dict) -> Path:
        files = cache_files()
        existing(files["config"])
        existing(files["voices"])
        return existing(files[cls.model_file])

    def load(self) -> None:
        from kokoro_onnx import Kokoro

        files = cache_files()
        config = json.loads(files["config"].read_text())
        self.kokoro = Kokoro(str(files[self.model_file]), str(files["voices"]),
                             vocab_config=config)
        self.chunker = Chunker(self.args.chunk_limit)

    def speak(self, phonemes: str):
        audio, _ = self.kokoro.create(phonemes, VOICE, is_phonemes=True, trim=False)
        return audio


class KokoroOnnxInt8(KokoroOnnx):
    model_file = "int8"
    needs = ("config", "voices")  # the model is the fetched file itself


RUNNERS = {"tvm": Tvm, "eager": Torch, "compile": Compiled, "onnx": KokoroOnnx,
           "onnx-int8": KokoroOnnxInt8}


# -- the child processes ----------------------------------------------------------------


def fresh_child(args: argparse.Namespace) -> int:
    """One text, as a user's script: import, load, speak, write the WAV."""
    import numpy as np

    from kokoro_ext.run.wav import write_wav

    engine = RUNNERS[args.child](args)
    engine.load()
    pieces = []
    for i, (_, audio) in enumerate(engine.stream(TEXTS[args.text])):
        if i == 0:
            print(f"{FRESH_CHUNK}0", flush=True)
        pieces.append(audio)
    write_wav(args.wav, np.concatenate(pieces))
    return 0


def warm_child(args: argparse.Namespace) -> int:
    """One engine, long-lived: load, warm up, say READY; then speak each text named on
    stdin once and answer with a RUN line, until stdin ends; then RESULT."""
    from kokoro_ext.run.wav import SAMPLE_RATE

    engine = RUNNERS[args.child](args)
    start = time.perf_counter()
    engine.load()
    result: dict = {"load_s": time.perf_counter() - start}
    result["warm_up_s"], _, _ = timed_stream(engine, TEXTS[WARM_UP])
    print(READY, flush=True)
    first_runs: dict[str, float] = {}
    for line in sys.stdin:
        name = line.strip()
        run: dict = {}
        if engine.warm_each_text and name not in first_runs:
            first_runs[name] = run["first_run_s"] = timed_stream(engine, TEXTS[name])[0]
        total, first, chunks = timed_stream(engine, TEXTS[name])
        run |= {"total_s": total, "first_audio_s": first,
                "audio_s": sum(len(a) for _, a in chunks) / SAMPLE_RATE,
                "chunks": [p for p, _ in chunks]}
        print(RUN + json.dumps(run), flush=True)
    if args.child == "tvm":
        result["chunk_limit"] = getattr(engine.synth, "chunk_limit", None)
    print(RESULT + json.dumps(result), flush=True)
    return 0


def rss_child(args: argparse.Namespace) -> int:
    """One text's warm peak RSS (the module docstring, "warm peak RSS")."""
    engine = RUNNERS[args.child](args)
    engine.load()
    for _ in engine.stream(TEXTS[args.rss_text]):
        pass
    reset = reset_peak_rss()
    for _ in engine.stream(TEXTS[args.rss_text]):
        pass
    print(RESULT + json.dumps({"peak_rss_mb": peak_rss_mb(), "reset": reset}), flush=True)
    return 0


def reset_peak_rss() -> bool:
    """Set this process's VmHWM to its current RSS (Linux 4.0 on); whether it was."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """This process's VmHWM (since start or the last reset_peak_rss), in MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_stream(engine: Engine, text: str) -> tuple[float, float, list]:
    start = time.perf_counter()
    chunks, first = [], None
    for phonemes, audio in engine.stream(text):
        if first is None:
            first = time.perf_counter() - start
        chunks.append((phonemes, audio))
    return time.perf_counter() - start, first, chunks


# -- the parent: runs the children, reads their clocks and memory -------------------------


def child_command(args: argparse.Namespace, spec: dict, *extra: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", spec["kind"],
            "--artifacts", spec.get("artifacts", str(args.artifacts)),
            "--threads", str(args.threads), "--chunk-limit", str(args.chunk_limit), *extra]


def run_child(command: list[str], timeout: float) -> dict:
    """Spawn ``command``; seconds to exit, to its first chunk line, its peak RSS and stdout."""
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first, lines = None, []
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    for line in proc.stdout:
        if first is None and line.startswith(FRESH_CHUNK):
            first = time.perf_counter() - start
        lines.append(line)
    _, status, usage = os.wait4(proc.pid, 0)
    total = time.perf_counter() - start
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    return {"total_s": total, "first_audio_s": first, "peak_rss_mb": usage.ru_maxrss / 1024,
            "returncode": proc.returncode, "stdout": "".join(lines), "stderr": "".join(err)}


def child_result(out: dict) -> dict:
    """The child's RESULT line, or ``{"error": its last stderr line}``."""
    if out["returncode"] == 0:
        for line in out["stdout"].splitlines():
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT):])
    return failure(out)


def failure(out: dict) -> dict:
    tail = out["stderr"].strip().splitlines()
    return {"error": tail[-1] if tail else f"exit {out['returncode']}", "stderr_tail": tail[-20:]}


def fresh(args: argparse.Namespace, spec: dict, text: str, wav: Path) -> dict:
    if spec["kind"] == "tvm":
        command = [sys.executable, "-m", "kokoro_ext.say", TEXTS[text], "-o", str(wav),
                   "--artifacts", spec["artifacts"], "--stream"]
        if real_weights(Path(spec["artifacts"])):
            command += ["--voice", VOICE]
    else:
        command = child_command(args, spec, "--text", text, "--wav", str(wav))
    out = run_child(command, args.timeout)
    if out["returncode"] != 0:
        return failure(out)
    return {k: out[k] for k in ("total_s", "first_audio_s", "peak_rss_mb")}


class WarmChild:
    """A warm_child process: started, then asked for one text at a time."""

    def __init__(self, args: argparse.Namespace, spec: dict):
        import threading

        self.proc = subprocess.Popen(child_command(args, spec), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()
        self.timeout = args.timeout
        self.error: dict | None = None
        self._line(READY)

    def _line(self, prefix: str) -> str | None:
        """The child's next stdout line starting with ``prefix`` (its rest), or None (and
        self.error) if it exits or takes longer than the timeout first."""
        import threading

        timer = threading.Timer(self.timeout, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                if line.startswith(prefix):
                    return line[len(prefix):]
        finally:
            timer.cancel()
        self.finish()
        return None

    def run(self, text: str) -> dict | None:
        if self.error is not None:
            return None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        line = self._line(RUN)
        return None if line is None else json.loads(line)

    def finish(self) -> dict:
        """Close stdin; the child's RESULT with its peak RSS, or its error."""
        if self.error is not None:
            return self.error
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        line = None
        if self.proc.poll() is None:
            for out in self.proc.stdout:
                if out.startswith(RESULT):
                    line = out[len(RESULT):]
        _, status, usage = os.wait4(self.proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if line is None or code != 0:
            self.error = failure({"returncode": code, "stderr": "".join(self.err)})
            return self.error
        return json.loads(line) | {"peak_rss_mb": usage.ru_maxrss / 1024}


def warm(args: argparse.Namespace, specs: dict[str, dict], engines: list[str]) -> dict:
    """Every engine's warm results: the module docstring's "warm"."""
    children = {}
    for engine in engines:  # loaded one after another, so that no load slows another's
        print(f"warm {engine} ...", flush=True)
        children[engine] = WarmChild(args, specs[engine])
    texts: dict[str, dict] = {e: {} for e in engines}
    first_runs: dict[str, dict[str, float]] = {}
    for name in args.texts:
        runs: dict[str, list[dict]] = {e: [] for e in engines}
        for _ in range(args.repeat):
            for engine, child in children.items():
                done = runs[engine]
                if done and done[0]["total_s"] > args.long_seconds:
                    continue
                time.sleep(SETTLE_S)
                got = child.run(name)
                if got is not None:
                    done.append(got)
        for engine, done in runs.items():
            if not done:
                continue
            texts[engine][name] = {
                "total_s": statistics.median(r["total_s"] for r in done),
                "first_audio_s": statistics.median(r["first_audio_s"] for r in done),
                "runs": len(done), "audio_s": done[-1]["audio_s"], "chunks": done[-1]["chunks"],
            }
            if "first_run_s" in done[0]:
                first_runs.setdefault(engine, {})[name] = done[0]["first_run_s"]
    results = {}
    for engine, child in children.items():
        got = child.finish()
        if "error" not in got:
            got |= {"texts": texts[engine]} | (
                {"first_run_s": first_runs[engine]} if engine in first_runs else {})
        results[engine] = got
    return results


def warm_rss(args: argparse.Namespace, spec: dict, text: str) -> dict:
    return child_result(run_child(child_command(args, spec, "--rss-text", text), args.timeout))


def machine(args: argparse.Namespace) -> dict:
    packages = ("apache-tvm", "torch", "onnxruntime", "kokoro", "kokoro-onnx", "misaki",
                "numpy", "matplotlib")
    return {**machine_record(packages), "threads": args.threads}


def rss_mb() -> float:
    """This process's peak RSS so far (a lower bound of every child's ru_maxrss)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fmt(value, spec: str = "7.2f") -> str:
    width = int(spec.split(".")[0])
    return f"{value:{spec}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def label(result: dict, engine: str) -> str:
    return result.get("labels", {}).get(engine) or ENGINES.get(engine, engine)


def format_table(result: dict) -> str:
    m = result["machine"]
    engines = result["engines"]
    width = max([18] + [len(label(result, e)) for e in engines])
    lines = [
        f"what a user gets: {m['cpu']}, {m['cores']} cores, {m['threads']} threads, load "
        f"{' '.join(f'{x:.1f}' for x in result['load_average_start'])} at start; warm = median of "
        f"{result['repeat']} (1 past {result['long_seconds']:.0f} s)",
        "",
        f"{'engine':<{width}} {'size MB':>7} {'load s':>7} {'warm-up':>7} {'peak MB':>7}  model",
    ]
    for engine in engines:
        w, size = result["warm"].get(engine, {}), result.get("sizes", {}).get(engine, {})
        build = result.get("builds", {}).get(engine, {})
        notes = [size.get("path", "")]
        if build and not build.get("real_weights", True):
            notes.append("(RANDOM weights: plumbing only)")
        if build.get("so_files") is not None:
            notes.append(f"({build['so_files']} .so)")
        if w.get("chunk_limit"):
            notes.append(f"chunk limit {w['chunk_limit']}")
        bytes_ = size.get("bytes")
        lines.append(f"{label(result, engine):<{width}} "
                     f"{fmt(bytes_ / 1e6 if bytes_ is not None else None, '7.0f')} "
                     f"{fmt(w.get('load_s'))} {fmt(w.get('warm_up_s'))} "
                     f"{fmt(w.get('peak_rss_mb'), '7.0f')}  {' '.join(n for n in notes if n)}")
    for engine, reason in result.get("skipped", {}).items():
        lines.append(f"skipped {engine}: {reason}")
    lines += [
        "",
        f"{'':<{width}} {'':<9} {'--------- fresh ---------':>25} "
        f"{'------------------ warm ------------------':>42}",
        f"{'engine':<{width}} {'text':<9} {'total s':>7} {'1st s':>7} {'peak MB':>9} "
        f"{'total s':>7} {'1st s':>7} {'peak MB':>7} {'audio s':>7} {'x eager':>7}",
    ]
    eager_texts = result["warm"].get("eager", {}).get("texts", {})
    for engine in engines:
        w = result["warm"].get(engine, {})
        for text in result["texts"]:
            f = result["fresh"].get(engine, {}).get(text, {})
            t = w.get("texts", {}).get(text, {})
            r = result.get("rss", {}).get(engine, {}).get(text, {})
            eager = eager_texts.get(text, {}).get("total_s")
            ratio = t["total_s"] / eager if eager and "total_s" in t else None
            audio = t.get("audio_s", f.get("audio_s"))
            lines.append(
                f"{label(result, engine):<{width}} {text:<9} {fmt(f.get('total_s'))} "
                f"{fmt(f.get('first_audio_s'))} {fmt(f.get('peak_rss_mb'), '9.0f')} "
                f"{fmt(t.get('total_s'))} {fmt(t.get('first_audio_s'))} "
                f"{fmt(r.get('peak_rss_mb'), '7.0f')} {fmt(audio)} {fmt(ratio)}")
    lines += ["", "size MB: on disk (10^6 bytes); peak MB: fresh, the process's ru_maxrss; "
              "warm, VmHWM of a process per text, reset after one run of it (user.py's "
              "docstring); load, warm-up: the warm process's"]
    for engine in engines:
        w = result["warm"].get(engine, {})
        if "error" in w:
            lines.append(f"{engine}: warm run failed: {w['error']}")
        first_runs = ", ".join(f"{t} {v:.1f} s" for t, v in w.get("first_run_s", {}).items())
        if first_runs:
            lines.append(f"{engine}: untimed first run per text {first_runs}")
        for text, f in result["fresh"].get(engine, {}).items():
            if "error" in f:
                lines.append(f"{engine} fresh {text}: failed: {f['error']}")
        rss = result.get("rss", {}).get(engine, {})
        for text, r in rss.items():
            if "error" in r:
                lines.append(f"{engine} warm peak RSS {text}: failed: {r['error']}")
        if any(r.get("reset") is False for r in rss.values()):
            lines.append(f"{engine}: peak RSS not reset (no /proc/self/clear_refs): "
                         "the warm peaks include the load")
    if result.get("same_chunks") is not None:
        lines.append(f"every engine spoke the same chunks (phonemes): {result['same_chunks']}")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    engines, texts = result["engines"], result["texts"]
    panels = (("warm", "total_s", "warm: text to audio (s)"),
              ("warm", "first_audio_s", "warm: time to first audio (s)"),
              ("rss", "peak_rss_mb", "warm: peak RSS speaking the text (MB)"),
              ("fresh", "total_s", "fresh process: start to WAV (s)"),
              ("fresh", "peak_rss_mb", "fresh process: peak RSS (MB)"))
    fig, axes = plt.subplots(2, 3, figsize=(18, 8.4))
    axes = axes.ravel()
    width = 0.8 / max(1, len(engines))
    x = np.arange(len(texts))
    for ax, (kind, key, title) in zip(axes, panels):
        for i, engine in enumerate(engines):
            rows = result.get(kind, {}).get(engine, {})
            rows = rows.get("texts", {}) if kind == "warm" else rows
            values = [rows.get(t, {}).get(key) for t in texts]
            ax.bar(x + i * width, [np.nan if v is None else v for v in values], width,
                   label=label(result, engine), color=f"C{i}")
        ax.set_xticks(x + 0.4 - width / 2, texts)
        ax.set_title(title, fontsize=10)
        if key != "peak_rss_mb" and any(c.get_height() > 0 for c in ax.patches):
            ax.set_yscale("log")
    sizes = result.get("sizes", {})
    ax = axes[5]
    mb = [sizes.get(e, {}).get("bytes", np.nan) / 1e6 for e in engines]
    bars = ax.bar(range(len(engines)), mb, color=[f"C{i}" for i in range(len(engines))])
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(engines)), [label(result, e) for e in engines], rotation=20,
                  ha="right", fontsize=8)
    ax.set_title("model on disk (MB)", fontsize=10)
    if engines:
        axes[0].legend(fontsize=8)
    fig.suptitle(f"Kokoro-82M, what a user gets: {result['machine']['cpu']}, "
                 f"{result['machine']['cores']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                        help=f"of {', '.join(ENGINES)}")
    parser.add_argument("--texts", default=",".join(TEXTS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"),
                        help="the build engine tvm runs")
    parser.add_argument("--build", action="append", default=[], metavar="[NAME=]DIR",
                        help="one more build of this project, as engine tvm-NAME (NAME: "
                        "default its manifest's precision); repeatable")
    parser.add_argument("--skip-fresh-long", action="store_true",
                        help=f"no fresh-process runs of {', '.join(LONG_TEXTS)}")
    parser.add_argument("--fresh-long-engines", default="tvm,onnx,onnx-int8",
                        help=f"the engines that get fresh-process runs of {', '.join(LONG_TEXTS)} "
                        "(a fresh run is about load + a warm run; eager takes minutes there; "
                        "tvm stands for every build)")
    parser.add_argument("--skip-fresh", action="store_true", help="no fresh-process runs")
    parser.add_argument("--skip-rss", action="store_true",
                        help="no warm peak RSS per text (a process per engine and text)")
    parser.add_argument("--long-seconds", type=float, default=20.0,
                        help="a warm text whose run takes longer is run once")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch's threads (ONNX Runtime and TVM use every core)")
    parser.add_argument("--chunk-limit", type=int, default=KOKORO_CHUNK_LIMIT,
                        help="most phonemes in a chunk, for the engines other than tvm")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per fresh process")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    # internal: this script as a child process
    parser.add_argument("--child", choices=list(ENGINES), help=argparse.SUPPRESS)
    parser.add_argument("--text", choices=list(TEXTS), help=argparse.SUPPRESS)
    parser.add_argument("--rss-text", choices=list(TEXTS), help=argparse.SUPPRESS)
    parser.add_argument("--wav", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", help=argparse.SUPPRESS)  # the engine specs, JSON
    args = parser.parse_args(argv)
    args.engines = args.engines.split(",") if args.engines else []
    args.texts = args.texts.split(",")
    args.fresh_long_engines = args.fresh_long_engines.split(",")
    args.builds = [parse_build(b) for b in args.build]
    for name, known in (("engine", ENGINES), ("text", TEXTS)):
        unknown = [v for v in getattr(args, name + "s") if v not in known]
        if unknown:
            parser.error(f"unknown {name} {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child and args.text:
        return fresh_child(args)
    if args.child and args.rss_text:
        return rss_child(args)
    if args.child:
        return warm_child(args)
    if args.prepare:
        print(RESULT + json.dumps(prepare(json.loads(args.prepare))), flush=True)
        return 0
    # This process stays small (no numpy, torch or TVM) until the last child has exited:
    # a child's ru_maxrss starts from the RSS of the process that spawned it.
    specs = engine_specs(args)
    result = {"engines": [], "texts": args.texts, "repeat": args.repeat,
              "long_seconds": args.long_seconds, "chunk_limit": args.chunk_limit,
              "voice": VOICE, "load_average_start": os.getloadavg(),
              "labels": {e: s["label"] for e, s in specs.items()},
              "builds": {e: artifacts_info(Path(s["artifacts"]))
                         for e, s in specs.items() if s["kind"] == "tvm"},
              "text_words": {t: len(TEXTS[t].split()) for t in args.texts},
              "skipped": {}, "sizes": {}, "fresh": {}, "warm": {}, "rss": {}}
    for engine, spec in specs.items():
        if spec["kind"] == "tvm" and not build_facts(Path(spec["artifacts"]))["manifest"]:
            result["skipped"][engine] = (f"no build in {spec['artifacts']} (no manifest.json); "
                                         "pass --artifacts or --build")
    checked = {e: s for e, s in specs.items() if e not in result["skipped"]}
    if checked:
        out = run_child([sys.executable, str(Path(__file__).resolve()), "--prepare",
                         json.dumps(checked)], args.timeout)
        got = child_result(out)
        prepared = got if "error" not in got else {
            "unavailable": {e: f"checking the engines failed: {got['error']}" for e in checked}}
        result["skipped"] |= prepared["unavailable"]
        result["sizes"] = prepared.get("sizes", {})
        result["prepare_s"] = prepared.get("spent", {})
    for engine, reason in result["skipped"].items():
        skipped(engine, reason)
    result["engines"] = engines = [e for e in specs if e not in result["skipped"]]
    result["parent_rss_mb"] = rss_mb()
    started = time.perf_counter()
    wavs = {}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_fresh:
            for text in args.texts:  # interleaved: a slow stretch of the machine hits all
                for engine in engines:
                    kind = specs[engine]["kind"]
                    if text in LONG_TEXTS and (args.skip_fresh_long or not {engine, kind} & set(
                            args.fresh_long_engines)):
                        continue
                    if kind == "compile" and text not in COMPILE_FRESH_TEXTS:
                        continue
                    wavs[engine, text] = Path(tmp) / f"{engine}-{text}.wav"
                    got = fresh(args, specs[engine], text, wavs[engine, text])
                    result["fresh"].setdefault(engine, {})[text] = got
                    print(f"fresh {engine:<9} {text:<9} " + (
                        f"{got['total_s']:7.2f} s, first audio {fmt(got['first_audio_s'])} s, "
                        f"{got['peak_rss_mb']:.0f} MB" if "total_s" in got
                        else f"failed: {got['error']}"), flush=True)
        result["warm"] = warm(args, specs, engines)
        for engine, got in result["warm"].items():
            if "error" in got:
                print(f"warm {engine} failed: {got['error']}", flush=True)
        if not args.skip_rss:
            for text in args.texts:
                for engine in engines:
                    if specs[engine]["kind"] == "compile" and text not in COMPILE_FRESH_TEXTS:
                        continue
                    got = warm_rss(args, specs[engine], text)
                    result["rss"].setdefault(engine, {})[text] = got
                    print(f"warm peak RSS {engine:<9} {text:<9} " + (
                        f"{got['peak_rss_mb']:.0f} MB" if "peak_rss_mb" in got
                        else f"failed: {got['error']}"), flush=True)
        result["bench_s"] = time.perf_counter() - started
        for (engine, text), wav in wavs.items():
            if "total_s" in result["fresh"][engine][text]:
                audio, rate = read_wav(wav)
                result["fresh"][engine][text]["audio_s"] = len(audio) / rate
    result["machine"] = machine(args)
    chunks = {e: {t: v["chunks"] for t, v in w.get("texts", {}).items()}
              for e, w in result["warm"].items() if "texts" in w}
    result["same_chunks"] = (len({json.dumps(c, sort_keys=True) for c in chunks.values()}) == 1
                             if len(chunks) > 1 else None)
    write_results(args.out, "user", result, format_table(result), plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
