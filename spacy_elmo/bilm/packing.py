"""Index plans that move a flat batch of sentences into the packed layout the LSTM
stack runs on, and the LSTM outputs back.

A batch is the flat concatenation of its sentences' tokens (no padding) plus the
lengths. Each sentence runs as ``<S> tokens </S>``: T = L + 2 positions.
"""
from dataclasses import dataclass
from typing import List

import numpy as np
import torch


@dataclass
class PackingPlan:
    batch_sizes: List[int]  # sequences still running at each step
    src_fwd: torch.Tensor  # (M,) row of [tokens; <S>; </S>] each packed forward step reads
    src_bwd: torch.Tensor  # (M,) the same for the backward direction (reversed sequences)
    out_rows: torch.Tensor  # (R,) row of [tokens; <S>; </S>] of each output row
    out_fwd: torch.Tensor  # (R,) packed position of each output row, forward direction
    out_bwd: torch.Tensor  # (R,) packed position of each output row, backward direction


def make_plan(lengths: np.ndarray, keep_boundaries: bool, device: torch.device) -> PackingPlan:
    """Build the plan for sentences of the given token ``lengths``.

    With ``keep_boundaries`` the output rows are every sentence's ``<S> tokens </S>``
    in order (N + 2S rows), else its tokens only (N rows, the input order).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n_sents = len(lengths)
    n_tokens = int(lengths.sum())
    steps = lengths + 2
    order = np.argsort(-steps, kind="stable")
    rank = np.empty(n_sents, dtype=np.int64)
    rank[order] = np.arange(n_sents)
    sorted_steps = steps[order]
    batch_sizes = (sorted_steps[None, :] > np.arange(sorted_steps[0])[:, None]).sum(axis=1)
    step_start = np.concatenate([[0], np.cumsum(batch_sizes)[:-1]])
    token_start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    # Every (sentence, position) pair in sentence order.
    sent = np.repeat(np.arange(n_sents), steps)
    pos = np.arange(len(sent)) - np.repeat(np.cumsum(steps) - steps, steps)
    last = steps[sent] - 1
    rows = np.where(pos == 0, n_tokens, np.where(pos == last, n_tokens + 1, token_start[sent] + pos - 1))
    packed_fwd = step_start[pos] + rank[sent]
    packed_bwd = step_start[last - pos] + rank[sent]
    src_fwd = np.empty(len(sent), dtype=np.int64)
    src_fwd[packed_fwd] = rows
    src_bwd = np.empty(len(sent), dtype=np.int64)
    src_bwd[packed_bwd] = rows
    if not keep_boundaries:
        inner = (pos > 0) & (pos < last)
        rows, packed_fwd, packed_bwd = rows[inner], packed_fwd[inner], packed_bwd[inner]

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    return PackingPlan(
        batch_sizes=[int(b) for b in batch_sizes],
        src_fwd=t(src_fwd),
        src_bwd=t(src_bwd),
        out_rows=t(rows),
        out_fwd=t(packed_fwd),
        out_bwd=t(packed_bwd),
    )
