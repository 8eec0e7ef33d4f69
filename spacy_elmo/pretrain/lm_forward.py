"""The language-model forward pass of pretraining: only what the loss reads, no more.

``ElmoBiLM.forward_with_boundaries`` returns every layer at every row of ``<S> tokens </S>``;
the loss reads only the top layer, the forward direction at ``<S>`` and the tokens, the
backward direction at the tokens and ``</S>``. Here:

- the token layer (char CNN, highways, projection) runs once per distinct word type of the
  batch (the batch knows each token's type) plus ``<S>`` and ``</S>``, and so do the first
  LSTM layer's input products, whose results are then indexed into the packed rows (their
  gradients are summed per type);
- every sequence runs one step fewer in each direction: the forward direction never reads
  ``</S>`` and the backward one never reads ``<S>``, since the states after them predict
  nothing (exact: no output the loss reads depends on those steps);
- the LSTM layers run through ``fused_lstm`` (one autograd node per layer);
- sentences that begin alike share the forward direction's rows there, and sentences that
  end alike the backward one's (every sentence starts from ``<S>`` and most end with a
  full stop): a state depends only on what was read before it, so each distinct prefix
  (suffix) runs once and its gradient sums those of every sentence through it;
- the top layer's states that predict each target are gathered straight from the packed
  rows, in the order of ``LMBatch.fwd_targets`` then ``LMBatch.bwd_targets``;
- the softmax loss computes its gradient in the forward pass, a chunk of rows at a time
  (``fused_softmax``), never holding a (rows, vocabulary) matrix.
"""
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import torch
from torch.nn import functional as F

from ..bilm import ElmoBiLM
from ..bilm.softmax import AdaptiveSoftmax, FullSoftmax
from .batches import LMBatch
from .fused_lstm import fused_stack
from .fused_softmax import adaptive_nll, linear_nll


@dataclass
class TrainingPlan:
    """Index plan of a batch of S sentences, N tokens, U distinct types; M packed rows a
    direction. Rows of the token table: the U types, then ``<S>`` (U), then ``</S>`` (U + 1).

    A row stands for a distinct prefix (forward) or suffix (backward) of the batch's sentences,
    not for one sentence: sentences that begin (end) alike share the LSTM's states there, so
    each is computed once. Step t holds ``batch_sizes[t]`` rows in both directions, the larger
    count of the two; the other direction's surplus rows read ``<S>`` / ``</S>``, are never read
    and get no gradient."""

    batch_sizes: List[int]  # rows at each step
    src: torch.Tensor  # (2 * M,) token-table row read by each packed row, forward then backward
    parents: torch.Tensor  # (2, M) row of its direction one step earlier that each row continues (0 at step 0)
    targets_rows: torch.Tensor  # (2 * (N + S),) packed row (of 2 * M) predicting each target


def _distinct_prefixes(reads: np.ndarray, running: np.ndarray, width: int) -> Tuple[np.ndarray, List[np.ndarray]]:
    """reads (S, T): the table row (< ``width``) that each sentence reads at each step, the
    sentences sorted by their number of steps (longest first), ``running[t]`` of them running
    step t. Returns each (sentence, step)'s index among its step's distinct prefixes, (S, T),
    and for each step its distinct prefixes as ``parent * width + read`` (ascending)."""
    node = np.zeros(reads.shape, dtype=np.int64)
    keys_of_step: List[np.ndarray] = []
    prev = np.zeros(reads.shape[0], dtype=np.int64)
    for t, n in enumerate(running):
        keys, node[:n, t] = np.unique(prev[:n] * width + reads[:n, t], return_inverse=True)
        keys_of_step.append(keys)
        prev = node[:, t]
    return node, keys_of_step


def training_plan(lengths: np.ndarray, token_types: np.ndarray, n_types: int) -> TrainingPlan:
    """The plan for sentences of ``lengths`` tokens whose flat tokens have table rows
    ``token_types`` (N,). Forward step p of a sentence reads ``<S>`` (p = 0) or token p - 1
    and predicts token p (``</S>`` at p = L); backward step q reads ``</S>`` (q = 0) or
    token L - q and predicts token L - 1 - q (``<S>`` at q = L)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    token_types = np.asarray(token_types, dtype=np.int64)
    n_sents, width = len(lengths), n_types + 2
    steps = lengths + 1
    order = np.argsort(-steps, kind="stable")
    rank = np.empty(n_sents, dtype=np.int64)
    rank[order] = np.arange(n_sents)
    n_steps = int(steps.max()) if n_sents else 0
    running = (steps[order][None, :] > np.arange(n_steps)[:, None]).sum(axis=1)
    # what each (sentence, step) reads, sentences in rank order
    tok_start = np.cumsum(lengths) - lengths
    sent = np.repeat(np.arange(n_sents), steps)
    pos = np.arange(int(steps.sum())) - np.repeat(np.cumsum(steps) - steps, steps)
    safe = token_types if len(token_types) else np.zeros(1, np.int64)
    reads = np.zeros((2, n_sents, n_steps), dtype=np.int64)
    reads[0, rank[sent], pos] = np.where(pos > 0, safe[np.where(pos > 0, tok_start[sent] + pos - 1, 0)], n_types)
    reads[1, rank[sent], pos] = np.where(pos > 0, safe[np.where(pos > 0, tok_start[sent] + lengths[sent] - pos, 0)],
                                         n_types + 1)
    fwd_node, fwd_keys = _distinct_prefixes(reads[0], running, width)
    bwd_node, bwd_keys = _distinct_prefixes(reads[1], running, width)
    batch_sizes = [max(len(f), len(b)) for f, b in zip(fwd_keys, bwd_keys)]
    step_start = np.concatenate([[0], np.cumsum(batch_sizes)[:-1]]).astype(np.int64)
    M = int(sum(batch_sizes))
    src = np.empty((2, M), dtype=np.int64)
    parents = np.zeros((2, M), dtype=np.int64)
    for d, keys_of_step in enumerate((fwd_keys, bwd_keys)):
        for t, keys in enumerate(keys_of_step):
            s, n = step_start[t], batch_sizes[t]
            src[d, s : s + n] = n_types + d  # the surplus rows read the boundary
            src[d, s : s + len(keys)] = keys % width
            if t > 0:
                parents[d, s : s + len(keys)] = step_start[t - 1] + keys // width
                parents[d, s + len(keys) : s + n] = step_start[t - 1]
    tok_sent = np.repeat(np.arange(n_sents), lengths)
    j = np.arange(int(lengths.sum())) - tok_start[tok_sent]
    r = rank[tok_sent]
    q = lengths[tok_sent] - 1 - j  # the backward step predicting token j
    fwd_rows = np.concatenate([step_start[j] + fwd_node[r, j], step_start[lengths] + fwd_node[rank, lengths]])
    bwd_rows = np.concatenate([step_start[q] + bwd_node[r, q], step_start[lengths] + bwd_node[rank, lengths]]) + M
    return TrainingPlan(
        batch_sizes=[int(b) for b in batch_sizes],
        src=torch.from_numpy(src.reshape(-1)),
        parents=torch.from_numpy(parents),
        targets_rows=torch.from_numpy(np.concatenate([fwd_rows, bwd_rows])),
    )


def predicting_states(bilm: ElmoBiLM, type_char_ids: torch.Tensor, plan: TrainingPlan) -> torch.Tensor:
    """Top-layer states predicting every target: ``(2 * (N + S), P)``, the forward
    direction's rows (``fwd_targets`` order) then the backward direction's.

    type_char_ids: ``(U, max_chars)`` char ids of the batch's distinct types.
    """
    device = bilm.device
    table = bilm.token_encoder(torch.cat([type_char_ids.to(device), bilm.boundary_char_ids], dim=0))
    top = fused_stack(bilm.lstm, table, plan.batch_sizes, plan.src.to(device), plan.parents.to(device))[-1]
    return top.reshape(-1, top.shape[2]).index_select(0, plan.targets_rows.to(device))


def summed_nll(softmax: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
               segments: List[int]) -> torch.Tensor:
    """Summed NLL of each segment of rows' targets, ``(len(segments),)``, one fused call."""
    if isinstance(softmax, AdaptiveSoftmax):
        return adaptive_nll(softmax.proj, hidden, targets, segments)
    if isinstance(softmax, FullSoftmax):
        return linear_nll(hidden, softmax.proj.weight, softmax.proj.bias, targets, segments)
    raise TypeError(f"unsupported softmax module {type(softmax).__name__}")


def fast_lm_loss(bilm: ElmoBiLM, batch: LMBatch, dropout: float, training: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """Summed forward and backward NLL of ``batch``: the same loss as ``BiLMLoss``'s plain
    path (dropout on the top layer's predicting states, shared softmax), computed as above."""
    assert batch.type_char_ids is not None and batch.token_types is not None and bilm.softmax is not None
    plan = training_plan(np.asarray(batch.lengths, dtype=np.int64), batch.token_types, batch.type_char_ids.shape[0])
    hidden = F.dropout(predicting_states(bilm, batch.type_char_ids, plan), dropout, training)
    targets = torch.cat([batch.fwd_targets, batch.bwd_targets]).to(hidden.device)
    if hidden.dtype in (torch.float16, torch.bfloat16):
        hidden = hidden.float()
    # the softmax in float32 also under amp (AdaptiveLogSoftmaxWithLoss mixes dtypes there)
    with torch.autocast(hidden.device.type, enabled=False):
        nll = summed_nll(bilm.softmax, hidden, targets, [batch.fwd_targets.shape[0], batch.bwd_targets.shape[0]])
    return nll[0], nll[1]
