"""The LSTM for GPUs: the input projection as a product, the recurrence as one kernel.

Same interface and semantics as the native ``kokoro_ext.lstm`` kernel (cpp/src/lstm.cc):
``relax_packed_lstm`` emits, for each layer,

  gates_x = input @ W_ih^T + bias          [B, T, D*4H]  a product: dlight's Matmul rule
  y, h_n, c_n = recurrence(gates_x, ...)                 ``lstm_recurrence``

``lstm_recurrence`` is scheduled by hand: one work group per (direction, batch row),
whose threads each own hidden units ``j = tx, tx + threads, ...``.  At each step a thread
sums its units' four gate rows against the previous state, which the group shares in
workgroup memory, updates its cell state in registers, and writes its new ``h``; two
barriers bracket the state's update.  ``W_hh`` is taken as [D, H, 4H] (the transpose is
a weight transform, done once at build time) so that neighbouring threads read
neighbouring weights.  Length-aware: a row runs its own ``lengths[b]`` steps (the reverse
direction from its own last step) and its padded steps of ``y`` are zero.  The time loop
runs to the padded length for every row, with the work of the steps past a row's length
skipped: WGSL requires barriers in uniform control flow, and ``lengths[b]`` is read from
memory.
"""

from __future__ import annotations

import functools

from tvm import relax, tirx
from tvm.script import tirx as T

#: Threads per work group: WebGPU's default limit on invocations per work group.
MAX_THREADS = 256


@functools.cache
def lstm_recurrence(hidden: int, directions: int) -> tirx.PrimFunc:
    """The recurrence of one LSTM layer with ``hidden`` units and ``directions`` (1 or 2).  Arguments (gates_x [B, T, D*4H], lengths [B],
    h0 [D, B, H], c0 [D, B, H], w_hh_t [D, H, 4H], y [B, T, D*H], h_n [D, B, H],
    c_n [D, B, H])."""
    H, D, G = hidden, directions, 4 * hidden
    threads = min(H, MAX_THREADS)
    units = (H + threads - 1) // threads  # units per thread

    @T.prim_func(private=True)
    def recurrence(
        gates_handle: T.handle,
        lengths_handle: T.handle,
        h0_handle: T.handle,
        c0_handle: T.handle,
        w_handle: T.handle,
        y_handle: T.handle,
        h_n_handle: T.handle,
        c_n_handle: T.handle,
    ):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        B, steps = T.int64(), T.int64()
        gates_x = T.match_buffer(gates_handle, (B, steps, D * G), "float32")
        lengths = T.match_buffer(lengths_handle, (B,), "int32")
        h0 = T.match_buffer(h0_handle, (D, B, H), "float32")
        c0 = T.match_buffer(c0_handle, (D, B, H), "float32")
        w = T.match_buffer(w_handle, (D, H, G), "float32")
        y = T.match_buffer(y_handle, (B, steps, D * H), "float32")
        h_n = T.match_buffer(h_n_handle, (D, B, H), "float32")
        c_n = T.match_buffer(c_n_handle, (D, B, H), "float32")
        for d in T.thread_binding(D, thread="blockIdx.y"):
            for b in T.thread_binding(B, thread="blockIdx.x"):
                for tx in T.thread_binding(threads, thread="threadIdx.x"):
                    h_shared = T.alloc_buffer((H,), "float32", scope="shared")
                    c_local = T.alloc_buffer((units,), "float32", scope="local")
                    h_local = T.alloc_buffer((units,), "float32", scope="local")
                    acc = T.alloc_buffer((4,), "float32", scope="local")
                    # int32 scalars: ForceNarrowIndexToInt32 refuses int64 local buffers
                    n: T.int32 = lengths[b]
                    for u in range(units):
                        if u * threads + tx < H:
                            c_local[u] = c0[d, b, u * threads + tx]
                            h_local[u] = h0[d, b, u * threads + tx]
                            h_shared[u * threads + tx] = h0[d, b, u * threads + tx]
                    T.tvm_storage_sync("shared")
                    for s in range(steps):
                        for u in range(units):
                            if u * threads + tx < H:
                                if T.Cast("int32", s) < n:
                                    t: T.int32 = T.if_then_else(
                                        d == 1, n - 1 - T.Cast("int32", s), T.Cast("int32", s)
                                    )
                                    for q in range(4):
                                        acc[q] = gates_x[b, t, d * G + q * H + u * threads + tx]
                                    for k in range(H):
                                        for q in range(4):
                                            acc[q] = acc[q] + h_shared[k] * w[d, k, q * H + u * threads + tx]
                                    c_local[u] = T.sigmoid(acc[1]) * c_local[u] + T.sigmoid(
                                        acc[0]
                                    ) * T.tanh(acc[2])
                                    h_local[u] = T.sigmoid(acc[3]) * T.tanh(c_local[u])
                                    y[b, t, d * H + u * threads + tx] = h_local[u]
                                else:
                                    y[b, s, d * H + u * threads + tx] = T.float32(0)
                        T.tvm_storage_sync("shared")
                        for u in range(units):
                            if u * threads + tx < H:
                                h_shared[u * threads + tx] = h_local[u]
                        T.tvm_storage_sync("shared")
                    for u in range(units):
                        if u * threads + tx < H:
                            h_n[d, b, u * threads + tx] = h_local[u]
                            c_n[d, b, u * threads + tx] = c_local[u]

    return recurrence


def relax_packed_lstm(bb: relax.BlockBuilder, tensors: list[relax.Expr]) -> relax.Expr:
    """``kokoro_ext::packed_lstm`` as products and ``lstm_recurrence`` calls, emitted into
    ``bb``; returns the (y, h_n, c_n) tuple.  ``tensors``: the op's (x, lengths, h0, c0,
    w_ih_first, w_ih_rest, w_hh, bias)."""
    x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias = tensors
    B, steps, _ = x.ty.shape.values
    L, D, G, H = (int(v) for v in w_hh.ty.shape.values)
    # int32 on every GPU (WGSL has no int64); a no-op where lengths already are
    lengths = bb.emit(relax.op.astype(lengths, "int32"))
    layer_in = x
    h_last, c_last = [], []
    for layer in range(L):
        w_ih = w_ih_first if layer == 0 else bb.emit(relax.op.take(w_ih_rest, relax.const(layer - 1, "int64"), axis=0))
        # [D, G, I] -> [I, D*G]: gates_x[b, t, d*G + g] = sum_i in[b, t, i] w_ih[d, g, i]
        features = int(w_ih.ty.shape.values[-1])
        w_cols = bb.emit(relax.op.permute_dims(relax.op.reshape(w_ih, (D * G, features)), [1, 0]))
        b_l = bb.emit(relax.op.reshape(relax.op.take(bias, relax.const(layer, "int64"), axis=0), (D * G,)))
        gates_x = bb.emit(relax.op.add(relax.op.matmul(layer_in, w_cols), b_l))
        w_hh_t = bb.emit(
            relax.op.permute_dims(relax.op.take(w_hh, relax.const(layer, "int64"), axis=0), [0, 2, 1])
        )
        states = [
            bb.emit(relax.op.strided_slice(s, [0], [layer * D], [(layer + 1) * D])) for s in (h0, c0)
        ]
        gvar = bb.add_func(lstm_recurrence(H, D), "lstm_recurrence")
        out_ty = [
            relax.TensorType((B, steps, D * H), "float32"),
            relax.TensorType((D, B, H), "float32"),
            relax.TensorType((D, B, H), "float32"),
        ]
        out = bb.emit(relax.call_tir(gvar, [gates_x, lengths, *states, w_hh_t], out_ty))
        layer_in = bb.emit(relax.TupleGetItem(out, 0))
        h_last.append(bb.emit(relax.TupleGetItem(out, 1)))
        c_last.append(bb.emit(relax.TupleGetItem(out, 2)))
    h_n = h_last[0] if L == 1 else bb.emit(relax.op.concat(h_last, axis=0))
    c_n = c_last[0] if L == 1 else bb.emit(relax.op.concat(c_last, axis=0))
    return bb.emit(relax.Tuple([layer_in, h_n, c_n]))
