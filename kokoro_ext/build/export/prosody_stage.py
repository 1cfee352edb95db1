"""Kokoro's F0 and energy (N) prediction as one exportable stage over a frame bucket.

``ProsodyPredictor.F0Ntrain`` with the shared LSTM as a ``PackedLSTM`` over the valid
frames and the AdaIN residual blocks made length-aware (kokoro_ext.build.export.masked), so that
the valid part of a padded bucket equals the unpadded computation.
"""

from __future__ import annotations

from torch import Tensor, nn

from .masked import adain_resblock, frame_mask, upsample_mask
from .packed_lstm import PackedLSTM
from .weight_norm import fold_weight_norm


class ProsodyStage(nn.Module):
    """(en [B, C, T], lengths [B], style [B, 128]) -> (F0 [B, 2T], N [B, 2T]), zero past 2*length."""

    def __init__(self, model: nn.Module):
        super().__init__()
        predictor = fold_weight_norm(model.predictor)
        self.shared = PackedLSTM.from_lstm(predictor.shared)
        self.F0 = predictor.F0
        self.N = predictor.N
        self.F0_proj = predictor.F0_proj
        self.N_proj = predictor.N_proj

    def _branch(self, blocks, proj, x: Tensor, style: Tensor, mask: Tensor) -> Tensor:
        for block in blocks:
            x = adain_resblock(block, x, style, mask)
            if block.upsample_type != "none":
                mask = upsample_mask(mask)
        return (proj(x) * mask)[:, 0]

    def forward(self, en: Tensor, lengths: Tensor, style: Tensor) -> tuple[Tensor, Tensor]:
        mask = frame_mask(lengths, en.shape[-1])
        x, _ = self.shared(en.transpose(-1, -2), lengths)
        x = x.transpose(-1, -2)
        return (
            self._branch(self.F0, self.F0_proj, x, style, mask),
            self._branch(self.N, self.N_proj, x, style, mask),
        )
