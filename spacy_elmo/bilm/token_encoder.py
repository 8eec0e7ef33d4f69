"""Context-independent token layer: character embedding, CNN, highway, projection,
and a bounded cache of its outputs for inference."""
from collections import OrderedDict
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from .chars import PAD_CHAR
from .conv_pool import conv_max_pool

PAD_ID = PAD_CHAR + 1  # in-word padding character, after the +1 shift


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
        self.widest = max(int(w) for w, _ in filters)

    def cnn(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Max-pooled, activated CNN features, shape ``(n_tokens, F)``.

        Tokens are grouped by length and each group's trailing padding characters
        are cut down to ``widest`` filter width (see ``trimmed_widths``): exact,
        since the windows dropped repeat an all-padding window that remains.
        """
        widths = trimmed_widths(char_ids, self.widest)
        if char_ids.shape[0] == 0:
            return self.activation(self._cnn(char_ids))
        buckets = torch.clamp((widths + 7) // 8 * 8, max=char_ids.shape[1])
        order = torch.argsort(buckets, stable=True)
        bucket_widths, sizes = torch.unique_consecutive(buckets[order], return_counts=True)
        parts: List[torch.Tensor] = []
        start = 0
        for width, size in zip(bucket_widths.tolist(), sizes.tolist()):
            parts.append(self._cnn(char_ids[order[start : start + size], :width]))
            start += size
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order), device=order.device)
        return self.activation(torch.cat(parts)[inverse])

    def _cnn(self, char_ids: torch.Tensor) -> torch.Tensor:
        return conv_max_pool(char_ids, self.char_embedding, self.convs)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        x = self.cnn(char_ids)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x)


def trimmed_widths(char_ids: torch.Tensor, widest: int) -> torch.Tensor:
    """Per token, the fewest leading char slots that give the same CNN output: up to
    the last non-padding character plus ``widest`` padding slots (``(n,)`` int64).

    A window of any width that starts past the last real character sees only
    padding and so has the same value as any other such window; with ``widest``
    padding slots kept, one of them remains for every filter width.
    """
    slots = torch.arange(1, char_ids.shape[1] + 1, device=char_ids.device)
    last = ((char_ids != PAD_ID) * slots).amax(dim=1) if char_ids.shape[0] else slots[:0]
    return torch.clamp(last + widest, min=widest, max=char_ids.shape[1])


class TokenCache:
    """A bounded LRU memory of token-layer outputs for inference, keyed by each
    token's character-id row (its bytes). Exact: a hit returns the very vector the
    encoder produced for that row.

    max_entries: tokens kept (memory: max_entries x P floats).

    The cache forgets everything when the weights it was filled with change (a
    parameter replaced, moved, or updated in place).
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = int(max_entries)
        self._slots: "OrderedDict[bytes, int]" = OrderedDict()
        self._table: Optional[torch.Tensor] = None
        self._stamp: Tuple = ()
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        self._slots.clear()
        self._table = None

    def __len__(self) -> int:
        return len(self._slots)

    def __call__(
        self, char_ids: torch.Tensor, encode: Callable[[torch.Tensor], torch.Tensor], stamp: Tuple
    ) -> torch.Tensor:
        """Outputs for distinct rows ``char_ids`` (n, chars): cached ones looked up,
        the rest computed with ``encode`` and remembered. Call without autograd.

        ``char_ids`` are best given on the host: the keys are their bytes; the
        outputs are on the device ``encode`` computes on."""
        if stamp != self._stamp:
            self.clear()
            self._stamp = stamp
        keys = [row.tobytes() for row in char_ids.cpu().numpy()]
        found = [self._slots.get(key) for key in keys]
        hit_rows = [i for i, slot in enumerate(found) if slot is not None]
        miss_rows = [i for i, slot in enumerate(found) if slot is None]
        self.hits += len(hit_rows)
        self.misses += len(miss_rows)
        for i in hit_rows:  # most recently used first, before any eviction
            self._slots.move_to_end(keys[i])
        if not miss_rows:
            out = self._table[torch.tensor(found, device=self._table.device)]  # type: ignore[union-attr,index]
        else:
            computed = encode(char_ids[torch.tensor(miss_rows, device=char_ids.device)])
            miss_index = torch.tensor(miss_rows, device=computed.device)
            out = computed.new_empty(len(keys), computed.shape[1])
            out[miss_index] = computed
            if hit_rows:
                hit_slots = torch.tensor([found[i] for i in hit_rows], device=computed.device)
                out[torch.tensor(hit_rows, device=computed.device)] = self._table[hit_slots]  # type: ignore[index]
            self._store([keys[i] for i in miss_rows], computed)
        return out

    def _store(self, keys: List[bytes], values: torch.Tensor) -> None:
        keys, values = keys[-self.max_entries :], values[-self.max_entries :]
        if not keys:
            return
        with torch.inference_mode(False):  # a plain tensor: usable from no_grad code later
            if self._table is None or self._table.dtype != values.dtype:
                self._slots.clear()
                self._table = values.new_empty(min(self.max_entries, max(1024, 2 * len(keys))), values.shape[1])
            needed = min(self.max_entries, len(self._slots) + len(keys))
            if needed > self._table.shape[0]:
                grown = self._table.new_empty(min(self.max_entries, max(needed, 2 * self._table.shape[0])), values.shape[1])
                grown[: self._table.shape[0]] = self._table
                self._table = grown
        slots = []
        for key in keys:
            if len(self._slots) < self._table.shape[0]:
                slot = len(self._slots)
            else:
                _, slot = self._slots.popitem(last=False)
            self._slots[key] = slot
            slots.append(slot)
        self._table[torch.tensor(slots, device=values.device)] = values
