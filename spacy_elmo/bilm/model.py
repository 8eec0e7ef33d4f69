"""ElmoBiLM: the whole biLM as one PyTorch module (characters in, layers out)."""
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from .chars import bos_char_ids, eos_char_ids, tokens_to_char_ids
from .lstm import ProjectedLstmStack
from .allennlp import read_allennlp, write_allennlp
from .config import BiLMConfig
from .packing import make_plan
from .precision import autocast_for, check_device, check_precision, lstm_products
from .serialize import (
    WEIGHTS_NAME,
    check_state,
    config_from_bytes,
    read_model_dir,
    save_model_dir,
    state_from_bytes,
    state_to_bytes,
    storage_dtype,
    write_model_files,
)
from .softmax import build_softmax
from .tf32 import no_tf32
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

    config: a ``BiLMConfig``, or hyper-parameters in the AllenNLP / bilm-tf
        ``options.json`` form (read with ``BiLMConfig.from_options``).
    vocab_size: with an options dict, the output vocabulary of the language-model
        softmax (0: no softmax, as in published weight files).
    softmax_options: with an options dict, see ``bilm.softmax.build_softmax``.

    ``forward(char_ids, lengths)`` takes the flat tokens of a batch of sentences,
    ``(N, max_chars)`` int64 character ids, and their ``lengths`` (S,) summing to N,
    and returns ``(n_layers + 1, N, 2P)``: layer 0 is the token layer duplicated,
    layer k the [forward; backward] output of LSTM layer k. Every sentence runs as
    ``<S> tokens </S>`` from a zero state, alone in effect: its output does not
    depend on the rest of the batch. Pass ``char_ids`` on the CPU: only the distinct
    tokens go to the model's device. On a GPU, float32 runs with TF32 off
    (``allow_tf32 = True`` trades that exactness for speed).

    In inference (eval mode, autograd off) the token layer of recently seen tokens
    comes from a bounded cache (``set_token_cache``); training never uses it.
    ``precision`` ("float32" by default, "int8" on the CPU, "bf16" or "fp16" on CUDA:
    see ``bilm.precision``) sets how inference computes; with autograd on it is
    always float32. The output is float32 in every precision.
    """

    def __init__(
        self,
        config: Union[BiLMConfig, Mapping[str, Any]],
        *,
        vocab_size: int = 0,
        softmax_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__()
        if not isinstance(config, BiLMConfig):
            config = BiLMConfig.from_options(config).with_head(vocab_size, softmax_options)
        elif vocab_size or softmax_options is not None:
            raise ValueError("ElmoBiLM: vocab_size and softmax_options go with an options dict; use BiLMConfig.with_head")
        self.config = config
        self.max_chars = config.max_characters_per_token
        self.token_encoder = CharTokenEncoder(
            char_dim=config.char_dim,
            filters=config.filters,
            n_highway=config.n_highway,
            projection_dim=config.projection_dim,
            activation=config.activation,
            n_characters=config.n_char_rows,
        )
        self.lstm = ProjectedLstmStack(
            input_dim=config.projection_dim,
            cell_dim=config.cell_dim,
            projection_dim=config.projection_dim,
            n_layers=config.n_layers,
            cell_clip=config.cell_clip_value,
            proj_clip=config.proj_clip_value,
            use_skip_connections=config.use_skip_connections,
        )
        self.softmax: Optional[nn.Module] = (
            build_softmax(config.projection_dim, config.vocab_size, dict(config.softmax)) if config.vocab_size > 0 else None
        )
        boundary = torch.from_numpy(np.stack([bos_char_ids(self.max_chars), eos_char_ids(self.max_chars)]))
        self._boundary_host = boundary
        self.register_buffer("boundary_char_ids", boundary.clone(), persistent=False)
        self.token_cache: Optional[TokenCache] = TokenCache(DEFAULT_TOKEN_CACHE)
        self.allow_tf32 = False
        self._precision = "float32"

    @property
    def precision(self) -> str:
        """How inference computes: "float32" (exact), "int8" (CPU, dynamic
        quantization), "bf16" or "fp16" (CUDA, autocast; the cell state stays float32)."""
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        self._precision = check_precision(value)

    def set_token_cache(self, max_entries: int) -> None:
        """Keep the token layer of up to ``max_entries`` distinct tokens for
        inference (memory: max_entries x P floats); 0 turns the cache off."""
        self.token_cache = TokenCache(max_entries) if max_entries > 0 else None

    @property
    def options(self) -> Dict[str, Any]:
        """The hyper-parameters in the ``options.json`` form (a new dict)."""
        return self.config.to_options()

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def output_dim(self) -> int:
        return self.config.output_dim

    @property
    def n_layers(self) -> int:
        """Number of output layers (LSTM layers + the token layer)."""
        return self.config.n_output_layers

    @property
    def device(self) -> torch.device:
        return self.boundary_char_ids.device

    def embed_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token layer (char CNN, highway, projection) for rows of char ids: ``(n, P)``
        on the model's device.

        Repeated tokens are encoded once; in inference, cached tokens not at all (the
        cache is keyed on the host rows, so CPU ids never make a round trip).
        """
        if char_ids.shape[0] == 0:
            return self.token_encoder.projection.weight.new_zeros(0, self.config.projection_dim)
        unique, inverse = unique_rows(char_ids)
        inverse = inverse.to(self.device)
        if self.token_cache is not None and not self.training and not torch.is_grad_enabled():
            stamp = (self._inference_precision(),) + tuple(
                (p.data_ptr(), p._version, p.dtype) for p in self.token_encoder.parameters()
            )
            return self.token_cache(unique, self._encode, stamp)[inverse]
        return self._encode(unique)[inverse]

    def _encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        return self.token_encoder(char_ids.to(self.device))

    def _inference_precision(self) -> str:
        """The precision this call computes in: ``precision`` with autograd off, else float32."""
        if self._precision == "float32" or torch.is_grad_enabled():
            return "float32"
        check_device(self._precision, self.device)
        return self._precision

    def _run(self, char_ids: torch.Tensor, lengths: Sequence[int], keep_boundaries: bool) -> torch.Tensor:
        precision = self._inference_precision()
        with autocast_for(precision, self.device):
            if self.device.type == "cuda" and not self.allow_tf32:
                with no_tf32():
                    out = self._run_layers(char_ids, lengths, keep_boundaries, precision)
            else:
                out = self._run_layers(char_ids, lengths, keep_boundaries, precision)
        return out.float() if precision != "float32" else out

    def _run_layers(self, char_ids: torch.Tensor, lengths: Sequence[int], keep_boundaries: bool,
                    precision: str) -> torch.Tensor:
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
        boundary = self._boundary_host if char_ids.device.type == "cpu" else self.boundary_char_ids.to(char_ids.device)
        table = self.embed_tokens(torch.cat([char_ids, boundary], dim=0))
        plan = make_plan(lengths, keep_boundaries, self.device)
        x = torch.stack([table.index_select(0, plan.src_fwd), table.index_select(0, plan.src_bwd)])
        token_layer = table.index_select(0, plan.out_rows)
        layers = [torch.cat([token_layer, token_layer], dim=1)]
        for h in self.lstm(x, plan.batch_sizes, lstm_products(precision)):
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

    # Weights and files ----------------------------------------------------------------

    def load_state(self, state: Mapping[str, torch.Tensor], source: str) -> None:
        """Load a state dict (float32 or float16 tensors), checking every name and
        shape first; WeightsError names ``source`` and the first mismatch."""
        check_state(state, self.state_dict(), source)
        self.load_state_dict({k: v.float() for k, v in state.items()})

    def to_bytes(self, *, half: bool = False, dtype: Optional[str] = None) -> bytes:
        """The whole module as bytes (safetensors with the config in its metadata); weights
        in ``dtype`` ("float32", "float16" or "int8"; ``half`` is "float16")."""
        return state_to_bytes(self.state_dict(), storage_dtype(half, dtype), config=self.config)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "ElmoBiLM bytes") -> "ElmoBiLM":
        """Rebuild a module written by ``to_bytes`` (on the CPU)."""
        model = cls(config_from_bytes(data, source))
        model.load_state(state_from_bytes(data, source), source)
        return model

    @classmethod
    def from_allennlp(cls, options_path: PathLike, weights_path: PathLike) -> "ElmoBiLM":
        """Load published weights: an ``options.json`` and a bilm-tf / AllenNLP HDF5 file."""
        config, state = read_allennlp(Path(options_path), Path(weights_path))
        model = cls(config)
        model.load_state(state, str(weights_path))
        return model

    def to_allennlp(self, out_dir: PathLike) -> None:
        """Write ``options.json`` + ``weights.hdf5`` in the published layout."""
        write_allennlp(self.config, self.state_dict(), Path(out_dir))

    def save(
        self, path: PathLike, *, vocab: Optional[Sequence[str]] = None, half: bool = False, dtype: Optional[str] = None
    ) -> None:
        """Write the project's own format: ``config.json``, ``model.safetensors``
        and (with a softmax) ``vocab.txt``, weights in ``dtype`` ("float32", "float16" or
        "int8", see ``bilm.int8``; ``half`` is "float16"). The directory is replaced
        atomically; its other files (e.g. a model card README.md) are kept."""
        save_model_dir(Path(path), self.config, self.state_dict(), vocab=vocab, dtype=storage_dtype(half, dtype))

    def write_files(
        self, path: PathLike, *, vocab: Optional[Sequence[str]] = None, half: bool = False, dtype: Optional[str] = None
    ) -> None:
        """Like ``save``, but into a directory that keeps its other files (e.g. the
        checkpoints of a pretraining run), each model file replaced atomically."""
        write_model_files(Path(path), self.config, self.state_dict(), vocab=vocab, dtype=storage_dtype(half, dtype))

    @classmethod
    def load(cls, path: PathLike) -> "ElmoBiLM":
        """Load a directory written by ``save`` (or by the pretraining command)."""
        config, state = read_model_dir(Path(path))
        model = cls(config)
        model.load_state(state, str(Path(path) / WEIGHTS_NAME))
        return model
