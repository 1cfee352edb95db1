"""ONNX export of the stages, so that ONNX Runtime can be measured on the same model.

The stage modules export with ``torch.onnx.export(dynamo=True)`` except for our
``kokoro_ext::packed_lstm``; it maps onto ONNX's own ``LSTM``, which takes per-sample
``sequence_lens`` and runs the reverse direction from each sample's last valid step, i.e.
the packed-sequence semantics kokoro needs.  ``atan2`` (ONNX has none) gets a
decomposition that agrees with PyTorch on the branch cut: for a real negative value with an
imaginary part of +0.0 (ExactSTFT makes DC, Nyquist and frame 0 exactly real) it gives
pi, where the exporter's default gave -pi for thousands of source-phase points and the
decoder, which reads the phase, produced a different waveform (1 dB SNR).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from kokoro_ext.build.export import packed_lstm  # noqa: F401  (registers the custom op)

# PyTorch stacks LSTM gates as (input, forget, cell, output); ONNX as (input, output,
# forget, cell).
_ONNX_GATE_ORDER = (0, 3, 1, 2)


def _packed_lstm(x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias, enforce_sorted):
    from onnxscript import opset18 as op

    layers, directions = w_hh.shape[0], w_hh.shape[1]
    if layers != 1:
        raise ValueError(f"ONNX export supports single-layer packed_lstm, got {layers} layers")
    hidden = w_hh.shape[3]

    def onnx_gates(w, axis):  # reorder the 4 gate blocks along ``axis``
        blocks = op.Split(w, num_outputs=4, axis=axis)
        return op.Concat(*(blocks[i] for i in _ONNX_GATE_ORDER), axis=axis)

    w = onnx_gates(w_ih_first, 1)  # [D, 4H, I]
    r = onnx_gates(op.Squeeze(w_hh, [0]), 1)  # [D, 4H, H]
    b = onnx_gates(op.Squeeze(bias, [0]), 1)  # [D, 4H]; ONNX adds W_b and R_b
    b = op.Concat(b, op.Mul(b, op.Constant(value_float=0.0)), axis=1)
    y, h_n, c_n = op.LSTM(
        op.Transpose(x, perm=[1, 0, 2]),
        w,
        r,
        b,
        op.Cast(lengths, to=6),  # int32
        h0,
        c0,
        direction="bidirectional" if directions == 2 else "forward",
        hidden_size=hidden,
    )
    # y: [T, D, B, H] -> [B, T, D*H]
    y = op.Transpose(y, perm=[2, 0, 1, 3])
    y = op.Reshape(y, op.Constant(value_ints=[0, 0, -1]))
    return y, h_n, c_n


def _atan2(y, x):
    from onnxscript import opset18 as op

    pi = op.CastLike(op.Constant(value_float=math.pi), y)
    zero = op.CastLike(op.Constant(value_float=0.0), y)
    # Atan(y / x) is right for x > 0; x < 0 adds +-pi by the sign of y (+0 counts as
    # positive, as in torch.atan2); x == 0 gives +-pi/2, or 0 at the origin.
    safe_x = op.Where(op.Equal(x, zero), op.CastLike(op.Constant(value_float=1.0), x), x)
    base = op.Atan(op.Div(y, safe_x))
    left = op.Where(op.GreaterOrEqual(y, zero), op.Add(base, pi), op.Sub(base, pi))
    axis = op.Mul(op.Sign(y), op.Div(pi, op.CastLike(op.Constant(value_float=2.0), y)))
    return op.Where(op.Less(x, zero), left, op.Where(op.Equal(x, zero), axis, base))


def export_onnx(
    module: nn.Module,
    example: Sequence[Tensor],
    path: str | Path,
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> Path:
    """Export a stage module on ``example`` (static shapes) to an ONNX file at ``path``."""
    with torch.no_grad():
        torch.onnx.export(
            module.eval(),
            tuple(example),
            str(path),
            dynamo=True,
            input_names=list(input_names),
            output_names=list(output_names),
            custom_translation_table={
                torch.ops.kokoro_ext.packed_lstm.default: _packed_lstm,
                torch.ops.aten.atan2.default: _atan2,
            },
            verbose=False,
        )
    return Path(path)
