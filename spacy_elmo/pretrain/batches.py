"""Batches of whole sentences for the language-model loss (stateless, as used:
every sentence is ``<S> tokens </S>`` from a zero state)."""
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch

from .corpus import Corpus


@dataclass
class LMBatch:
    char_ids: torch.Tensor  # (N, max_chars) flat tokens
    lengths: List[int]  # tokens per sentence
    fwd_rows: torch.Tensor  # rows of the boundary layout whose forward state predicts...
    fwd_targets: torch.Tensor  # ...the next token (tokens, then </S>)
    bwd_rows: torch.Tensor  # rows whose backward state predicts...
    bwd_targets: torch.Tensor  # ...the previous token (<S>, then tokens)
    type_char_ids: Optional[torch.Tensor] = None  # (U, max_chars) the batch's distinct types
    token_types: Optional[np.ndarray] = None  # (N,) each token's row of type_char_ids

    @property
    def n_targets(self) -> int:
        return int(self.fwd_targets.shape[0] + self.bwd_targets.shape[0])


def cut_sentences(corpus: Corpus, max_length: int) -> np.ndarray:
    """Sentence offsets with every sentence longer than ``max_length`` cut into pieces."""
    starts = []
    for s, e in zip(corpus.offsets[:-1], corpus.offsets[1:]):
        starts.extend(range(int(s), int(e), max_length))
    return np.asarray(starts + [int(corpus.offsets[-1])], dtype=np.int64)


def make_batch(
    corpus: Corpus, offsets: np.ndarray, sentences: np.ndarray, char_table: np.ndarray, targets: np.ndarray
) -> LMBatch:
    """The batch of the given sentence indices (into ``offsets``)."""
    starts, ends = offsets[sentences], offsets[sentences + 1]
    lengths = (ends - starts).astype(np.int64)
    token_pos = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(sentences) else np.zeros(0, np.int64)
    type_ids = corpus.ids[token_pos]
    distinct, token_types = np.unique(type_ids, return_inverse=True)
    tok_targets = targets[type_ids]
    base = np.cumsum(lengths + 2) - (lengths + 2)  # row of each sentence's <S> (none for no sentences)
    sent_of_tok = np.repeat(np.arange(len(lengths)), lengths)
    pos_in_sent = np.arange(len(token_pos)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    tok_rows = base[sent_of_tok] + 1 + pos_in_sent  # row of each token
    # forward: rows <S>..last token predict tokens then </S>; backward: rows first..</S> predict <S> then tokens
    fwd_rows = np.concatenate([tok_rows - 1, base + lengths])
    fwd_targets = np.concatenate([tok_targets, np.full(len(lengths), 1)])
    bwd_targets = np.concatenate([tok_targets, np.full(len(lengths), 0)])
    bwd_rows = np.concatenate([tok_rows + 1, base + 1])
    return LMBatch(
        char_ids=torch.from_numpy(char_table[type_ids]),
        lengths=[int(n) for n in lengths],
        fwd_rows=torch.from_numpy(fwd_rows.astype(np.int64)),
        fwd_targets=torch.from_numpy(fwd_targets.astype(np.int64)),
        bwd_rows=torch.from_numpy(bwd_rows.astype(np.int64)),
        bwd_targets=torch.from_numpy(bwd_targets.astype(np.int64)),
        type_char_ids=torch.from_numpy(char_table[distinct]),
        token_types=token_types.reshape(-1).astype(np.int64),
    )


def epoch_batches(lengths: np.ndarray, batch_tokens: int, seed: int, epoch: int) -> List[np.ndarray]:
    """Sentence indices of every batch of one epoch: shuffled, bucketed by length
    within chunks (less wasted recurrence), about ``batch_tokens`` tokens each
    (boundaries included). Deterministic in (seed, epoch)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    cost = lengths + 2
    chunk = max(1, int(50 * batch_tokens / max(1.0, float(cost.mean()))))
    batches: List[np.ndarray] = []
    for c in range(0, len(order), chunk):
        idx = order[c : c + chunk]
        idx = idx[np.argsort(cost[idx], kind="stable")]
        group = np.cumsum(cost[idx]) // batch_tokens
        cuts = np.flatnonzero(np.diff(group)) + 1
        batches.extend(np.split(idx, cuts))
    perm = rng.permutation(len(batches))
    return [batches[i] for i in perm if len(batches[i])]
