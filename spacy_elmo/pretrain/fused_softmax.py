"""The training softmax loss with its gradient computed in the forward pass, a chunk of rows
at a time.

Pretraining only needs the summed negative log-likelihood of each direction, so the
gradient of every row is known up to one factor per direction (the upstream gradient of
that sum) as soon as the row's probabilities are known. ``LinearNLL`` therefore computes,
for a few hundred rows at a time, the logits (in base 2, so that one pass of ``exp2``, three
times faster than ``exp`` on the CPU, gives the softmax's numerators), the loss and the unit
gradient ``softmax - onehot`` (with the softmax's normalisation applied to the narrow
input rows rather than to the wide logits), and from it the gradient of the input rows and of the
weights; backward only scales them. Compared with ``log_softmax`` + ``gather`` under
autograd this never holds the (rows, vocabulary) log-probabilities, their gradient or the
zero-filled gather gradient (a quarter of a ``small`` step went into writing such buffers),
and runs ``exp`` once instead of twice. Same arithmetic otherwise; ``tests/test_fused_lstm.py``
checks loss and gradients against plain autograd in float64.

``adaptive_nll`` applies it to ``torch.nn.AdaptiveLogSoftmaxWithLoss``'s head and clusters.
"""
import math
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2
CHUNK_ELEMENTS = 1 << 20  # logits per chunk (4 MB in float32): stays in cache across the passes
# but never fewer rows than this: the chunk's products are (rows, K) by (K, V) with K the input
# width (32-128 at the presets), and with about 100 rows they ran well under the GEMM rate; at
# `small` (10,001-wide head, 104 rows by the bound above) 256 rows made whole training steps
# 0.6-4.7% faster on one thread (three A/B runs), with `en_cpu` (523 rows at its head) within
# noise (-0.9%, +0.2%);
# up to MAX_CHUNK_ELEMENTS logits (64 MB), so that a very wide softmax keeps a bounded buffer
MIN_CHUNK_ROWS = 256
MAX_CHUNK_ELEMENTS = 1 << 24
ROW_ALIGN = 16  # floats in a 64-byte cache line


def chunk_rows(width: int) -> int:
    """Rows of a chunk of logits ``width`` wide: about ``CHUNK_ELEMENTS`` logits, at least
    ``MIN_CHUNK_ROWS`` rows while that stays within ``MAX_CHUNK_ELEMENTS``."""
    width = max(1, width)
    return max(1, CHUNK_ELEMENTS // width, min(MIN_CHUNK_ROWS, MAX_CHUNK_ELEMENTS // width))


class LinearNLL(torch.autograd.Function):
    """Per segment of rows, ``-sum_r log softmax(x_r W^T + b)[t_r]``.

    x ``(n, K)``, weight ``(V, K)``, bias ``(V,)`` or None, targets ``(n,)`` int64;
    ``segments``: row counts of consecutive segments (summing to n); result ``(len(segments),)``.
    ``with_grad``: also compute the gradients (False when nothing will call backward).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], targets: torch.Tensor,
                segments: Sequence[int], with_grad: bool) -> torch.Tensor:
        n_seg, V = len(segments), weight.shape[0]
        out = x.new_zeros(n_seg)
        gx = torch.empty_like(x) if with_grad else None
        gw = x.new_zeros(n_seg, *weight.shape) if with_grad else None
        gb = x.new_zeros(n_seg, V) if with_grad and bias is not None else None
        rows = chunk_rows(V)
        # the logits in base 2 (log2(e) z, from a scaled contiguous copy of W^T): exp2 runs about
        # three times faster than exp on the CPU, and the products about 10% faster. Rows of the
        # logits and of W^T are padded to whole cache lines (zero weights, unread logits): with
        # rows of an odd width such as 10,001 or 2,002 the products ran up to 1.5x slower
        padded = -(-V // ROW_ALIGN) * ROW_ALIGN
        buffer = x.new_empty(min(rows, x.shape[0]), padded)  # one chunk's logits, reused
        weight2 = weight.new_zeros(weight.shape[1], padded)
        torch.mul(weight.t(), _LOG2E, out=weight2[:, :V])
        bias2 = None
        if bias is not None:
            bias2 = bias.new_zeros(padded)
            torch.mul(bias, _LOG2E, out=bias2[:V])
        start = 0
        for k, size in enumerate(segments):
            for a in range(start, start + int(size), rows):
                b = min(a + rows, start + int(size))
                xc, tc, full = x[a:b], targets[a:b], buffer[: b - a]
                if bias2 is not None:
                    torch.addmm(bias2, xc, weight2, out=full)
                else:
                    torch.mm(xc, weight2, out=full)
                logits = full[:, :V]
                picked = logits.gather(1, tc.unsqueeze(1)).squeeze(1)
                top = logits.amax(dim=1, keepdim=True)
                logits.sub_(top).exp2_()  # e = 2^(log2(e) (z - max z)) = exp(z - max z); softmax = e / total
                total = logits.sum(dim=1)
                # -log p(t) = log(sum e) - (z_t - max z), and z_t - max z = ln 2 (picked - top)
                out[k] += (total.log() - (picked - top.squeeze(1)) * _LN2).sum()
                if gx is not None:
                    # d(-log p_t)/dz = e / total - onehot(t): the 1 / total is applied to the
                    # (rows, K) products and inputs, not to the (rows, V) matrix e
                    inv = total.reciprocal_().unsqueeze(1)
                    torch.mm(logits, weight, out=gx[a:b]).mul_(inv).sub_(weight.index_select(0, tc))
                    gw[k].addmm_(logits.t(), xc * inv).index_add_(0, tc, xc, alpha=-1.0)  # type: ignore[index]
                    if gb is not None:
                        gb[k].addmv_(logits.t(), inv.squeeze(1)).index_add_(0, tc, inv.new_ones(b - a), alpha=-1.0)
            start += int(size)
        ctx.segments = [int(s) for s in segments]
        ctx.save_for_backward(*(t for t in (gx, gw, gb) if t is not None))
        ctx.has = (gx is not None, gb is not None)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        has_grad, has_bias = ctx.has
        if not has_grad:
            raise RuntimeError("LinearNLL: backward of a loss computed with with_grad=False")
        saved = list(ctx.saved_tensors)
        gx, gw = saved[0], saved[1]
        gb = saved[2] if has_bias else None
        scale = torch.repeat_interleave(grad_out, torch.tensor(ctx.segments, device=grad_out.device))
        grad_x = gx * scale.unsqueeze(1).to(gx.dtype)
        grad_w = torch.tensordot(grad_out.to(gw.dtype), gw, dims=1)
        grad_b = torch.tensordot(grad_out.to(gb.dtype), gb, dims=1) if gb is not None else None
        return grad_x, grad_w, grad_b, None, None, None


def linear_nll(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], targets: torch.Tensor,
               segments: Sequence[int]) -> torch.Tensor:
    """``LinearNLL`` with its gradients computed only where autograd will need them."""
    with_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    return LinearNLL.apply(x, weight, bias, targets, [int(s) for s in segments], with_grad)


def _segment_counts(rows: torch.Tensor, segments: Sequence[int]) -> List[int]:
    """How many of the sorted row indices ``rows`` fall in each segment."""
    bounds = torch.tensor([0] + list(segments), device=rows.device).cumsum(0)
    return torch.diff(torch.searchsorted(rows, bounds)).tolist()


def adaptive_nll(softmax: nn.AdaptiveLogSoftmaxWithLoss, hidden: torch.Tensor, targets: torch.Tensor,
                 segments: Sequence[int]) -> torch.Tensor:
    """Summed NLL per segment of rows under ``softmax`` (the same value as
    ``-softmax(hidden, targets).output`` summed per segment): the head's log-probability of
    the target's shortlist word or cluster, plus the cluster's of the word within it."""
    cutoffs: Tuple[int, ...] = tuple([0] + list(softmax.cutoffs))
    head_targets = targets.clone()
    total = None
    for i in range(softmax.n_clusters):
        lo, hi = cutoffs[i + 1], cutoffs[i + 2]
        rows = torch.nonzero((targets >= lo) & (targets < hi)).squeeze(1)
        if rows.numel() == 0:
            continue
        head_targets[rows] = softmax.shortlist_size + i
        projection, output = softmax.tail[i][0], softmax.tail[i][1]
        part = linear_nll(projection(hidden.index_select(0, rows)), output.weight, output.bias,
                          targets.index_select(0, rows) - lo, _segment_counts(rows, segments))
        total = part if total is None else total + part
    head = linear_nll(hidden, softmax.head.weight, softmax.head.bias, head_targets, segments)
    return head if total is None else head + total
