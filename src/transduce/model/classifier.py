"""The encoder-only variant (not in the paper): the Transformer's §3.1 `Encoder` plus pooling and a classification
head (config/classification.py's HeadConfig)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import HeadConfig, ModelConfig
from ..config.memory import check_fits, head_weights, model_shape, with_head_setting
from .transformer import Encoder, init_parameters


class TransformerClassifier(nn.Module):
    """The same Encoder class as the translation model, then pooling and a two-layer head."""

    def __init__(self, config: ModelConfig, head: HeadConfig, *, max_len: int) -> None:
        super().__init__()
        shape = model_shape(config, decoder=False, head=head_weights(config, head, max_len))
        check_fits(with_head_setting(shape, config, head, max_len))  # before allocating
        self.config, self.head_config, self.max_len = config, head, max_len
        self.encoder = Encoder(config, nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id))
        width = config.d_model * (max_len + (head.pooling == "cls")) if head.pooling == "flatten" else config.d_model
        hidden = head.hidden or config.d_model
        self.head = nn.Sequential(
            nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(config.dropout), nn.Linear(hidden, head.n_classes)
        )
        init_parameters(self, config.d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, L), padded with pad_id -> class logits (B, n_classes)."""
        pad = tokens.eq(self.config.pad_id)  # (B, L)
        h = self.encoder(tokens, pad)  # (B, L, D)
        h = h.masked_fill(pad.unsqueeze(-1), 0.0)
        if self.head_config.pooling == "cls":
            pooled = h[:, 0]  # (B, D)
        elif self.head_config.pooling == "flatten":
            pooled = F.pad(h, (0, 0, 0, self.max_len - h.size(1))).flatten(1)  # (B, max_len * D)
        else:
            pooled = h.sum(1) / (~pad).sum(1, keepdim=True).clamp(min=1)  # (B, D)
        return self.head(pooled)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
