"""The char CNN's embedding lookup, convolutions and max-pool as one autograd node for
training on the CPU, with a backward that does only the arithmetic the max-pool leaves.

Max-pooling over windows sends each filter's gradient to one window per token, so the
convolution's usual backward (a dense ``(n, F, windows)`` gradient, mostly zeros, through
full-size input and weight products) does about ``windows`` times too much work. Here, for
each filter group of width ``w`` and each offset ``k < w``, the gradient of every (token,
filter) is summed per character seen at offset ``k`` of its chosen window: a table
``G_k`` of shape ``(n_characters, F)``. Then ``dW[:, :, k] = G_k^T @ table`` and
``d_table += G_k @ W[:, :, k]``: products over the character vocabulary instead of the
tokens' windows. The same sums as autograd's, grouped differently (``tests/test_fused_lstm.py``
checks every gradient in float64). At the ``small`` shape the backward takes about a fifth of
the convolution's time.

On the CPU the convolutions themselves are computed as one product per filter group: the
windows of every token unfolded into rows of ``E * w`` values, times the ``(E * w, F)`` filter
matrix, into a ``(n, windows, F)`` map whose max over windows runs along a contiguous inner
dimension. Timed alone at the ``en_cpu`` and ``small`` filter shapes (1,000 and 2,578 tokens of
18-19 slots, one thread), the forward takes 1.35x and 1.9x less time than ``conv1d`` then ``amax``;
with the window index that training keeps, 1.3x and 1.5x less than ``conv1d`` then ``max``.
"""
from typing import List, Optional, Sequence, Tuple

import torch
from torch.nn import functional as F


class ConvMaxPool(torch.autograd.Function):
    """``cat([conv_g(embedding(char_ids)).max(windows) for each group g])`` as one node.

    char_ids ``(n, chars)`` int64; table ``(V, E)``; params: each group's weight ``(F_g, E, w)``
    then bias ``(F_g,)``, alternating. Result ``(n, sum F_g)``, before the activation."""

    @staticmethod
    def forward(ctx, char_ids: torch.Tensor, table: torch.Tensor, padding_idx: Optional[int],
                *params: torch.Tensor) -> torch.Tensor:
        emb = F.embedding(char_ids, table)  # (n, chars, E)
        pooled, picks = [], []
        for weight, bias in zip(params[0::2], params[1::2]):
            features = _window_products(emb, weight, bias)
            values = features.amax(dim=1)
            pooled.append(values)
            picks.append(_a_max_window(features, values))
        ctx.padding_idx = padding_idx
        ctx.save_for_backward(char_ids, table, *params[0::2], *picks)
        return torch.cat(pooled, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        char_ids, table, *rest = ctx.saved_tensors
        weights, picks = rest[: len(rest) // 2], rest[len(rest) // 2 :]
        grad = grad.contiguous()
        n_chars = table.shape[0]
        d_table = torch.zeros_like(table)
        param_grads: List[torch.Tensor] = []
        offset = 0
        for weight, index in zip(weights, picks):
            n_filters, _, width = weight.shape
            g = grad[:, offset : offset + n_filters]
            offset += n_filters
            flat_g = g.reshape(-1)
            filter_ids = torch.arange(n_filters, device=grad.device)
            d_weight = weight.new_empty(width, n_filters, table.shape[1])
            for k in range(width):
                chars = torch.gather(char_ids, 1, index.long() + k)  # character at offset k of each chosen window
                summed = _weighted_count((chars * n_filters + filter_ids).view(-1), flat_g, n_chars * n_filters)
                summed = summed.view(n_chars, n_filters)
                torch.mm(summed.t(), table, out=d_weight[k])
                d_table.addmm_(summed, weight[:, :, k])
            param_grads += [d_weight.permute(1, 2, 0).contiguous(), g.sum(dim=0)]
        if ctx.padding_idx is not None:
            d_table[ctx.padding_idx] = 0
        return (None, d_table, None, *param_grads)


def _window_products(emb: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``conv1d`` of ``emb`` ``(n, chars, E)`` with ``weight`` ``(F, E, w)`` and ``bias``, as
    ``(n, windows, F)``: every window unfolded into a row of ``E * w`` values, one product."""
    n, length, dim = emb.shape
    n_filters, _, width = weight.shape
    windows = emb.unfold(1, width, 1).reshape(-1, dim * width)  # rows of (E, w), as the weight
    out = torch.addmm(bias, windows, weight.reshape(n_filters, dim * width).t())
    return out.view(n, length - width + 1, n_filters)


def _a_max_window(features: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """For each (token, filter) of ``features`` ``(n, windows, F)``, a window that holds its max
    ``values`` ``(n, F)`` (the last one among ties), as uint8 (int32 past 256 windows). Faster
    than ``max`` with indices over a non-innermost dimension; windows tie when they see the same
    characters, so which of them takes the gradient does not change it."""
    n_windows = features.shape[1]
    ties = torch.eq(features, values.unsqueeze(1))
    marks = ties.view(torch.uint8) if n_windows <= 256 else ties.to(torch.int32)
    steps = torch.arange(n_windows, dtype=marks.dtype, device=features.device).view(1, -1, 1)
    return marks.mul_(steps).amax(dim=1)


def _weighted_count(index: torch.Tensor, weights: torch.Tensor, size: int) -> torch.Tensor:
    """``out[i] = sum of weights[j] where index[j] == i``, shape ``(size,)``."""
    if index.device.type == "cpu" and index.numel():  # bincount: about twice as fast as index_add_ here
        return torch.bincount(index, weights=weights, minlength=size)
    return weights.new_zeros(size).index_add_(0, index, weights)


def conv_max_pool(char_ids: torch.Tensor, embedding: torch.nn.Embedding,
                  convs: Sequence[torch.nn.Conv1d]) -> torch.Tensor:
    """Max-pooled CNN features ``(n, F)`` of ``char_ids`` (before the activation). On the CPU
    through one product per filter group (``_window_products``), under autograd in
    ``ConvMaxPool``. Elsewhere (GPUs, autocast) the plain modules: ``amax`` without
    autograd (fastest forward), ``max`` with indices under it, whose backward writes each
    gradient to one window (``amax``'s builds and divides a mask of tied windows; the parameter
    gradients are the same, since tied windows see the same characters)."""
    table, params = embedding.weight, _params(convs)
    needs_grad = torch.is_grad_enabled() and any(p.requires_grad for p in (table, *params))
    if table.device.type == "cpu" and not torch.is_autocast_enabled("cpu"):
        if needs_grad:
            return ConvMaxPool.apply(char_ids, table, embedding.padding_idx, *params)
        emb = embedding(char_ids)
        return torch.cat([_window_products(emb, conv.weight, conv.bias).amax(dim=1) for conv in convs], dim=1)
    emb = embedding(char_ids).transpose(1, 2)
    if needs_grad:
        return torch.cat([conv(emb).max(dim=2).values for conv in convs], dim=1)
    return torch.cat([conv(emb).amax(dim=2) for conv in convs], dim=1)


def _params(convs: Sequence[torch.nn.Conv1d]) -> Tuple[torch.Tensor, ...]:
    return tuple(p for conv in convs for p in (conv.weight, conv.bias))
