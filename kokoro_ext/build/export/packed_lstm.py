"""``kokoro_ext::packed_lstm``: a length-aware LSTM that torch.export can trace.

Kokoro runs its LSTMs on ``pack_padded_sequence`` inputs, which torch.export cannot
trace; dropping the packing is exact only for one unpadded sequence.  This custom op
carries the lengths through the exported graph instead.  Its semantics are those of
``nn.LSTM`` on a packed sequence, padded back to the input length:

    y, (h_n, c_n) = PackedLSTM.from_lstm(lstm)(x, lengths)
    # == pad_packed_sequence(lstm(pack_padded_sequence(x, lengths, batch_first=True,
    #                                                  enforce_sorted=False))[0],
    #                        batch_first=True, total_length=x.shape[1]), lstm(...)[1]

Weights travel stacked by layer and direction (the layout the compiled kernels take):
``w_ih_first`` [D, 4H, I], ``w_ih_rest`` [L-1, D, 4H, D*H], ``w_hh`` [L, D, 4H, H] and
``bias`` [L, D, 4H] = b_ih + b_hh.  The frontend converter in
``kokoro_ext.build.frontend.lstm`` maps the op to the native kernel or the TIR loop.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence


def check_packed_lstm_args(
    x: Tensor,
    lengths: Tensor,
    h0: Tensor,
    c0: Tensor,
    w_ih_first: Tensor,
    w_ih_rest: Tensor,
    w_hh: Tensor,
    bias: Tensor,
) -> None:
    """Raise ValueError naming the argument whose shape or dtype does not fit."""

    def fail(msg: str) -> None:
        raise ValueError(f"packed_lstm: {msg}")

    # float64 runs only as validation's exact reference (kokoro_ext.validate)
    if x.dim() != 3 or x.dtype not in (torch.float32, torch.float64):
        fail(f"x must be a float32 [batch, time, features] tensor, got {x.dtype} {list(x.shape)}")
    if w_hh.dim() != 4 or w_hh.shape[1] not in (1, 2) or w_hh.shape[2] != 4 * w_hh.shape[3]:
        fail(f"w_hh must be [layers, directions (1 or 2), 4*hidden, hidden], got {list(w_hh.shape)}")
    B, T, I = x.shape
    L, D, G, H = w_hh.shape
    expected = {
        "h0": (h0, [L * D, B, H]),
        "c0": (c0, [L * D, B, H]),
        "w_ih_first": (w_ih_first, [D, G, I]),
        "w_ih_rest": (w_ih_rest, [L - 1, D, G, D * H]),
        "bias": (bias, [L, D, G]),
    }
    for name, (t, shape) in expected.items():
        if list(t.shape) != shape or t.dtype != x.dtype:
            fail(f"{name} must be {x.dtype} {shape} like x, got {t.dtype} {list(t.shape)}")
    if lengths.dtype != torch.int64 or list(lengths.shape) != [B]:
        fail(f"lengths must be int64 [{B}], got {lengths.dtype} {list(lengths.shape)}")


def check_lengths(lengths: Tensor, max_length: int, enforce_sorted: bool) -> None:
    """Raise ValueError if a length is outside [1, max_length] or, if asked, unsorted."""
    values = lengths.tolist()
    for i, n in enumerate(values):
        if not 1 <= n <= max_length:
            raise ValueError(
                f"packed_lstm: lengths[{i}] = {n} is outside [1, {max_length}]; every sequence "
                "needs at least one step and no more steps than the padded length"
            )
    if enforce_sorted and any(a < b for a, b in zip(values, values[1:])):
        raise ValueError(
            f"packed_lstm: lengths must be sorted in decreasing order with enforce_sorted=True, "
            f"got {values}"
        )


@torch.library.custom_op("kokoro_ext::packed_lstm", mutates_args=())
def packed_lstm(
    x: Tensor,
    lengths: Tensor,
    h0: Tensor,
    c0: Tensor,
    w_ih_first: Tensor,
    w_ih_rest: Tensor,
    w_hh: Tensor,
    bias: Tensor,
    enforce_sorted: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """LSTM over a padded batch with per-sample lengths; returns (y, h_n, c_n)."""
    check_packed_lstm_args(x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias)
    check_lengths(lengths, x.shape[1], enforce_sorted)
    L, D = w_hh.shape[:2]
    flat = []
    for layer in range(L):
        for d in range(D):
            w_ih = w_ih_first[d] if layer == 0 else w_ih_rest[layer - 1, d]
            flat += [w_ih, w_hh[layer, d], bias[layer, d], torch.zeros_like(bias[layer, d])]
    packed = pack_padded_sequence(
        x, lengths.cpu(), batch_first=True, enforce_sorted=enforce_sorted
    )
    if packed.sorted_indices is not None:
        h0 = h0.index_select(1, packed.sorted_indices)
        c0 = c0.index_select(1, packed.sorted_indices)
    out, h_n, c_n = torch._VF.lstm(
        packed.data, packed.batch_sizes, (h0, c0), flat, True, L, 0.0, False, D == 2
    )
    y, _ = pad_packed_sequence(
        PackedSequence(out, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices),
        batch_first=True,
        total_length=x.shape[1],
    )
    if packed.unsorted_indices is not None:
        h_n = h_n.index_select(1, packed.unsorted_indices)
        c_n = c_n.index_select(1, packed.unsorted_indices)
    return y.contiguous(), h_n.contiguous(), c_n.contiguous()


@packed_lstm.register_fake
def _(x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias, enforce_sorted):
    check_packed_lstm_args(x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias)
    B, T, _ = x.shape
    L, D, _, H = w_hh.shape
    return x.new_empty(B, T, D * H), x.new_empty(L * D, B, H), x.new_empty(L * D, B, H)


class PackedLSTM(nn.Module):
    """A batch-first ``nn.LSTM`` that takes per-sample lengths, exportable with torch.export.

    ``forward(x, lengths, hx=None)`` returns ``(y, (h_n, c_n))`` like ``nn.LSTM`` on a
    packed sequence: y is zero past each length, h_n/c_n are taken at each sample's last
    valid step (the first step for the reverse direction).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        enforce_sorted: bool = False,
    ):
        super().__init__()
        D = 2 if bidirectional else 1
        G, H, L = 4 * hidden_size, hidden_size, num_layers
        self.input_size, self.hidden_size, self.num_layers = input_size, H, L
        self.bidirectional, self.enforce_sorted = bidirectional, enforce_sorted
        self.w_ih_first = nn.Parameter(torch.empty(D, G, input_size))
        self.w_ih_rest = nn.Parameter(torch.empty(L - 1, D, G, D * H))
        self.w_hh = nn.Parameter(torch.empty(L, D, G, H))
        self.bias = nn.Parameter(torch.empty(L, D, G))

    @classmethod
    def from_lstm(cls, lstm: nn.LSTM, enforce_sorted: bool = False) -> PackedLSTM:
        """Take the weights of a batch-first ``nn.LSTM`` (no projections)."""
        if not lstm.batch_first:
            raise ValueError("PackedLSTM.from_lstm needs an nn.LSTM with batch_first=True")
        if lstm.proj_size:
            raise ValueError("PackedLSTM.from_lstm does not support proj_size")
        module = cls(
            lstm.input_size, lstm.hidden_size, lstm.num_layers, lstm.bidirectional, enforce_sorted
        )
        D = 2 if lstm.bidirectional else 1
        with torch.no_grad():
            for layer in range(lstm.num_layers):
                for d in range(D):
                    sfx = f"_l{layer}" + ("_reverse" if d else "")
                    w_ih = getattr(lstm, f"weight_ih{sfx}")
                    if layer == 0:
                        module.w_ih_first[d].copy_(w_ih)
                    else:
                        module.w_ih_rest[layer - 1, d].copy_(w_ih)
                    module.w_hh[layer, d].copy_(getattr(lstm, f"weight_hh{sfx}"))
                    b = torch.zeros(4 * lstm.hidden_size)
                    if lstm.bias:
                        b = getattr(lstm, f"bias_ih{sfx}") + getattr(lstm, f"bias_hh{sfx}")
                    module.bias[layer, d].copy_(b)
        return module

    def forward(
        self, x: Tensor, lengths: Tensor, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if hx is None:
            D = 2 if self.bidirectional else 1
            zeros = x.new_zeros(self.num_layers * D, x.shape[0], self.hidden_size)
            hx = (zeros, zeros)
        y, h_n, c_n = packed_lstm(
            x, lengths, hx[0], hx[1], self.w_ih_first, self.w_ih_rest, self.w_hh, self.bias,
            self.enforce_sorted,
        )
        return y, (h_n, c_n)
