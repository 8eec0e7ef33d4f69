"""The training batch stream: epoch after epoch of shuffled, length-bucketed batches,
with its position (epoch, batch index) saved in checkpoints for an exact resume."""
from typing import List

import numpy as np

from .batches import epoch_batches


class BatchStream:
    """Sentence indices of successive training batches. An epoch's order is built once,
    when the epoch starts (``epoch_batches``, deterministic in seed and epoch).

    lengths: tokens of every (cut) training sentence.
    batch_tokens: tokens per global batch (boundaries included).
    seed: the run's seed.
    epoch, batch_index: the position to start at (a checkpoint's).
    """

    def __init__(self, lengths: np.ndarray, batch_tokens: int, seed: int, epoch: int = 0, batch_index: int = 0) -> None:
        self.lengths = lengths
        self.batch_tokens = batch_tokens
        self.seed = seed
        self.epoch = epoch
        self.batch_index = batch_index
        self._batches: List[np.ndarray] = []
        self._batches_epoch = -1

    def seek(self, epoch: int, batch_index: int) -> None:
        """Continue from this position (e.g. a checkpoint's)."""
        self.epoch, self.batch_index = epoch, batch_index

    def _epoch(self) -> List[np.ndarray]:
        if self._batches_epoch != self.epoch:
            self._batches = epoch_batches(self.lengths, self.batch_tokens, self.seed, self.epoch)
            self._batches_epoch = self.epoch
        return self._batches

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> np.ndarray:
        while True:
            batches = self._epoch()
            if self.batch_index < len(batches):
                batch = batches[self.batch_index]
                self.batch_index += 1
                return batch
            self.epoch, self.batch_index = self.epoch + 1, 0
