"""Context-independent token layer: character embedding, CNN, highway, projection."""
from typing import List, Sequence

import torch
from torch import nn
from torch.nn import functional as F


class Highway(nn.Module):
    """One highway layer in the bilm-tf form: ``y = g * relu(T(x)) + (1 - g) * x``,
    ``g = sigmoid(G(x))``. The nonlinearity is always ReLU.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.transform = nn.Linear(width, width)
        self.gate = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.gate(x))
        return g * F.relu(self.transform(x)) + (1.0 - g) * x


class CharTokenEncoder(nn.Module):
    """Token ids of characters to a context-independent token vector.

    char_dim: width E of the character embedding.
    filters: (width, count) of each CNN filter group; F = sum of the counts.
    n_highway: number of highway layers of width F.
    projection_dim: output width P.
    activation: "relu" or "tanh", applied after max-pooling each filter.
    n_characters: rows of the embedding table (row 0 is the padding row).

    *Shape:* input ``(n_tokens, max_chars)`` int64, output ``(n_tokens, P)``.
    """

    def __init__(
        self,
        *,
        char_dim: int,
        filters: Sequence[Sequence[int]],
        n_highway: int,
        projection_dim: int,
        activation: str = "relu",
        n_characters: int = 262,
    ) -> None:
        super().__init__()
        self.char_embedding = nn.Embedding(n_characters, char_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, int(n), int(w)) for w, n in filters)
        width = sum(int(n) for _, n in filters)
        self.highways = nn.ModuleList(Highway(width) for _ in range(n_highway))
        self.projection = nn.Linear(width, projection_dim)
        self.activation = torch.tanh if activation == "tanh" else torch.relu
        self.n_filters = width

    def cnn(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Max-pooled, activated CNN features, shape ``(n_tokens, F)``."""
        emb = self.char_embedding(char_ids).transpose(1, 2)  # (n, E, max_chars)
        feats: List[torch.Tensor] = []
        for conv in self.convs:
            feats.append(conv(emb).amax(dim=2))
        return self.activation(torch.cat(feats, dim=1))

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        x = self.cnn(char_ids)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x)
