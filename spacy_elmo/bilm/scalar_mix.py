"""The task-specific scalar mix of Peters et al. (2018): ``gamma * sum_j s_j * h_j``."""
from typing import Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F


class ScalarMix(nn.Module):
    """Softmax-weighted sum of the biLM layers, scaled by gamma.

    n_layers: number of layers mixed (3 for ELMo).
    layer_norm: normalise each layer per token over its features (no learned affine)
        before mixing. Never over the batch, so a token's output never depends on
        what else is in the batch.
    dropout: dropout rate on the mixed output while training.
    initial_weights: pre-softmax weights s (default zeros: equal weights).
    initial_gamma: the scale gamma (default 1).

    *Shape:* input ``(n_layers, ..., width)``, output ``(..., width)``.
    """

    def __init__(
        self,
        *,
        n_layers: int = 3,
        layer_norm: bool = False,
        dropout: float = 0.0,
        initial_weights: Optional[Sequence[float]] = None,
        initial_gamma: float = 1.0,
    ) -> None:
        super().__init__()
        if initial_weights is None:
            initial_weights = [0.0] * n_layers
        if len(initial_weights) != n_layers:
            raise ValueError(f"ScalarMix: {len(initial_weights)} initial weights for {n_layers} layers")
        self.weights = nn.Parameter(torch.tensor(list(initial_weights), dtype=torch.float32))
        self.gamma = nn.Parameter(torch.tensor([float(initial_gamma)], dtype=torch.float32))
        self.layer_norm = layer_norm
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def normed_weights(self) -> torch.Tensor:
        return torch.softmax(self.weights, dim=0)

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        if layers.shape[0] != self.weights.shape[0]:
            raise ValueError(f"ScalarMix: expected {self.weights.shape[0]} layers, got {layers.shape[0]}")
        if self.layer_norm:
            layers = F.layer_norm(layers, layers.shape[-1:])
        s = self.normed_weights().to(layers.dtype)
        mixed = torch.tensordot(s, layers, dims=([0], [0]))
        return self.dropout(self.gamma.to(layers.dtype) * mixed)
