"""ElmoBiLM: the whole biLM as one PyTorch module (characters in, layers out)."""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from .chars import bos_char_ids, eos_char_ids, tokens_to_char_ids
from .lstm import ProjectedLstmStack
from .options import Options, clip_value, n_output_layers, output_dim, validate_options
from .packing import make_plan
from .softmax import build_softmax
from .token_encoder import CharTokenEncoder, TokenCache

PathLike = Union[str, os.PathLike]
DEFAULT_TOKEN_CACHE = 50_000


def unique_rows(char_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Distinct rows of ``char_ids`` and the index of each row's distinct row.

    On CPU via NumPy on whole rows as bytes (``torch.unique(dim=0)`` compares rows
    one by one there)."""
    if char_ids.device.type != "cpu":
        return torch.unique(char_ids, dim=0, return_inverse=True)
    rows = np.ascontiguousarray(char_ids.numpy())
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return char_ids[torch.from_numpy(first)], torch.from_numpy(inverse.reshape(-1))


class ElmoBiLM(nn.Module):
    """The ELMo bidirectional language model.

    options: hyper-parameters in the AllenNLP / bilm-tf ``options.json`` form.
    vocab_size: size of the output vocabulary of the language-model softmax
        (0: no softmax, as in published weight files).
    softmax_options: see ``bilm.softmax.build_softmax``.

    ``forward(char_ids, lengths)`` takes the flat tokens of a batch of sentences,
    ``(N, max_chars)`` int64 character ids, and their ``lengths`` (S,) summing to N,
    and returns ``(n_layers + 1, N, 2P)``: layer 0 is the token layer duplicated,
    layer k the [forward; backward] output of LSTM layer k. Every sentence runs as
    ``<S> tokens </S>`` from a zero state, alone in effect: its output does not
    depend on the rest of the batch.

    In inference (eval mode, autograd off) the token layer of recently seen tokens
    comes from a bounded cache (``set_token_cache``); training never uses it.
    """

    def __init__(
        self,
        options: Options,
        *,
        vocab_size: int = 0,
        softmax_options: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.options = validate_options(options)
        cnn, lstm = self.options["char_cnn"], self.options["lstm"]
        self.max_chars = int(cnn["max_characters_per_token"])
        self.token_encoder = CharTokenEncoder(
            char_dim=int(cnn["embedding"]["dim"]),
            filters=cnn["filters"],
            n_highway=int(cnn["n_highway"]),
            projection_dim=int(lstm["projection_dim"]),
            activation=cnn["activation"],
            n_characters=max(int(cnn["n_characters"]), 262),
        )
        self.lstm = ProjectedLstmStack(
            input_dim=int(lstm["projection_dim"]),
            cell_dim=int(lstm["dim"]),
            projection_dim=int(lstm["projection_dim"]),
            n_layers=int(lstm["n_layers"]),
            cell_clip=clip_value(lstm["cell_clip"]),
            proj_clip=clip_value(lstm["proj_clip"]),
            use_skip_connections=bool(lstm["use_skip_connections"]),
        )
        self.vocab_size = int(vocab_size)
        self.softmax_options = dict(softmax_options or {"type": "full"})
        self.softmax: Optional[nn.Module] = (
            build_softmax(int(lstm["projection_dim"]), self.vocab_size, self.softmax_options)
            if self.vocab_size > 0
            else None
        )
        boundary = torch.from_numpy(np.stack([bos_char_ids(self.max_chars), eos_char_ids(self.max_chars)]))
        self.register_buffer("boundary_char_ids", boundary, persistent=False)
        self.token_cache: Optional[TokenCache] = TokenCache(DEFAULT_TOKEN_CACHE)

    def set_token_cache(self, max_entries: int) -> None:
        """Keep the token layer of up to ``max_entries`` distinct tokens for
        inference (memory: max_entries x P floats); 0 turns the cache off."""
        self.token_cache = TokenCache(max_entries) if max_entries > 0 else None

    @property
    def output_dim(self) -> int:
        return output_dim(self.options)

    @property
    def n_layers(self) -> int:
        """Number of output layers (LSTM layers + the token layer)."""
        return n_output_layers(self.options)

    @property
    def device(self) -> torch.device:
        return self.boundary_char_ids.device

    def config(self) -> Dict[str, Any]:
        """Everything needed to rebuild the module (the options plus the softmax)."""
        cfg = dict(self.options)
        cfg["vocab_size"] = self.vocab_size
        cfg["softmax"] = dict(self.softmax_options)
        return cfg

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "ElmoBiLM":
        options = {k: v for k, v in config.items() if k in ("lstm", "char_cnn")}
        return cls(options, vocab_size=int(config.get("vocab_size", 0)), softmax_options=config.get("softmax"))

    def embed_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token layer (char CNN, highway, projection) for rows of char ids: ``(n, P)``.

        Repeated tokens are encoded once; in inference, cached tokens not at all.
        """
        if char_ids.shape[0] == 0:
            return self.token_encoder.projection.weight.new_zeros(0, self.options["lstm"]["projection_dim"])
        unique, inverse = unique_rows(char_ids)
        if self.token_cache is not None and not self.training and not torch.is_grad_enabled():
            stamp = tuple((p.data_ptr(), p._version, p.dtype) for p in self.token_encoder.parameters())
            return self.token_cache(unique, self.token_encoder, stamp)[inverse]
        return self.token_encoder(unique)[inverse]

    def _run(self, char_ids: torch.Tensor, lengths: Sequence[int], keep_boundaries: bool) -> torch.Tensor:
        lengths = np.asarray([int(n) for n in lengths], dtype=np.int64)
        if char_ids.dim() != 2 or char_ids.shape[1] != self.max_chars:
            raise ValueError(
                f"ElmoBiLM: expected char ids of shape (n_tokens, {self.max_chars}), got {tuple(char_ids.shape)}"
            )
        if int(lengths.sum()) != char_ids.shape[0] or (lengths < 0).any():
            raise ValueError(
                f"ElmoBiLM: sentence lengths sum to {int(lengths.sum())} but {char_ids.shape[0]} tokens were given"
            )
        n_rows = int(lengths.sum()) + (2 * len(lengths) if keep_boundaries else 0)
        if len(lengths) == 0:
            return self.boundary_char_ids.new_zeros((self.n_layers, 0, self.output_dim), dtype=torch.float32)
        char_ids = char_ids.to(self.device)
        table = self.embed_tokens(torch.cat([char_ids, self.boundary_char_ids], dim=0))
        plan = make_plan(lengths, keep_boundaries, self.device)
        x = torch.stack([table.index_select(0, plan.src_fwd), table.index_select(0, plan.src_bwd)])
        token_layer = table.index_select(0, plan.out_rows)
        layers = [torch.cat([token_layer, token_layer], dim=1)]
        for h in self.lstm(x, plan.batch_sizes):
            layers.append(torch.cat([h[0].index_select(0, plan.out_fwd), h[1].index_select(0, plan.out_bwd)], dim=1))
        out = torch.stack(layers)
        assert out.shape[1] == n_rows
        return out

    def forward(self, char_ids: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        return self._run(char_ids, lengths, keep_boundaries=False)

    def forward_with_boundaries(self, char_ids: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """Like forward, but each sentence's rows are ``<S> tokens </S>``: ``(L, N + 2S, 2P)``."""
        return self._run(char_ids, lengths, keep_boundaries=True)

    def char_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """Flat character ids of the tokens of ``sentences``."""
        flat = [tok for sent in sentences for tok in sent]
        return torch.from_numpy(tokens_to_char_ids(flat, self.max_chars))

    def embed_sentences(
        self, sentences: Sequence[Sequence[str]], *, batch_tokens: int = 4096
    ) -> List[np.ndarray]:
        """All layers of each sentence: a list of float32 arrays ``(L, n_tokens, 2P)``.

        Sentences are batched by length (about ``batch_tokens`` tokens a batch); the
        result does not depend on the batching.
        """
        results: List[Optional[np.ndarray]] = [None] * len(sentences)
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                start = 0
                while start < len(order):
                    end, total = start, 0
                    while end < len(order) and (end == start or total + len(sentences[order[end]]) + 2 <= batch_tokens):
                        total += len(sentences[order[end]]) + 2
                        end += 1
                    batch = [sentences[i] for i in order[start:end]]
                    lengths = [len(s) for s in batch]
                    out = self.forward(self.char_ids(batch), lengths).float().cpu().numpy()
                    offset = 0
                    for i, n in zip(order[start:end], lengths):
                        results[i] = np.ascontiguousarray(out[:, offset : offset + n])
                        offset += n
                    start = end
        finally:
            self.train(was_training)
        return [r for r in results]  # type: ignore[misc]

    # Weight files -------------------------------------------------------------------

    @classmethod
    def from_allennlp(cls, options_path: PathLike, weights_path: PathLike) -> "ElmoBiLM":
        """Load published weights: an ``options.json`` and a bilm-tf / AllenNLP HDF5 file."""
        from .allennlp import load_allennlp

        return load_allennlp(cls, Path(options_path), Path(weights_path))

    def to_allennlp(self, out_dir: PathLike) -> None:
        """Write ``options.json`` + ``weights.hdf5`` in the published layout."""
        from .allennlp import save_allennlp

        save_allennlp(self, Path(out_dir))

    def save(self, path: PathLike, *, vocab: Optional[Sequence[str]] = None, half: bool = False) -> None:
        """Write the project's own format: ``config.json``, ``model.safetensors``
        and (with a softmax) ``vocab.txt``. The directory is replaced atomically; its other
        files (e.g. a model card README.md) are kept."""
        from .serialize import save_elmo

        save_elmo(self, Path(path), vocab=vocab, half=half)

    @classmethod
    def load(cls, path: PathLike) -> "ElmoBiLM":
        """Load a directory written by ``save`` (or by the pretraining command)."""
        from .serialize import load_elmo

        return load_elmo(cls, Path(path))
