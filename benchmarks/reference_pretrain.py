"""The pretraining step of commit 778aaa6, kept as the yardstick of ``bench_pretrain.py``.

It is that commit's code path for one optimizer step, copied here so that later changes
of the package cannot move the yardstick: the epoch's batch order rebuilt at every step
(``Trainer._next_batch``), ``make_batch``, ``ElmoBiLM.forward_with_boundaries`` (distinct
char rows found by NumPy on their bytes, the char CNN on trimmed slots grouped in buckets,
highways, projection; the packing plan; each LSTM layer as plain autograd over a Python
loop of time steps; every layer of every ``<S> tokens </S>`` row concatenated and
stacked), ``BiLMLoss`` (dropout on the top layer's rows, two softmax calls), then
backward, gradient clipping and Adam. It runs on the parameters of an ``ElmoBiLM``
(its own copy, with its own optimizer) and uses no other code of the package.
"""
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

PAD_ID = 261  # in-word padding character (260), +1 shifted


def epoch_batches(lengths: np.ndarray, batch_tokens: int, seed: int, epoch: int) -> List[np.ndarray]:
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


def make_batch(ids: np.ndarray, offsets: np.ndarray, sentences: np.ndarray, char_table: np.ndarray,
               targets: np.ndarray) -> Dict[str, Any]:
    starts, ends = offsets[sentences], offsets[sentences + 1]
    lengths = (ends - starts).astype(np.int64)
    token_pos = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)])
    type_ids = ids[token_pos]
    tok_targets = targets[type_ids]
    base = np.cumsum(lengths + 2) - (lengths + 2)
    sent_of_tok = np.repeat(np.arange(len(lengths)), lengths)
    pos_in_sent = np.arange(len(token_pos)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    tok_rows = base[sent_of_tok] + 1 + pos_in_sent
    return {
        "char_ids": torch.from_numpy(char_table[type_ids]),
        "lengths": [int(n) for n in lengths],
        "fwd_rows": torch.from_numpy(np.concatenate([tok_rows - 1, base + lengths]).astype(np.int64)),
        "fwd_targets": torch.from_numpy(np.concatenate([tok_targets, np.full(len(lengths), 1)]).astype(np.int64)),
        "bwd_rows": torch.from_numpy(np.concatenate([tok_rows + 1, base + 1]).astype(np.int64)),
        "bwd_targets": torch.from_numpy(np.concatenate([tok_targets, np.full(len(lengths), 0)]).astype(np.int64)),
    }


def unique_rows(char_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    rows = np.ascontiguousarray(char_ids.numpy())
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return char_ids[torch.from_numpy(first)], torch.from_numpy(inverse.reshape(-1))


def token_layer(enc: nn.Module, char_ids: torch.Tensor) -> torch.Tensor:
    """CharTokenEncoder.forward of 778aaa6 on the encoder's parameters."""
    slots = torch.arange(1, char_ids.shape[1] + 1)
    last = ((char_ids != PAD_ID) * slots).amax(dim=1)
    widths = torch.clamp(last + enc.widest, min=enc.widest, max=char_ids.shape[1])
    buckets = torch.clamp((widths + 7) // 8 * 8, max=char_ids.shape[1])
    order = torch.argsort(buckets, stable=True)
    bucket_widths, sizes = torch.unique_consecutive(buckets[order], return_counts=True)
    parts, start = [], 0
    for width, size in zip(bucket_widths.tolist(), sizes.tolist()):
        emb = enc.char_embedding(char_ids[order[start : start + size], :width]).transpose(1, 2)
        parts.append(torch.cat([conv(emb).amax(dim=2) for conv in enc.convs], dim=1))
        start += size
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order))
    x = enc.activation(torch.cat(parts)[inverse])
    for hw in enc.highways:
        g = torch.sigmoid(hw.gate(x))
        x = g * F.relu(hw.transform(x)) + (1.0 - g) * x
    return enc.projection(x)


def make_plan(lengths: np.ndarray) -> Dict[str, Any]:
    """packing.make_plan of 778aaa6 with keep_boundaries."""
    n_sents, n_tokens = len(lengths), int(lengths.sum())
    steps = lengths + 2
    order = np.argsort(-steps, kind="stable")
    rank = np.empty(n_sents, dtype=np.int64)
    rank[order] = np.arange(n_sents)
    sorted_steps = steps[order]
    batch_sizes = (sorted_steps[None, :] > np.arange(sorted_steps[0])[:, None]).sum(axis=1)
    step_start = np.concatenate([[0], np.cumsum(batch_sizes)[:-1]])
    token_start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
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
    t = torch.from_numpy
    return {"batch_sizes": [int(b) for b in batch_sizes], "src_fwd": t(src_fwd), "src_bwd": t(src_bwd),
            "out_rows": t(rows), "out_fwd": t(packed_fwd), "out_bwd": t(packed_bwd)}


def lstm_layer(layer: nn.Module, x: torch.Tensor, batch_sizes: Sequence[int]) -> torch.Tensor:
    """ProjectedLstmLayer.forward of 778aaa6 (autograd over the step loop)."""
    C = layer.cell_dim
    x_gates = torch.baddbmm(layer.bias.unsqueeze(1), x, layer.weight_ih)
    h = x.new_zeros(2, batch_sizes[0], layer.projection_dim)
    c = x.new_zeros(2, batch_sizes[0], C)
    outputs = []
    for x_step in x_gates.split(list(batch_sizes), dim=1):
        n = x_step.shape[1]
        z = torch.baddbmm(x_step, h[:, :n], layer.weight_hh)
        ifo = torch.sigmoid(z[..., : 3 * C])
        c = ifo[..., C : 2 * C] * c[:, :n] + ifo[..., :C] * torch.tanh(z[..., 3 * C :])
        if layer.cell_clip is not None:
            c = torch.clamp(c, -layer.cell_clip, layer.cell_clip)
        h = torch.bmm(ifo[..., 2 * C :] * torch.tanh(c), layer.weight_proj)
        if layer.proj_clip is not None:
            h = torch.clamp(h, -layer.proj_clip, layer.proj_clip)
        outputs.append(h)
    return torch.cat(outputs, dim=1)


def forward_with_boundaries(bilm: nn.Module, char_ids: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    lengths = np.asarray(lengths, dtype=np.int64)
    rows = torch.cat([char_ids, bilm.boundary_char_ids], dim=0)
    unique, inverse = unique_rows(rows)
    table = token_layer(bilm.token_encoder, unique)[inverse]
    plan = make_plan(lengths)
    x = torch.stack([table.index_select(0, plan["src_fwd"]), table.index_select(0, plan["src_bwd"])])
    token = table.index_select(0, plan["out_rows"])
    layers = [torch.cat([token, token], dim=1)]
    for i, layer in enumerate(bilm.lstm.layers):
        h = lstm_layer(layer, x, plan["batch_sizes"])
        if i > 0 and bilm.lstm.use_skip_connections:
            h = h + x
        x = h
        layers.append(torch.cat([h[0].index_select(0, plan["out_fwd"]), h[1].index_select(0, plan["out_bwd"])], dim=1))
    return torch.stack(layers)


def learning_rate(step: int, training: Dict[str, Any]) -> float:
    lr, warmup, total = float(training["lr"]), int(training["warmup_steps"]), int(training["max_steps"])
    scale = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    decay = 1.0 - (1.0 - float(training["final_lr_ratio"])) * min(1.0, step / max(1, total))
    return lr * scale * decay


class ReferenceStep:
    """One training step of 778aaa6 (single process, CPU) on ``bilm``'s parameters.

    bilm: an ``ElmoBiLM`` with a softmax (this step trains it in place).
    training: the ``[training]`` section of a pretraining config.
    ids, offsets, lengths: the corpus token ids, the cut sentence offsets and lengths.
    char_table, targets: char ids and output-vocabulary id of every corpus type.
    amp: ``training.amp`` as 778aaa6 read it: "none" (float32) or "bf16" (the forward pass under
        bf16 autocast, the softmax in float32).
    """

    def __init__(self, bilm: nn.Module, training: Dict[str, Any], ids: np.ndarray, offsets: np.ndarray,
                 lengths: np.ndarray, char_table: np.ndarray, targets: np.ndarray, amp: str = "none") -> None:
        if amp not in ("none", "bf16"):
            raise ValueError(f"amp must be 'none' or 'bf16', not {amp!r}")
        self.bilm, self.training, self.amp = bilm, training, amp
        self.ids, self.offsets, self.lengths, self.char_table, self.targets = ids, offsets, lengths, char_table, targets
        self.optimizer = torch.optim.Adam(bilm.parameters(), lr=float(training["lr"]))
        self.step, self.epoch, self.batch_index = 0, 0, 0

    def next_batch(self) -> np.ndarray:
        """Trainer._next_batch of 778aaa6: the epoch's order rebuilt at every call."""
        while True:
            batches = epoch_batches(self.lengths, int(self.training["batch_tokens"]), int(self.training["seed"]), self.epoch)
            if self.batch_index < len(batches):
                self.batch_index += 1
                return batches[self.batch_index - 1]
            self.epoch, self.batch_index = self.epoch + 1, 0

    def __call__(self, sentences: np.ndarray) -> float:
        n_global = 2 * int((self.lengths[sentences] + 1).sum())
        batch = make_batch(self.ids, self.offsets, sentences, self.char_table, self.targets)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.training)
        self.bilm.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.amp == "bf16"):
            top = forward_with_boundaries(self.bilm, batch["char_ids"], batch["lengths"])[-1]
            P = top.shape[1] // 2
            dropout = float(self.training["dropout"])
            h_fwd = F.dropout(top[batch["fwd_rows"], :P], dropout, True)
            h_bwd = F.dropout(top[batch["bwd_rows"], P:], dropout, True)
            softmax = self.bilm.softmax.proj
            with torch.autocast("cpu", enabled=False):  # 778aaa6 kept the softmax in float32 under amp
                total = (-softmax(h_fwd.float(), batch["fwd_targets"]).output.sum()
                         - softmax(h_bwd.float(), batch["bwd_targets"]).output.sum())
        (total / n_global).backward()
        torch.nn.utils.clip_grad_norm_(self.bilm.parameters(), float(self.training["grad_clip"]))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return float(total.detach())
