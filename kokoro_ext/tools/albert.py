"""ALBERT as kokoro uses it, in torch alone: transformers' ``AlbertModel`` without transformers.

kokoro's ``KModel`` reads its phonemes with transformers' ALBERT (``CustomAlbert``, a
subclass that returns ``last_hidden_state``).  transformers is a large package with many
dependencies; a machine that should only check a build against PyTorch (bench/gpu.py on
a GPU machine without network) can run kokoro's model code on this module instead, where
the imports of kokoro's ``model.py`` and ``modules.py`` are pointed here.

Same modules, parameter names and shapes as transformers' (its state dict loads into this
one and back), and the same inference computation: word, position and token-type
embeddings and their LayerNorm, the projection to the hidden size, one layer group's
weights applied ``num_hidden_layers`` times (attention with the padding mask, the
``gelu_new`` feed-forward), and the pooler.  Eval only: dropout is left out.
tests/test_gpu_bundle.py compares the two on the same weights.  Weights are initialized
as transformers does (normal, standard deviation ``initializer_range``; zero biases; the
padding embedding zero), drawn from torch's global generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F


@dataclass
class AlbertConfig:
    """transformers' ``AlbertConfig`` fields that the model reads (their defaults too);
    other keyword arguments (kokoro's config passes ``dropout``) are kept and unused."""

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    def __init__(self, **kwargs: Any):
        for name, value in kwargs.items():
            setattr(self, name, value)


def _activation(name: str):
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    if name == "relu":
        return F.relu
    raise ValueError(f"ALBERT activation {name!r} is not supported here")


class AlbertEmbeddings(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        e = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, e, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, e)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, e)
        self.LayerNorm = nn.LayerNorm(e, eps=config.layer_norm_eps)

    def forward(self, input_ids: Tensor) -> Tensor:
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device)
        x = self.word_embeddings(input_ids)
        x = x + self.token_type_embeddings.weight[0] + self.position_embeddings(positions)
        return self.LayerNorm(x)


class AlbertAttention(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        h = config.hidden_size
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = h // config.num_attention_heads
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.dense = nn.Linear(h, h)
        self.LayerNorm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        shape = (*x.shape[:-1], self.num_attention_heads, self.attention_head_size)
        q, k, v = (m(x).view(shape).transpose(1, 2) for m in (self.query, self.key, self.value))
        scores = q @ k.transpose(2, 3) * self.attention_head_size**-0.5
        if mask is not None:
            scores = scores + mask
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        return self.LayerNorm(x + self.dense(context))


class AlbertLayer(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.full_layer_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = _activation(config.hidden_act)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        attended = self.attention(x, mask)
        out = self.ffn_output(self.activation(self.ffn(attended)))
        return self.full_layer_layer_norm(out + attended)


class AlbertLayerGroup(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.albert_layers = nn.ModuleList(
            [AlbertLayer(config) for _ in range(config.inner_group_num)]
        )

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for layer in self.albert_layers:
            x = layer(x, mask)
        return x


class AlbertTransformer(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        self.albert_layer_groups = nn.ModuleList(
            [AlbertLayerGroup(config) for _ in range(config.num_hidden_groups)]
        )

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.embedding_hidden_mapping_in(x)
        layers, groups = self.config.num_hidden_layers, self.config.num_hidden_groups
        for i in range(layers):
            x = self.albert_layer_groups[int(i / (layers / groups))](x, mask)
        return x


@dataclass
class AlbertOutput:
    last_hidden_state: Tensor
    pooler_output: Tensor


class AlbertModel(nn.Module):
    """transformers' ``AlbertModel(config)`` for inference: ``forward(input_ids,
    attention_mask=None)`` (1 for a token, 0 for padding) gives ``AlbertOutput``."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertTransformer(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.pooler_activation = nn.Tanh()
        self._init_weights()

    @property
    def device(self) -> torch.device:
        return self.pooler.weight.device

    def _init_weights(self) -> None:
        std = self.config.initializer_range
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    module.weight.normal_(0.0, std)
                    module.bias.zero_()
                elif isinstance(module, nn.Embedding):
                    module.weight.normal_(0.0, std)
                    if module.padding_idx is not None:
                        module.weight[module.padding_idx].zero_()
                elif isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> AlbertOutput:
        x = self.embeddings(input_ids)
        mask = None
        if attention_mask is not None:  # [B, N] -> additive [B, 1, 1, N], as transformers'
            keep = attention_mask[:, None, None, :].to(torch.bool)
            mask = torch.zeros(keep.shape, dtype=x.dtype, device=x.device)
            mask = mask.masked_fill(~keep, torch.finfo(x.dtype).min)
        out = self.encoder(x, mask)
        return AlbertOutput(out, self.pooler_activation(self.pooler(out[:, 0])))
