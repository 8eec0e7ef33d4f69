"""The ``elmo`` pipeline component: runs the biLM over each Doc's sentences, stores
all layers in ``doc._.elmo`` and a fixed view in ``doc.tensor``, and feeds the
listeners of downstream components.

On a GPU the biLM computes in float32 with TF32 off (``ElmoBiLM.allow_tf32``), so a
sentence gets the same vectors in any batch, within 5e-5; ``doc._.elmo`` is always a
float32 NumPy array, copied from the device once per batch."""
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer, set_dropout_rate
from thinc.types import Floats3d

from .bilm import ElmoBiLM
from .bilm.precision import check_precision
from .frozen_cache import FrozenLayerCache
from .hooks import set_elmo_hooks
from .pipe_errors import check_listener_upstreams, clear_load_errors
from .pipe_listeners import ListenerHost
from .layers.elmo_model import (
    elmo_layers,
    get_bilm,
    layers_to_numpy,
    require_bilm,
    set_bilm,
    set_replace_listener_hooks,
)
from .layers.listener import ElmoListener

TENSOR_VIEWS = ("mean", "top", "none")

DEFAULT_CONFIG = Config().from_str(
    """
[model]
@architectures = "spacy-elmo.ElmoModel.v2"
storage_dtype = "float32"
"""
)


def install_extensions() -> None:
    if not Doc.has_extension("elmo"):
        Doc.set_extension("elmo", default=None)


@Language.factory(
    "elmo",
    assigns=["doc._.elmo", "doc.tensor"],
    default_config={
        "model": DEFAULT_CONFIG["model"],
        "frozen": True,
        "max_length": 256,
        "tensor": "mean",
        "store_layers": True,
        "cache_mb": 2048,
        "precision": "float32",
    },
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model[List[Doc], List[Floats3d]],
    frozen: bool,
    max_length: int,
    tensor: str,
    store_layers: bool,
    cache_mb: int,
    precision: str = "float32",
) -> "Elmo":
    """The ELMo component.

    model: the biLM model (``spacy-elmo.ElmoModel.v2``; weights come from the loader
        in ``[initialize.components.elmo.loader]``).
    frozen: keep the biLM fixed (the paper's setting): no gradient, no optimizer state.
        False fine-tunes it with the downstream tasks.
    max_length: longest biLM sentence in tokens; longer sentences are cut.
    tensor: what ``doc.tensor`` holds: "mean" of the layers, the "top" layer, or
        "none" (leave doc.tensor alone, e.g. for a tok2vec in the same pipeline).
        Token/Span/Doc ``.vector`` and ``.similarity`` use this view through user
        hooks; with "none" they use the mean of ``doc._.elmo`` (no hooks when
        ``store_layers`` is false too).
    store_layers: set ``doc._.elmo`` (all layers). False saves memory on large
        corpora, but no listener can then read from the Doc.
    cache_mb: with ``frozen``, the layers of training docs are computed once and
        reused in later epochs, up to this many megabytes (0 disables the cache); after
        the first update, the docs the component predicts on (the dev set that training
        evaluates) are remembered too. The docs that come first are kept; those that no
        longer fit are computed again each time, and the first such training doc brings a
        ``CacheFullWarning`` (training slows down).
    precision: how the biLM computes without gradients (prediction, and a frozen biLM
        in training): "float32" (exact), "int8" (CPU only: the LSTM's matrix
        products dynamically quantized, about 2x faster on large models), or "bf16" /
        "fp16" (CUDA only: autocast, the LSTM cell state kept in float32).
    """
    return Elmo(
        nlp.vocab,
        model,
        name,
        frozen=frozen,
        max_length=max_length,
        tensor=tensor,
        store_layers=store_layers,
        cache_mb=cache_mb,
        precision=precision,
    )


class Elmo(ListenerHost, TrainablePipe):
    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[Doc], List[Floats3d]],
        name: str = "elmo",
        *,
        frozen: bool = True,
        max_length: int = 256,
        tensor: str = "mean",
        store_layers: bool = True,
        cache_mb: int = 2048,
        precision: str = "float32",
    ) -> None:
        check_precision(precision, f"elmo component '{name}'")
        if tensor not in TENSOR_VIEWS:
            raise ValueError(f"elmo: unknown tensor = {tensor!r} (expected one of {TENSOR_VIEWS})")
        if max_length < 1:
            raise ValueError(f"elmo: max_length must be at least 1, got {max_length}")
        if cache_mb < 0:
            raise ValueError(f"elmo: cache_mb must be >= 0, got {cache_mb}")
        install_extensions()
        self.vocab = vocab
        self.model = model
        self.name = name
        self.listener_map: Dict[str, List[ElmoListener]] = {}
        self.cfg: Dict[str, Any] = {
            "frozen": frozen,
            "max_length": max_length,
            "tensor": tensor,
            "store_layers": store_layers,
            "cache_mb": cache_mb,
            "precision": precision,
        }
        self.frozen_cache = FrozenLayerCache(cache_mb)
        self._pid = os.getpid()
        self._set_replace_hooks()

    # Settings -----------------------------------------------------------------

    @property
    def frozen(self) -> bool:
        return bool(self.cfg["frozen"])

    @property
    def max_length(self) -> int:
        return int(self.cfg["max_length"])

    @property
    def bilm(self) -> Optional[ElmoBiLM]:
        return get_bilm(self.model)

    def _set_replace_hooks(self) -> None:
        set_replace_listener_hooks(self.model, frozen=self.frozen, max_length=self.max_length)

    # Prediction -------------------------------------------------------------------

    def _check_process(self) -> None:
        if os.getpid() != self._pid:  # a worker of nlp.pipe(n_process=...)
            torch.set_num_threads(1)
            self._pid = os.getpid()

    def predict(self, docs: Iterable[Doc]) -> List[Floats3d]:
        docs = list(docs)
        if self.frozen and self.frozen_cache.training:  # e.g. the dev docs that training evaluates again and again
            return self.frozen_cache.layers(docs, self._compute_layers, self.model.ops, warn=False)
        return self._compute_layers(docs)

    def _compute_layers(self, docs: List[Doc]) -> List[Floats3d]:
        self._check_process()
        bilm = require_bilm(self.model)
        bilm.precision = self.cfg.get("precision", "float32")
        if not any(len(doc) for doc in docs):
            return [self.model.ops.alloc3f(bilm.n_layers, len(doc), bilm.output_dim) for doc in docs]
        return elmo_layers(self.model, docs, max_length=self.max_length, is_train=False)[0]

    def set_annotations(self, docs: Sequence[Doc], layerses: List[Floats3d]) -> None:
        view = self.cfg["tensor"]
        for doc, arr in zip(docs, layers_to_numpy(layerses)):
            assert arr.shape[1] == len(doc)
            if self.cfg["store_layers"]:
                doc._.elmo = arr
            if view == "mean":
                doc.tensor = arr.mean(axis=0)
            elif view == "top":
                top = np.ascontiguousarray(arr[-1])  # a remembered array is read-only: doc.tensor gets a copy
                doc.tensor = top if top.flags.writeable else top.copy()
            # Token/Span/Doc vectors and similarity from the ELMo vectors (hooks.py).
            set_elmo_hooks(doc, view)

    # Training ---------------------------------------------------------------------

    def _frozen_layers(self, docs: List[Doc]) -> List[Floats3d]:
        """Layers of training docs with a frozen biLM, each computed once if the
        cache (``cache_mb``) has room for it."""
        self.frozen_cache.training = True
        return self.frozen_cache.layers(docs, self._compute_layers, self.model.ops)

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        if losses is None:
            losses = {}
        examples = list(examples)
        validate_examples(examples, "Elmo.update")
        losses.setdefault(self.name, 0.0)
        docs = [eg.predicted for eg in examples]
        if self.frozen:
            layers = self._frozen_layers(docs)

            def backprop(d_layers: List[Floats3d]) -> List[Doc]:
                return []

            accumulate = backprop
        else:
            set_dropout_rate(self.model, drop)
            layers, bp_layers = elmo_layers(self.model, docs, max_length=self.max_length, is_train=True)
            d_layers = [self.model.ops.alloc3f(*x.shape) for x in layers]

            def accumulate(one_d: List[Floats3d]) -> List[Doc]:
                for i, d in enumerate(one_d):
                    d_layers[i] += d
                    losses[self.name] += float((d**2).sum())
                return []

            def backprop(one_d: List[Floats3d]) -> List[Doc]:
                accumulate(one_d)
                d_docs = bp_layers(d_layers)
                if sgd is not None:
                    self.finish_update(sgd)
                return d_docs

        batch_id = ElmoListener.get_batch_id(docs)
        for listener in self.listeners[:-1]:
            listener.receive(batch_id, layers, accumulate)
        if self.listeners:
            self.listeners[-1].receive(batch_id, layers, backprop)
        return losses

    def finish_update(self, sgd: Optimizer) -> None:
        if not self.frozen:
            super().finish_update(sgd)

    def get_loss(self, examples: Iterable[Example], scores: Any) -> None:
        return None

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        loader: Optional[Callable[[], ElmoBiLM]] = None,
    ) -> None:
        """Load the biLM weights.

        loader: a registered weight loader (``spacy-elmo.ElmoLoader.v1`` or
            ``spacy-elmo.AllenNLPLoader.v1``) from ``[initialize.components.elmo.loader]``.
            Without one, the English model shipped with spacy-elmo is used.
        """
        from .loaders import default_loader

        if nlp is not None:
            check_listener_upstreams(nlp, {name for name, pipe in nlp.pipeline if isinstance(pipe, Elmo)})
        if loader is None:
            loader = default_loader()
        bilm = loader()
        if not isinstance(bilm, ElmoBiLM):
            raise ValueError(f"elmo: the loader returned {type(bilm).__name__}, not an ElmoBiLM")
        if self.frozen:
            bilm.requires_grad_(False)
        bilm.eval()
        bilm.precision = self.cfg.get("precision", "float32")
        set_bilm(self.model, bilm)
        self.frozen_cache.clear()
        for listener in self.listeners:
            self._set_listener_width(listener)

    def from_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        with clear_load_errors(f"{Path(path) / 'model'}"):
            super().from_disk(path, exclude=exclude)
        self._after_load()
        return self

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        with clear_load_errors(f"the bytes of component '{self.name}'"):
            super().from_bytes(bytes_data, exclude=exclude)
        self._after_load()
        return self

    def _after_load(self) -> None:
        self.cfg.pop("bilm_config", None)  # written by spacy-elmo 0.1, never read
        self.frozen_cache = FrozenLayerCache(self.cfg["cache_mb"])
        bilm = self.bilm
        if bilm is not None:
            if self.frozen:
                bilm.requires_grad_(False)
            bilm.eval()
            bilm.precision = self.cfg.get("precision", "float32")
            self.model.set_dim("nO", bilm.output_dim, force=True)
        for listener in self.listeners:
            self._set_listener_width(listener)
        self._set_replace_hooks()
