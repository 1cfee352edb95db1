"""The LSTM as one TIR function with a serial time loop (the pure-TVM path).

Same interface and semantics as the native ``kokoro_ext.lstm`` kernel (see
cpp/src/lstm.cc) minus the leading options argument: enforce_sorted is fixed when the
function is made.  Every dimension is symbolic, so one function serves every
sequence length, and the IR does not grow with it (unlike an import that unrolls the
time loop).  Plain scalar loops: this path trades speed for needing nothing but TVM.
"""

from __future__ import annotations

import functools

from tvm import tirx
from tvm.script import tirx as T


@functools.cache
def packed_lstm_prim_func(enforce_sorted: bool) -> tirx.PrimFunc:
    """The TIR function; arguments (x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias,
    y, h_n, c_n) as documented for the native kernel."""

    @T.prim_func(private=True)
    def packed_lstm(
        x_handle: T.handle,
        lengths_handle: T.handle,
        h0_handle: T.handle,
        c0_handle: T.handle,
        w_ih_first_handle: T.handle,
        w_ih_rest_handle: T.handle,
        w_hh_handle: T.handle,
        bias_handle: T.handle,
        y_handle: T.handle,
        h_n_handle: T.handle,
        c_n_handle: T.handle,
    ):
        T.func_attr({"tirx.noalias": True})
        B, steps, I = T.int64(), T.int64(), T.int64()
        L, D, G, H = T.int64(), T.int64(), T.int64(), T.int64()
        LD, DH, L_rest = T.int64(), T.int64(), T.int64()
        x = T.match_buffer(x_handle, (B, steps, I), "float32")
        lengths = T.match_buffer(lengths_handle, (B,), "int64")
        w_hh = T.match_buffer(w_hh_handle, (L, D, G, H), "float32")
        h0 = T.match_buffer(h0_handle, (LD, B, H), "float32")
        c0 = T.match_buffer(c0_handle, (LD, B, H), "float32")
        w_ih_first = T.match_buffer(w_ih_first_handle, (D, G, I), "float32")
        w_ih_rest = T.match_buffer(w_ih_rest_handle, (L_rest, D, G, DH), "float32")
        bias = T.match_buffer(bias_handle, (L, D, G), "float32")
        y = T.match_buffer(y_handle, (B, steps, DH), "float32")
        h_n = T.match_buffer(h_n_handle, (LD, B, H), "float32")
        c_n = T.match_buffer(c_n_handle, (LD, B, H), "float32")

        layer_in = T.alloc_buffer((B, steps, DH), "float32")
        gates = T.alloc_buffer((G,), "float32")
        h = T.alloc_buffer((H,), "float32")
        c = T.alloc_buffer((H,), "float32")

        for b in range(B):
            assert 1 <= lengths[b] and lengths[b] <= steps, (
                "packed_lstm: a length is outside [1, padded length]; every sequence "
                "needs at least one step and no more steps than the padded length"
            )
            if enforce_sorted and b > 0:
                assert lengths[b] <= lengths[b - 1], (
                    "packed_lstm: lengths must be sorted in decreasing order with "
                    "enforce_sorted=True"
                )
        for layer in range(L):
            for b, t, k in T.grid(B, steps, DH):
                y[b, t, k] = T.float32(0)
            for d, b in T.grid(D, B):
                for j in range(H):
                    h[j] = h0[layer * D + d, b, j]
                    c[j] = c0[layer * D + d, b, j]
                for s in range(lengths[b]):
                    t: T.int64 = T.if_then_else(d == 1, lengths[b] - 1 - s, s)
                    for g in range(G):
                        gates[g] = bias[layer, d, g]
                        if layer == 0:
                            for k in range(I):
                                gates[g] = gates[g] + x[b, t, k] * w_ih_first[d, g, k]
                        else:
                            for k in range(DH):
                                gates[g] = gates[g] + layer_in[b, t, k] * w_ih_rest[layer - 1, d, g, k]
                        for k in range(H):
                            gates[g] = gates[g] + h[k] * w_hh[layer, d, g, k]
                    for j in range(H):
                        c[j] = T.sigmoid(gates[H + j]) * c[j] + T.sigmoid(gates[j]) * T.tanh(
                            gates[2 * H + j]
                        )
                        h[j] = T.sigmoid(gates[3 * H + j]) * T.tanh(c[j])
                        y[b, t, d * H + j] = h[j]
                for j in range(H):
                    h_n[layer * D + d, b, j] = h[j]
                    c_n[layer * D + d, b, j] = c[j]
            if layer < L - 1:
                for b, t, k in T.grid(B, steps, DH):
                    layer_in[b, t, k] = y[b, t, k]

    return packed_lstm
