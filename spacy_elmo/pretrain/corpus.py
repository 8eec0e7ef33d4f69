"""The compact prepared corpus: token ids into a table of token strings, plus the
start offset of each sentence. One ``.npz`` file, read fully into memory
(about 4 bytes a token)."""
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple

import numpy as np

from ..bilm.chars import tokens_to_char_ids
from ..util.atomic import atomic_path, remove_stale_temps

SPECIALS = ("<S>", "</S>", "<unk>")


@dataclass
class Corpus:
    types: List[str]  # distinct token strings
    ids: np.ndarray  # (n_tokens,) int32 index into types
    offsets: np.ndarray  # (n_sentences + 1,) int64 sentence boundaries in ids

    @property
    def n_sentences(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_tokens(self) -> int:
        return int(len(self.ids))

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sentence(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def counts(self) -> np.ndarray:
        return np.bincount(self.ids, minlength=len(self.types))

    def char_table(self, max_chars: int) -> np.ndarray:
        """Character ids of every type: ``(n_types, max_chars)``."""
        return tokens_to_char_ids(self.types, max_chars)

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path, suffix=".npz")  # left by a killed earlier run
        with atomic_path(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, types=np.asarray("\n".join(self.types)), ids=self.ids, offsets=self.offsets)

    @classmethod
    def load(cls, path: Path) -> "Corpus":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"prepared corpus not found: {path}")
        try:
            with np.load(path) as data:
                types = str(data["types"]).split("\n")
                corpus = cls(types, data["ids"].astype(np.int32), data["offsets"].astype(np.int64))
        except (ValueError, KeyError, OSError) as err:
            raise ValueError(f"{path} is not a prepared corpus (make one with `prepare`): {err}") from None
        if corpus.n_tokens == 0:
            raise ValueError(f"prepared corpus {path} is empty")
        return corpus


def build_corpus(sentences: Iterable[Sequence[str]]) -> Corpus:
    """Intern token strings; sentences are kept in order."""
    index: dict = {}
    ids: List[int] = []
    offsets = [0]
    for sent in sentences:
        for tok in sent:
            i = index.get(tok)
            if i is None:
                i = index[tok] = len(index)
            ids.append(i)
        if sent:
            offsets.append(len(ids))
    if not ids:
        raise ValueError("empty corpus: no tokens found in the input text")
    types = [""] * len(index)
    for tok, i in index.items():
        types[i] = tok
    return Corpus(types, np.asarray(ids, dtype=np.int32), np.asarray(offsets, dtype=np.int64))


def concat_corpora(corpora: Sequence[Corpus]) -> Corpus:
    """One corpus of the sentences of several, in order (type tables merged)."""
    if not corpora:
        raise ValueError("empty corpus: nothing to concatenate")
    if len(corpora) == 1:
        return corpora[0]
    index: dict = {}
    ids, offsets, base = [], [np.zeros(1, np.int64)], 0
    for corpus in corpora:
        remap = np.asarray([index.setdefault(t, len(index)) for t in corpus.types], dtype=np.int32)
        ids.append(remap[corpus.ids])
        offsets.append(corpus.offsets[1:] + base)
        base += corpus.n_tokens
    types = [""] * len(index)
    for tok, i in index.items():
        types[i] = tok
    return Corpus(types, np.concatenate(ids), np.concatenate(offsets))


def build_vocab(corpus: Corpus, size: int) -> List[str]:
    """Output vocabulary: ``<S>``, ``</S>``, ``<unk>``, then the most frequent types
    (ties broken by string), ``size`` words in all."""
    if size <= len(SPECIALS):
        raise ValueError(f"vocab size must exceed {len(SPECIALS)}, got {size}")
    counts = corpus.counts()
    ranked: List[Tuple[int, str]] = sorted(
        ((-int(c), t) for t, c in zip(corpus.types, counts) if c > 0 and t not in SPECIALS)
    )
    return list(SPECIALS) + [t for _, t in ranked[: size - len(SPECIALS)]]


def target_map(corpus: Corpus, vocab: Sequence[str]) -> np.ndarray:
    """Output-vocabulary id of every corpus type (``<unk>`` = 2 for the rest)."""
    index = {w: i for i, w in enumerate(vocab)}
    return np.asarray([index.get(t, 2) for t in corpus.types], dtype=np.int64)


def unigram_perplexity(train: Corpus, dev: Corpus, vocab: Sequence[str]) -> float:
    """Add-one unigram perplexity of ``dev`` over the output vocabulary, counted like the
    biLM's: every token, plus one sentence boundary per sentence (per direction)."""
    train_t = target_map(train, vocab)[train.ids]
    counts = np.bincount(train_t, minlength=len(vocab)).astype(np.float64)
    counts[1] = train.n_sentences  # </S> (forward) and <S> (backward) alike
    counts[0] = 0
    probs = (counts + 1.0) / (counts.sum() + len(vocab))
    dev_t = target_map(dev, vocab)[dev.ids]
    nll = -np.log(probs[dev_t]).sum() - dev.n_sentences * np.log(probs[1])
    return float(np.exp(nll / (dev.n_tokens + dev.n_sentences)))
