"""Kokoro's text side as one exportable stage over a token bucket.

ALBERT, bert_encoder, the prosody DurationEncoder, the duration LSTM/projection and the
TextEncoder of ``KModel.forward_with_tokens``, rewritten so that ``torch.export`` can
trace them and so
that padding the tokens to a bucket does not change the valid positions: the LSTMs are
``PackedLSTM`` (lengths carried through the graph), ALBERT gets the attention mask, and
padded positions are zeroed where kokoro zeroes them.  The integer durations are taken on
the host (``durations_from_logits``), as kokoro does after this point.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .packed_lstm import PackedLSTM
from .weight_norm import fold_weight_norm


class TextStage(nn.Module):
    """(input_ids [B, N], lengths [B], style [B, 128]) -> (d, duration, t_en).

    ``d`` [B, N, C] are the prosody features the alignment expands to frames (``en`` in
    kokoro), ``duration`` [B, N] the per-token duration before ``/ speed`` and rounding,
    ``t_en`` [B, 512, N] the TextEncoder features (``asr`` after the alignment); all are
    zero past each length.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        predictor = model.predictor
        self.bert = model.bert
        self.bert_encoder = model.bert_encoder
        blocks = list(predictor.text_encoder.lstms)
        self.encoder_lstms = nn.ModuleList(PackedLSTM.from_lstm(b) for b in blocks[0::2])
        self.encoder_norms = nn.ModuleList(blocks[1::2])
        self.lstm = PackedLSTM.from_lstm(predictor.lstm)
        self.duration_proj = predictor.duration_proj
        text_encoder = fold_weight_norm(model.text_encoder)
        self.embedding = text_encoder.embedding
        self.cnn = text_encoder.cnn
        self.text_lstm = PackedLSTM.from_lstm(text_encoder.lstm)

    def forward(
        self, input_ids: Tensor, lengths: Tensor, style: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        steps = input_ids.shape[1]
        valid = torch.arange(steps, device=input_ids.device)[None, :] < lengths[:, None]
        keep = valid[:, :, None].to(torch.float32)  # [B, N, 1]
        bert = self.bert(input_ids, attention_mask=valid.to(torch.int64))
        x = self.bert_encoder(bert)  # [B, N, C]
        s = style[:, None, :].expand(-1, steps, -1)
        # DurationEncoder: LSTM and AdaLayerNorm alternate, style appended after each.
        x = torch.cat([x, s], dim=-1) * keep
        for lstm, norm in zip(self.encoder_lstms, self.encoder_norms):
            x, _ = lstm(x, lengths)
            x = norm(x, style)
            x = torch.cat([x, s], dim=-1) * keep
        d = x
        h, _ = self.lstm(d, lengths)
        duration = torch.sigmoid(self.duration_proj(h)).sum(dim=-1) * keep[:, :, 0]
        # TextEncoder: convolutions with the padding zeroed in between, then the LSTM.
        keep_channels = keep.transpose(1, 2)  # [B, 1, N]
        t = self.embedding(input_ids).transpose(1, 2) * keep_channels
        for conv_block in self.cnn:
            t = conv_block(t) * keep_channels
        t, _ = self.text_lstm(t.transpose(1, 2), lengths)
        return d, duration, t.transpose(1, 2) * keep_channels


def durations_from_logits(duration: Tensor, length: int, speed: float = 1.0) -> Tensor:
    """Integer frames per token, as kokoro rounds them: round(duration / speed), at least 1."""
    return torch.round(duration[:length] / speed).clamp(min=1).long()
