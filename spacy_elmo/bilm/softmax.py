"""Output layers for language-model training (not used to embed text).

``build_softmax`` makes the module named by ``softmax_options["type"]``:
"full" (a Linear layer over the whole output vocabulary) or "adaptive"
(``torch.nn.AdaptiveLogSoftmaxWithLoss`` with ``cutoffs`` and ``div_value``).
Both map ``(n, P)`` hidden states and ``(n,)`` targets to the summed negative
log-likelihood with ``nll(hidden, targets)``.
"""
from typing import Any, Dict, Optional

import torch
from torch import nn
from torch.nn import functional as F

SOFTMAX_TYPES = ("full", "adaptive")


class FullSoftmax(nn.Module):
    def __init__(self, projection_dim: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(projection_dim, vocab_size)

    def nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.proj(hidden), targets, reduction="sum")

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(hidden), dim=-1)


class AdaptiveSoftmax(nn.Module):
    def __init__(self, projection_dim: int, vocab_size: int, cutoffs: Any, div_value: float) -> None:
        super().__init__()
        given = [int(c) for c in cutoffs]
        cutoffs = [c for c in given if 0 < c < vocab_size]
        if not cutoffs:
            raise ValueError(
                f"adaptive softmax: no cutoff in {given} is below the vocabulary size ({vocab_size}); "
                'use softmax type "full" or smaller cutoffs'
            )
        self.proj = nn.AdaptiveLogSoftmaxWithLoss(projection_dim, vocab_size, cutoffs, div_value=div_value)

    def nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return -self.proj(hidden, targets).output.sum()

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj.log_prob(hidden)


def build_softmax(projection_dim: int, vocab_size: int, softmax_options: Optional[Dict[str, Any]]) -> nn.Module:
    opts = dict(softmax_options or {"type": "full"})
    kind = opts.get("type", "full")
    if kind == "full":
        return FullSoftmax(projection_dim, vocab_size)
    if kind == "adaptive":
        return AdaptiveSoftmax(projection_dim, vocab_size, opts.get("cutoffs", [2000, 10000]), float(opts.get("div_value", 4.0)))
    raise ValueError(f"unknown softmax type {kind!r} (expected one of {SOFTMAX_TYPES})")
