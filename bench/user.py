"""What a user gets: the real model speaking real texts, cold and warm, engine by engine.

Texts (TEXTS, plain English prose): one word, "Hello world.", a 20-word sentence, a
100-word paragraph and a 400-word page.  Engines, all with the Kokoro-82M v1.0 weights
of the fetched ``kokoro-v1.0.int8.onnx`` dequantized to float32 (except onnx-int8, which
runs that file itself) and the voice af_heart:

  tvm        this project's build (``--artifacts``), public API only: a fresh process is
             ``python -m kokoro_ext.say TEXT -o WAV --artifacts DIR --voice af_heart
             --stream``; warm is ``Synthesizer(DIR).stream(text, "af_heart")``
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
warm   one process per engine: load, a warm-up call (the sentence), then ``--repeat``
       runs of every text; medians of total time and of time to the first chunk.
       Texts whose first warm run takes longer than ``--long-seconds`` are run once.
       "x eager" is the warm total over eager's.  The page gets fresh runs only from
       ``--fresh-long-engines`` (tvm, onnx, onnx-int8): elsewhere it is about the
       load plus a warm run, minutes of eager for nothing new.

Writes ``user.json``, ``user.txt`` (the table) and ``user.png`` to ``--out`` (default
bench/results), with the machine (CPU, cores, load, versions) and the artifacts
directory's size and number of .so files.  The machine is shared: read the load.

    python bench/user.py [--engines tvm,eager,onnx,onnx-int8[,compile]]
                         [--texts word,hello,sentence,paragraph,page] [--repeat 3]
                         [--artifacts artifacts] [--skip-fresh-long] [--out DIR]

The cached files (the .pth, the fp32 export, the voices npz) are made once, by a child,
before anything is timed: this process stays small so that no child inherits its RSS.

Needs kokoro-onnx (``pip install --no-deps kokoro-onnx``: its ``phonemizer`` requirement
would replace phonemizer-fork, which misaki needs) and matplotlib.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VOICE = "af_heart"
#: kokoro's context is 512 tokens, two of them the boundaries.
KOKORO_CHUNK_LIMIT = 510
FRESH_CHUNK = "chunk "  # a child's stdout line that says its first audio is ready

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


# -- files made once, before anything is timed ----------------------------------------


def cache_files() -> dict[str, Path]:
    from kokoro_ext.run.cache import cache_dir

    root = cache_dir()
    return {
        "pth": root / "kokoro-v1.0.dequantized.pth",
        "onnx": root / "kokoro-v1.0.fp32.onnx",
        "voices": root / "voices-kokoro-onnx.npz",
        "config": root / "kokoro-v1.0.config.json",
    }


def prepare(engines: list[str], log=print) -> dict[str, float]:
    """Write what the engines load that the fetch does not give (seconds spent, per file).

    kokoro's own checkpoint format (a dict of submodule state dicts) for eager and
    compile, the fp32 ONNX export for onnx, kokoro-onnx's voices file (an npz of name ->
    [510, 1, 256]) and kokoro's config.json for all.
    """
    files = cache_files()
    wanted = {"config", "voices"}
    wanted |= {"pth"} if {"eager", "compile"} & set(engines) else set()
    wanted |= {"onnx"} if "onnx" in engines else set()
    missing = [k for k in ("config", "voices", "pth", "onnx")
               if k in wanted and not files[k].exists()]
    spent: dict[str, float] = {}
    if not missing:
        return spent
    import numpy as np
    import torch

    from kokoro_ext.run.cache import default_weights
    from kokoro_ext.build.model import build_model, load_config, load_voice_array

    config = load_config(None)
    start = time.perf_counter()
    if "config" in missing:
        files["config"].write_text(json.dumps(config, ensure_ascii=False))
    if "voices" in missing:
        with open(files["voices"], "wb") as f:  # np.savez would add .npz to a str path only
            np.savez(f, **{VOICE: load_voice_array(VOICE)})
    spent["config+voices"] = time.perf_counter() - start
    if not files["pth"].exists() and {"pth", "onnx"} & set(missing):  # onnx starts from it
        start = time.perf_counter()
        model = build_model(config, weights=default_weights()).eval()
        spent["dequantize"] = time.perf_counter() - start
        parts = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
        torch.save({p: getattr(model, p).state_dict() for p in parts}, _partial(files["pth"]))
        _partial(files["pth"]).rename(files["pth"])
    if "onnx" in missing:
        from kokoro import KModel

        log(f"exporting kokoro's model to fp32 ONNX: {files['onnx']} (once)")
        start = time.perf_counter()
        # kokoro's export: its STFT without complex tensors, which ONNX does not have
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(files["pth"]),
                       disable_complex=True).eval()
        export_fp32_onnx(model, files["onnx"])
        spent["onnx export"] = time.perf_counter() - start
    return spent


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
    leading pause) per chunk."""

    warm_each_text = False

    def __init__(self, args: argparse.Namespace):
        self.args = args

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


class Tvm(Engine):
    def load(self) -> None:
        from kokoro_ext import Synthesizer

        self.synth = Synthesizer(self.args.artifacts)
        self.voice = VOICE if real_weights(self.args.artifacts) else None

    def stream(self, text: str):
        for chunk in self.synth.stream(text, self.voice):
            yield chunk.phonemes, chunk.joined()


class Torch(Engine):
    compile = False

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

    def load(self) -> None:
        from kokoro_onnx import Kokoro

        from kokoro_ext.run.cache import model_path

        files = cache_files()
        path = files["onnx"] if self.model_file == "onnx" else model_path()
        config = json.loads(files["config"].read_text())
        self.kokoro = Kokoro(str(path), str(files["voices"]), vocab_config=config)
        self.chunker = Chunker(self.args.chunk_limit)

    def speak(self, phonemes: str):
        audio, _ = self.kokoro.create(phonemes, VOICE, is_phonemes=True, trim=False)
        return audio


class KokoroOnnxInt8(KokoroOnnx):
    model_file = "int8"


RUNNERS = {"tvm": Tvm, "eager": Torch, "compile": Compiled, "onnx": KokoroOnnx,
           "onnx-int8": KokoroOnnxInt8}


def real_weights(artifacts: Path) -> bool:
    """Whether the build is of trained weights (a random-weights build has its own voice
    shape and is measured for plumbing only)."""
    try:
        manifest = json.loads((Path(artifacts) / "manifest.json").read_text())
        return "random_seed" not in manifest.get("weights", {})
    except (OSError, ValueError, AttributeError):
        return True


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
    """One engine, long-lived: load, warm up, then every text ``--repeat`` times."""
    from kokoro_ext.run.wav import SAMPLE_RATE

    engine = RUNNERS[args.child](args)
    result: dict = {"texts": {}}
    start = time.perf_counter()
    engine.load()
    result["load_s"] = time.perf_counter() - start
    result["warm_up_s"], _, _ = timed_stream(engine, TEXTS[WARM_UP])
    for name in args.texts:
        runs = []
        if engine.warm_each_text:
            result.setdefault("first_run_s", {})[name] = timed_stream(engine, TEXTS[name])[0]
        for rep in range(args.repeat):
            total, first, chunks = timed_stream(engine, TEXTS[name])
            runs.append((total, first))
            if total > args.long_seconds:
                break
        samples = sum(len(a) for _, a in chunks)
        result["texts"][name] = {
            "total_s": statistics.median(t for t, _ in runs),
            "first_audio_s": statistics.median(f for _, f in runs),
            "runs": len(runs),
            "audio_s": samples / SAMPLE_RATE,
            "chunks": [p for p, _ in chunks],
        }
        print(f"  {args.child:<9} {name:<9} {result['texts'][name]['total_s']:7.2f} s "
              f"({len(runs)} runs)", file=sys.stderr, flush=True)
    if args.child == "tvm":
        result["chunk_limit"] = getattr(engine.synth, "chunk_limit", None)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def timed_stream(engine: Engine, text: str) -> tuple[float, float, list]:
    start = time.perf_counter()
    chunks, first = [], None
    for phonemes, audio in engine.stream(text):
        if first is None:
            first = time.perf_counter() - start
        chunks.append((phonemes, audio))
    return time.perf_counter() - start, first, chunks


# -- the parent: runs the children, reads their clocks and memory -------------------------


def child_command(args: argparse.Namespace, engine: str, *extra: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", engine,
            "--artifacts", str(args.artifacts), "--threads", str(args.threads),
            "--chunk-limit", str(args.chunk_limit), *extra]


def run_child(command: list[str], timeout: float) -> dict:
    """Spawn ``command``; seconds to exit, to its first chunk line, its peak RSS and stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first, lines = None, []
    import threading

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


def fresh(args: argparse.Namespace, engine: str, text: str, wav: Path) -> dict:
    if engine == "tvm":
        command = [sys.executable, "-m", "kokoro_ext.say", TEXTS[text], "-o", str(wav),
                   "--artifacts", str(args.artifacts), "--stream"]
        if real_weights(args.artifacts):
            command += ["--voice", VOICE]
    else:
        command = child_command(args, engine, "--text", text, "--wav", str(wav))
    out = run_child(command, args.timeout)
    if out["returncode"] != 0:
        return {"error": out["stderr"].strip().splitlines()[-1:] or [f"exit {out['returncode']}"]}
    return {k: out[k] for k in ("total_s", "first_audio_s", "peak_rss_mb")}


def warm(args: argparse.Namespace, engine: str) -> dict:
    command = child_command(args, engine, "--texts", ",".join(args.texts),
                            "--repeat", str(args.repeat), "--long-seconds", str(args.long_seconds))
    out = run_child(command, args.timeout * (1 + len(args.texts) * args.repeat))
    sys.stderr.write(out["stderr"] if out["returncode"] else "")
    for line in out["stdout"].splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]) | {"peak_rss_mb": out["peak_rss_mb"]}
    return {"error": out["stderr"].strip().splitlines()[-1:] or [f"exit {out['returncode']}"]}


def machine(args: argparse.Namespace) -> dict:
    import importlib.metadata

    from e2e import cpu_model  # bench/e2e.py

    versions = {}
    for dist in ("apache-tvm", "torch", "onnxruntime", "kokoro", "kokoro-onnx", "misaki", "numpy"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    memory = None
    try:
        import psutil

        memory = psutil.virtual_memory().total / 2**30
    except ImportError:
        pass
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads,
            "memory_gib": memory, "load_average_end": os.getloadavg(),
            "platform": platform.platform(), "python": platform.python_version(),
            "versions": versions}


def rss_mb() -> float:
    """This process's peak RSS so far (a lower bound of every child's ru_maxrss)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def artifacts_info(directory: Path) -> dict:
    if not directory.is_dir():
        return {"path": str(directory), "exists": False}
    files = [p for p in directory.rglob("*") if p.is_file()]
    return {"path": str(directory.resolve()), "exists": True,
            "bytes": sum(p.stat().st_size for p in files),
            "so_files": sum(p.suffix == ".so" for p in files),
            "real_weights": real_weights(directory)}


def fmt(value, spec: str = "7.2f") -> str:
    width = int(spec.split(".")[0])
    return f"{value:{spec}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def format_table(result: dict) -> str:
    m, a = result["machine"], result["artifacts"]
    lines = [
        f"what a user gets: {m['cpu']}, {m['cores']} cores, {m['threads']} threads, load "
        f"{' '.join(f'{x:.1f}' for x in result['load_average_start'])} at start; warm = median of "
        f"{result['repeat']} (1 past {result['long_seconds']:.0f} s)",
        f"tvm artifacts {a['path']}: " + (
            f"{a['bytes'] / 2**20:.0f} MiB, {a['so_files']} .so"
            + ("" if a["real_weights"] else " (RANDOM weights: plumbing only)")
            if a["exists"] else "missing"),
        "",
        f"{'engine':<18} {'text':<9} {'fresh s':>7} {'1st s':>7} {'RSS MB':>7} "
        f"{'warm s':>7} {'1st s':>7} {'audio s':>7} {'x eager':>7}",
    ]
    for engine in result["engines"]:
        w = result["warm"].get(engine, {})
        for text in result["texts"]:
            f = result["fresh"].get(engine, {}).get(text, {})
            t = w.get("texts", {}).get(text, {})
            eager = result["warm"].get("eager", {}).get("texts", {}).get(text, {}).get("total_s")
            ratio = t["total_s"] / eager if eager and "total_s" in t else None
            audio = t.get("audio_s", f.get("audio_s"))
            lines.append(
                f"{ENGINES[engine]:<18} {text:<9} {fmt(f.get('total_s'))} "
                f"{fmt(f.get('first_audio_s'))} {fmt(f.get('peak_rss_mb'), '7.0f')} "
                f"{fmt(t.get('total_s'))} {fmt(t.get('first_audio_s'))} {fmt(audio)} "
                f"{fmt(ratio)}")
    lines.append("")
    for engine in result["engines"]:
        w = result["warm"].get(engine, {})
        if "error" in w:
            lines.append(f"{engine}: warm run failed: {' '.join(w['error'])}")
        elif w:
            first_runs = ", ".join(f"{t} {v:.1f} s" for t, v in w.get("first_run_s", {}).items())
            lines.append(f"{engine}: load {w['load_s']:.1f} s, warm-up call "
                         f"{w['warm_up_s']:.1f} s, warm process peak RSS {w['peak_rss_mb']:.0f} MB"
                         + (f", untimed first run per text {first_runs}" if first_runs else "") + (
                             f", chunk limit {w['chunk_limit']}" if w.get("chunk_limit") else ""))
        for text, f in result["fresh"].get(engine, {}).items():
            if "error" in f:
                lines.append(f"{engine} fresh {text}: failed: {' '.join(f['error'])}")
    if result["same_chunks"] is not None:
        lines.append(f"every engine spoke the same chunks (phonemes): {result['same_chunks']}")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    engines, texts = result["engines"], result["texts"]
    panels = (("warm", "total_s", "warm: text to audio (s)"),
              ("warm", "first_audio_s", "warm: time to first audio (s)"),
              ("fresh", "total_s", "fresh process: start to WAV (s)"),
              ("fresh", "peak_rss_mb", "fresh process: peak RSS (MB)"))
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    width = 0.8 / len(engines)
    x = np.arange(len(texts))
    for ax, (kind, key, title) in zip(axes, panels):
        for i, engine in enumerate(engines):
            rows = result[kind].get(engine, {})
            rows = rows.get("texts", {}) if kind == "warm" else rows
            values = [rows.get(t, {}).get(key) for t in texts]
            ax.bar(x + i * width, [np.nan if v is None else v for v in values], width,
                   label=ENGINES[engine])
        ax.set_xticks(x + 0.4 - width / 2, texts)
        ax.set_title(title, fontsize=10)
        if key != "peak_rss_mb" and any(c.get_height() > 0 for c in ax.patches):
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Kokoro-82M, what a user gets: {result['machine']['cpu']}, "
                 f"{result['machine']['cores']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                        help=f"of {', '.join(ENGINES)}")
    parser.add_argument("--texts", default=",".join(TEXTS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument("--skip-fresh-long", action="store_true",
                        help=f"no fresh-process runs of {', '.join(LONG_TEXTS)}")
    parser.add_argument("--fresh-long-engines", default="tvm,onnx,onnx-int8",
                        help=f"the engines that get fresh-process runs of {', '.join(LONG_TEXTS)} "
                        "(a fresh run is about load + a warm run; eager takes minutes there)")
    parser.add_argument("--skip-fresh", action="store_true", help="warm runs only")
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
    parser.add_argument("--wav", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.engines = args.engines.split(",")
    args.texts = args.texts.split(",")
    args.fresh_long_engines = args.fresh_long_engines.split(",")
    for name, known in (("engine", ENGINES), ("text", TEXTS)):
        unknown = [v for v in getattr(args, name + "s") if v not in known]
        if unknown:
            parser.error(f"unknown {name} {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child and args.text:
        return fresh_child(args)
    if args.child:
        return warm_child(args)
    if args.prepare:
        print("RESULT " + json.dumps(prepare(args.engines)), flush=True)
        return 0
    sys.path.insert(0, str(HERE))  # for the helpers of bench/e2e.py and bench/quality.py
    if "tvm" in args.engines and not (args.artifacts / "manifest.json").is_file():
        raise SystemExit(f"error: no build in {args.artifacts}; pass --artifacts or leave out tvm")
    # This process stays small (no numpy, torch or TVM) until the last child has exited:
    # a child's ru_maxrss starts from the RSS of the process that spawned it.
    result = {"engines": args.engines, "texts": args.texts, "repeat": args.repeat,
              "long_seconds": args.long_seconds, "chunk_limit": args.chunk_limit,
              "voice": VOICE, "load_average_start": os.getloadavg(),
              "artifacts": artifacts_info(args.artifacts),
              "text_words": {t: len(TEXTS[t].split()) for t in args.texts},
              "fresh": {}, "warm": {}}
    out = run_child([sys.executable, str(Path(__file__).resolve()), "--prepare",
                     "--engines", ",".join(args.engines)], args.timeout)
    if out["returncode"] != 0:
        raise SystemExit(f"error: preparing the cached files failed:\n{out['stderr']}")
    result["prepare_s"] = json.loads(out["stdout"].split("RESULT ", 1)[1])
    result["parent_rss_mb"] = rss_mb()
    started = time.perf_counter()
    wavs = {}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_fresh:
            for text in args.texts:  # interleaved: a slow stretch of the machine hits all
                for engine in args.engines:
                    if text in LONG_TEXTS and (args.skip_fresh_long or engine not in
                                               args.fresh_long_engines):
                        continue
                    if engine == "compile" and text not in COMPILE_FRESH_TEXTS:
                        continue
                    wavs[engine, text] = Path(tmp) / f"{engine}-{text}.wav"
                    got = fresh(args, engine, text, wavs[engine, text])
                    result["fresh"].setdefault(engine, {})[text] = got
                    print(f"fresh {engine:<9} {text:<9} " + (
                        f"{got['total_s']:7.2f} s, first audio {fmt(got['first_audio_s'])} s, "
                        f"{got['peak_rss_mb']:.0f} MB" if "total_s" in got
                        else f"failed: {got['error']}"), flush=True)
        for engine in args.engines:
            print(f"warm {engine} ...", flush=True)
            result["warm"][engine] = warm(args, engine)
        result["bench_s"] = time.perf_counter() - started
        from quality import read_wav  # bench/quality.py; imports torch, so only now

        for (engine, text), wav in wavs.items():
            if "total_s" in result["fresh"][engine][text]:
                audio, rate = read_wav(wav)
                result["fresh"][engine][text]["audio_s"] = len(audio) / rate
    result["machine"] = machine(args)
    chunks = {e: {t: v["chunks"] for t, v in w.get("texts", {}).items()}
              for e, w in result["warm"].items() if "texts" in w}
    result["same_chunks"] = (len({json.dumps(c, sort_keys=True) for c in chunks.values()}) == 1
                             if len(chunks) > 1 else None)
    from quality import write_results  # bench/quality.py

    write_results(args.out, "user", result, format_table(result), plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
