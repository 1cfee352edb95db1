"""The host steps of a synthesis as GPU kernels: durations, alignment, the source noise.

Between the stages a synthesis turns the text stage's predicted durations into frames
per token, repeats each token's column of two of its outputs for its frames (the
alignment: kokoro_ext.run.alignment.align) and draws the harmonic source's normal noise.
On a CPU build these are host steps in numpy and the native kernels; for a CUDA build
they are these kernels, compiled with the build into a module of their own
(``steps.so``: kokoro_ext.build.steps), so that a chunk's tensors stay on the GPU
between the stages (kokoro_ext.run.resident).  Each is GPU-scheduled TIR (thread-bound
loops); tests/cpu_tir.py runs them on the CPU with those loops serial.

  durations     predicted [1, T] f32, speed -> durations [T] i64, ends [T] i64
                max(round-half-even(predicted / speed), 1) and their running sum; -1 for
                a non-finite prediction (the host refuses it, naming the text stage)
  frame_tokens  ends [T] i64 -> tokens [F] i32: the token covering each frame (a binary
                search of ``ends``), T for a frame past the total
  align         values [1, C, T], tokens [F] -> [1, C, F]: each token's column repeated
                for its frames, zero past the total
  align_tokens_first  the same from values [1, T, C] (the text stage's ``d``)
  philox_normal (key0, key1, offset) -> float32 normals [1, S, H]: Philox4x32-10
                (Salmon et al. 2011, the generator of cuRAND and of PyTorch's CUDA
                generator) on counters (i, offset) for each group i of 4 outputs, each
                pair through Box-Muller (kokoro_ext.run.noise.philox_normal, the numpy
                reference)
  philox_bits   (key0, key1, offset) -> the generator's uint32 words [count] of the
                same counters: its check, bit for bit (tests, bench/gpu.py)

The function names are kokoro_ext.run.resident's ``STEP_FUNCTIONS``.
"""

from __future__ import annotations

import math

from tvm import tirx
from tvm.script import tirx as T

from kokoro_ext.run.noise import PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1

#: Threads per block of the element-wise kernels.
THREADS = 256
#: Binary search steps of ``frame_tokens``: enough for any int32 token count.
_SEARCH_STEPS = 32
_TWO_PI = float(math.tau)


@T.prim_func(private=True)
def durations(predicted_handle: T.handle, speed: T.float32, durations_handle: T.handle,
              ends_handle: T.handle):  # fmt: skip
    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
    tokens = T.int64()
    predicted = T.match_buffer(predicted_handle, (1, tokens), "float32")
    frames = T.match_buffer(durations_handle, (tokens,), "int64")
    ends = T.match_buffer(ends_handle, (tokens,), "int64")
    # one thread: a running sum of at most a few hundred tokens
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(1, thread="threadIdx.x"):
            total = T.alloc_buffer((1,), "int64", scope="local")
            total[0] = T.int64(0)
            for n in range(tokens):
                q: T.float32 = predicted[0, n] / speed
                d: T.int64 = T.if_then_else(
                    T.isfinite(q), T.Cast("int64", T.max(T.nearbyint(q), T.float32(1))),
                    T.int64(-1),
                )
                frames[n] = d
                total[0] = total[0] + d
                ends[n] = total[0]


@T.prim_func(private=True)
def frame_tokens(ends_handle: T.handle, tokens_handle: T.handle):
    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
    count, frames = T.int64(), T.int64()
    ends = T.match_buffer(ends_handle, (count,), "int64")
    token = T.match_buffer(tokens_handle, (frames,), "int32")
    for bx in T.thread_binding((frames + THREADS - 1) // THREADS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            bounds = T.alloc_buffer((2,), "int32", scope="local")
            if bx * THREADS + tx < frames:
                # the first token whose end is past the frame: count if none is
                bounds[0] = 0
                bounds[1] = T.Cast("int32", count)
                for _ in range(_SEARCH_STEPS):
                    if bounds[0] < bounds[1]:
                        middle: T.int32 = (bounds[0] + bounds[1]) // 2
                        if ends[middle] > bx * THREADS + tx:
                            bounds[1] = middle
                        else:
                            bounds[0] = middle + 1
                token[bx * THREADS + tx] = bounds[0]


@T.prim_func(private=True)
def align(values_handle: T.handle, tokens_handle: T.handle, out_handle: T.handle):
    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
    channels, count, frames = T.int64(), T.int64(), T.int64()
    values = T.match_buffer(values_handle, (1, channels, count), "float32")
    token = T.match_buffer(tokens_handle, (frames,), "int32")
    out = T.match_buffer(out_handle, (1, channels, frames), "float32")
    for bx in T.thread_binding((channels * frames + THREADS - 1) // THREADS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            if bx * THREADS + tx < channels * frames:
                c: T.int64 = (bx * THREADS + tx) // frames
                f: T.int64 = (bx * THREADS + tx) % frames
                n: T.int64 = T.Cast("int64", token[f])
                out[0, c, f] = T.if_then_else(n < count, values[0, c, T.min(n, count - 1)],
                                              T.float32(0))  # fmt: skip


@T.prim_func(private=True)
def align_tokens_first(values_handle: T.handle, tokens_handle: T.handle, out_handle: T.handle):
    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
    channels, count, frames = T.int64(), T.int64(), T.int64()
    values = T.match_buffer(values_handle, (1, count, channels), "float32")
    token = T.match_buffer(tokens_handle, (frames,), "int32")
    out = T.match_buffer(out_handle, (1, channels, frames), "float32")
    for bx in T.thread_binding((channels * frames + THREADS - 1) // THREADS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            if bx * THREADS + tx < channels * frames:
                c: T.int64 = (bx * THREADS + tx) // frames
                f: T.int64 = (bx * THREADS + tx) % frames
                n: T.int64 = T.Cast("int64", token[f])
                out[0, c, f] = T.if_then_else(n < count, values[0, T.min(n, count - 1), c],
                                              T.float32(0))  # fmt: skip


_U64 = "uint64"


@T.macro
def _philox(c, k, group, offset, key0, key1):
    """Philox4x32-10 of counter (group, offset) under key (key0, key1) into ``c``."""
    c[0] = T.Cast("uint32", group & T.int64(0xFFFFFFFF))
    c[1] = T.Cast("uint32", group >> T.int64(32))
    c[2] = T.Cast("uint32", offset & T.int64(0xFFFFFFFF))
    c[3] = T.Cast("uint32", (offset >> T.int64(32)) & T.int64(0xFFFFFFFF))
    k[0] = T.Cast("uint32", key0)
    k[1] = T.Cast("uint32", key1)
    for _ in T.unroll(10):
        p0: T.uint64 = T.uint64(PHILOX_M0) * T.Cast(_U64, c[0])
        p1: T.uint64 = T.uint64(PHILOX_M1) * T.Cast(_U64, c[2])
        c1: T.uint32 = c[1]
        c3: T.uint32 = c[3]
        c[0] = T.Cast("uint32", p1 >> T.uint64(32)) ^ c1 ^ k[0]
        c[1] = T.Cast("uint32", p1)
        c[2] = T.Cast("uint32", p0 >> T.uint64(32)) ^ c3 ^ k[1]
        c[3] = T.Cast("uint32", p0)
        # the key's Weyl steps, modulo 2^32
        k[0] = T.Cast("uint32", (T.Cast(_U64, k[0]) + T.uint64(PHILOX_W0)) & T.uint64(0xFFFFFFFF))
        k[1] = T.Cast("uint32", (T.Cast(_U64, k[1]) + T.uint64(PHILOX_W1)) & T.uint64(0xFFFFFFFF))


@T.prim_func(private=True)
def philox_normal(key0: T.int64, key1: T.int64, offset: T.int64, out_handle: T.handle):
    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
    samples, harmonics = T.int64(), T.int64()
    out = T.match_buffer(out_handle, (1, samples, harmonics), "float32")
    for bx in T.thread_binding((samples * harmonics + 4 * THREADS - 1) // (4 * THREADS),
                               thread="blockIdx.x"):  # fmt: skip
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            c = T.alloc_buffer((4,), "uint32", scope="local")
            k = T.alloc_buffer((2,), "uint32", scope="local")
            z = T.alloc_buffer((4,), "float32", scope="local")
            group: T.int64 = bx * THREADS + tx
            if group * 4 < samples * harmonics:
                _philox(c, k, group, offset, key0, key1)
                for pair in range(2):
                    # u in (0, 1]: never 0, so the logarithm is finite; every product
                    # is exact or one rounding, so a fused multiply-add changes nothing
                    u: T.float32 = T.Cast("float32", c[2 * pair]) * T.float32(2.0**-32) + T.float32(2.0**-33)
                    v: T.float32 = (T.Cast("float32", c[2 * pair + 1]) * T.float32(2.0**-32)
                                    + T.float32(2.0**-33)) * T.float32(_TWO_PI)  # fmt: skip
                    s: T.float32 = T.sqrt(T.float32(-2) * T.log(u))
                    z[2 * pair] = s * T.sin(v)
                    z[2 * pair + 1] = s * T.cos(v)
                for j in range(4):
                    if group * 4 + j < samples * harmonics:
                        out[0, (group * 4 + j) // harmonics, (group * 4 + j) % harmonics] = z[j]


@T.prim_func(private=True)
def philox_bits(key0: T.int64, key1: T.int64, offset: T.int64, out_handle: T.handle):
    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
    count = T.int64()
    out = T.match_buffer(out_handle, (count,), "uint32")
    for bx in T.thread_binding((count + 4 * THREADS - 1) // (4 * THREADS), thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            c = T.alloc_buffer((4,), "uint32", scope="local")
            k = T.alloc_buffer((2,), "uint32", scope="local")
            group: T.int64 = bx * THREADS + tx
            if group * 4 < count:
                _philox(c, k, group, offset, key0, key1)
                for j in range(4):
                    if group * 4 + j < count:
                        out[group * 4 + j] = c[j]




#: name -> kernel, as the steps module exports them (kokoro_ext.run.resident)
KERNELS: dict[str, tirx.PrimFunc] = {
    "durations": durations,
    "frame_tokens": frame_tokens,
    "align": align,
    "align_tokens_first": align_tokens_first,
    "philox_normal": philox_normal,
    "philox_bits": philox_bits,
}
#: thread-bound loops of each kernel (tests/cpu_tir.py makes them serial)
THREAD_LOOPS = {name: 2 for name in KERNELS}
