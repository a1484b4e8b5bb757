"""Chimera's semantic router (3.3): an encoder with a multi-label head, one sigmoid per model.

q[m] = sigmoid(l_{r,m}), l_r = W h_r + b, h_r the encoder's pooled representation of the prompt
(mean over tokens, the pooling all-MiniLM-L6-v2 was trained with). Trained with binary cross-entropy
on (prompt, model) correctness labels.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel


class RouterNet(nn.Module):
    def __init__(self, encoder_dir: str, num_models: int) -> None:
        super().__init__()
        self.encoder = AutoModel.from_pretrained(encoder_dir)
        self.head = nn.Linear(self.encoder.config.hidden_size, num_models)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """q[m] = sigmoid(l_{r,m}) (Chimera 3.3); this is what the ONNX export computes."""
        return torch.sigmoid(self.logits(input_ids, attention_mask))
