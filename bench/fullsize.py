"""Kokoro-82M at full size (random weights), one token and one frame bucket.

Builds with ``kokoro_ext.build``, then prints the build time and IR size per stage,
``kokoro_ext.validate``'s per-stage and waveform comparison with PyTorch, and the time of
one synthesis for our build against kokoro's PyTorch eager model on the same input.

    python bench/fullsize.py [--tokens 32] [--frames 96] [--out /tmp/kokoro-fullsize]
"""

from __future__ import annotations

import argparse
import time

import torch

from kokoro_ext.build import build, parse_args
from kokoro_ext.model import build_model
from kokoro_ext.pipeline import voice_style
from kokoro_ext.runtime import Synthesizer
from kokoro_ext.text import phonemes_to_ids
from kokoro_ext.validate import format_table, validate

TEXT = "The quick brown fox jumps over the dog."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="48")
    parser.add_argument("--frames", default="160")
    parser.add_argument("--out", default="/tmp/kokoro-fullsize")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reuse", action="store_true", help="use the build already in --out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out
    if not args.reuse:
        build(parse_args(["--tokens", args.tokens, "--frames", args.frames, "--out", out, "--random-weights"]))
    synth = Synthesizer(out)
    print(f"\n{'stage':<10} {'bucket':>6} {'IR lines':>9} {'export s':>9} {'import s':>9} "
          f"{'compile s':>9}")
    for entry in synth.manifest["stages"].values():
        s = entry["seconds"]
        print(f"{entry['stage']:<10} {entry['bucket']:>6} {entry['ir_lines']:>9} "
              f"{s['export']:>9.1f} {s['import']:>9.1f} {s['compile']:>9.1f}")
    phonemes = synth.phonemize(TEXT)
    print(f"\n{phonemes}")
    print(format_table(validate(synth, phonemes)))

    synth.synthesize_phonemes(phonemes)  # load every stage before timing
    start = time.perf_counter()
    trace = synth.synthesize_phonemes(phonemes)
    ours = time.perf_counter() - start
    model = build_model(synth.config)
    ids = phonemes_to_ids(phonemes, synth.vocab)
    style = torch.from_numpy(voice_style(synth.voice, len(ids) - 2))
    with torch.no_grad():
        model.forward_with_tokens(torch.tensor([ids]), style, 1.0)  # warm-up
        start = time.perf_counter()
        model.forward_with_tokens(torch.tensor([ids]), style, 1.0)
        eager = time.perf_counter() - start
    audio = len(trace.audio) / 24000
    print(f"\n{len(ids)} tokens, {int(trace.durations.sum())} frames ({audio:.2f} s of audio), "
          f"buckets {trace.token_bucket}/{trace.frame_bucket}")
    print(f"TVM build: {ours:.2f} s   PyTorch eager ({args.threads} threads): {eager:.2f} s   "
          f"ratio {ours / eager:.1f}x")


if __name__ == "__main__":
    main()
