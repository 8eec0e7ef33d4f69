"""The language-model loss of a batch and held-out perplexity.

The forward LSTM's top layer predicts the next token (then ``</S>``), the backward
one the previous token (after ``<S>``); both share the softmax. Perplexity is exp of
the mean forward and backward negative log-likelihood per predicted token.
"""
import math
import sys
from dataclasses import fields, replace
from typing import Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..bilm import ElmoBiLM
from .batches import LMBatch, make_batch
from .corpus import Corpus
from .lm_forward import fast_lm_loss


class BiLMLoss(nn.Module):
    """Summed forward and backward negative log-likelihoods of a batch (shared softmax).

    bilm (ElmoBiLM): the model, with its softmax.
    dropout (float): dropout on the top layer before the softmax (training only).
    """

    def __init__(self, bilm: ElmoBiLM, dropout: float) -> None:
        super().__init__()
        self.bilm = bilm
        self.dropout = dropout

    def forward(self, batch: LMBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        if batch.type_char_ids is not None:
            return fast_lm_loss(self.bilm, batch, self.dropout, self.training)
        top = self.bilm.forward_with_boundaries(batch.char_ids, batch.lengths)[-1]
        P = top.shape[1] // 2
        h_fwd = F.dropout(top[batch.fwd_rows, :P], self.dropout, self.training)
        h_bwd = F.dropout(top[batch.bwd_rows, P:], self.dropout, self.training)
        softmax = self.bilm.softmax
        assert softmax is not None
        # The softmax in float32 also under amp (AdaptiveLogSoftmaxWithLoss mixes dtypes there).
        with torch.autocast(top.device.type, enabled=False):
            return softmax.nll(h_fwd.float(), batch.fwd_targets), softmax.nll(h_bwd.float(), batch.bwd_targets)


def batch_to(batch: LMBatch, device: Optional[torch.device]) -> LMBatch:
    """The batch's tensors on ``device`` (the same batch on the CPU or for None)."""
    if device is None or device.type == "cpu":
        return batch
    moved = {f.name: getattr(batch, f.name).to(device) for f in fields(batch)
             if isinstance(getattr(batch, f.name), torch.Tensor)}
    return replace(batch, **moved)


def evaluate(bilm: ElmoBiLM, corpus: Corpus, targets: np.ndarray, max_sentences: int = 0,
             batch_tokens: int = 4096, device: Optional[torch.device] = None, progress: bool = False) -> float:
    """Held-out perplexity: exp of the mean forward and backward NLL per predicted token
    (full softmax over the output vocabulary; </S> and <S> once per sentence).

    targets: output-vocabulary id of every corpus type (``corpus.target_map``).
    max_sentences: evaluate the first this many sentences (0: all).
    batch_tokens: tokens per evaluation batch (boundaries included).
    progress: show a progress bar (tokens/s) on stderr.
    """
    from tqdm import tqdm

    offsets = corpus.offsets
    n = corpus.n_sentences if not max_sentences else min(max_sentences, corpus.n_sentences)
    lengths = np.diff(offsets)[:n]
    order = np.argsort(-lengths, kind="stable")
    char_table = corpus.char_table(bilm.max_chars)
    loss = BiLMLoss(bilm, 0.0).eval()
    total, count = 0.0, 0
    bar = tqdm(total=int(lengths.sum()), desc="Perplexity", unit=" tokens", unit_scale=True, mininterval=1.0,
               file=sys.stderr, disable=not progress)
    with bar, torch.no_grad():
        start = 0
        while start < n:
            cost = np.cumsum(lengths[order[start:]] + 2)
            end = start + max(1, int(np.searchsorted(cost, batch_tokens, side="right")))
            batch = batch_to(make_batch(corpus, offsets, order[start:end], char_table, targets), device)
            nll_f, nll_b = loss(batch)
            total += float(nll_f) + float(nll_b)
            count += batch.n_targets
            bar.update(int(lengths[order[start:end]].sum()))
            start = end
    return math.exp(total / max(1, count))
