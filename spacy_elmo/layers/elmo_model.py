"""``spacy-elmo.ElmoModel.v1``: the biLM as a Thinc model, Docs in, all layers out.

The model is built without weights (shapes come from the weights, loaded at
``nlp.initialize`` by the component's loader). The serialized bytes carry the
biLM's config next to its tensors, so a saved pipeline rebuilds the same biLM.
"""
from typing import Any, Callable, List, Optional, Tuple, cast

import numpy as np
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchShim, torch2xp, xp2torch
from thinc.types import Floats3d
from torch import nn

from ..bilm import ElmoBiLM
from ..bilm.chars import tokens_to_char_ids
from ..bilm.serialize import load_state_bytes, state_to_bytes
from ..segmentation import batch_segments
from .types import ElmoModelT

DEFAULT_MAX_LENGTH = 256


class NoWeights(nn.Module):
    """Stands in for the biLM until weights are loaded."""

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise ValueError(
            "The ELMo biLM has no weights yet: call nlp.initialize() with a loader in "
            "[initialize.components.elmo.loader], or load a saved pipeline."
        )


def _serialize(module: nn.Module) -> bytes:
    if not isinstance(module, ElmoBiLM):
        return srsly.msgpack_dumps({"config": None, "state": b""})
    return srsly.msgpack_dumps({"config": module.config(), "state": state_to_bytes(module)})


def _deserialize(module: nn.Module, data: bytes, device: torch.device) -> nn.Module:
    msg = srsly.msgpack_loads(data)
    if msg["config"] is None:
        return NoWeights()
    bilm = ElmoBiLM.from_config(msg["config"])
    load_state_bytes(bilm, msg["state"], "serialized elmo model")
    return bilm.to(device)


def _make_shim(module: nn.Module) -> PyTorchShim:
    return PyTorchShim(module, serialize_model=_serialize, deserialize_model=_deserialize)


@registry.architectures("spacy-elmo.ElmoModel.v1")
def build_elmo_model_v1() -> ElmoModelT:
    """The ELMo biLM: a list of Docs to an array ``(n_layers, len(doc), width)`` per Doc.

    Takes no arguments: the biLM's shapes come from the weights loaded at
    ``nlp.initialize`` (see ``[initialize.components.elmo.loader]``).
    """
    return Model(
        "elmo",
        forward,
        shims=[_make_shim(NoWeights())],
        attrs={"max_length": DEFAULT_MAX_LENGTH},
        dims={"nO": None},
    )


def set_bilm(model: Model, bilm: ElmoBiLM) -> None:
    """Put loaded weights into an ElmoModel (replaces its torch module)."""
    model.shims[0] = _make_shim(bilm)
    model.set_dim("nO", bilm.output_dim, force=True)


def get_bilm(model: Model) -> Optional[ElmoBiLM]:
    """The loaded biLM of an ElmoModel, or None before weights are loaded."""
    module = model.shims[0]._model
    return module if isinstance(module, ElmoBiLM) else None


def require_bilm(model: Model) -> ElmoBiLM:
    bilm = get_bilm(model)
    if bilm is None:
        NoWeights()()  # raises the explanatory error
    return cast(ElmoBiLM, bilm)


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    bilm = require_bilm(model)
    n_layers, width = bilm.n_layers, bilm.output_dim
    words, lengths, rows = batch_segments(docs, int(model.attrs["max_length"]))
    char_ids = torch.from_numpy(tokens_to_char_ids(words, bilm.max_chars)).to(bilm.device)
    Ytorch, torch_backprop = model.shims[0](ArgsKwargs(args=(char_ids, lengths), kwargs={}), is_train)
    flat = model.ops.asarray(torch2xp(Ytorch))
    outputs: List[Floats3d] = []
    start = 0
    for doc, doc_rows in zip(docs, rows):
        out = model.ops.alloc3f(n_layers, len(doc), width)
        if len(doc_rows):
            out[:, doc_rows] = flat[:, start : start + len(doc_rows)]
        outputs.append(out)
        start += len(doc_rows)

    def backprop(d_outputs: List[Floats3d]) -> List[Doc]:
        parts = [d[:, r] for d, r in zip(d_outputs, rows) if len(r)]
        if parts and Ytorch.requires_grad:
            d_flat = model.ops.xp.concatenate(parts, axis=1)
            torch_backprop(ArgsKwargs(args=(Ytorch,), kwargs={"grad_tensors": (xp2torch(d_flat),)}))
        return []

    return outputs, backprop


def no_grad_layers(elmo: ElmoModelT) -> ElmoModelT:
    """Wrap an ElmoModel so it always predicts and passes no gradient back (a frozen biLM)."""

    def frozen_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
        return model.layers[0].predict(docs), lambda d: []

    return Model("elmo_frozen", frozen_forward, layers=[elmo], dims={"nO": None})


def layers_to_numpy(layers: Floats3d) -> np.ndarray:
    """An xp array of layers as a float32 NumPy array (copies from the GPU)."""
    if isinstance(layers, np.ndarray):
        return layers.astype(np.float32, copy=False)
    return cast(np.ndarray, layers.get()).astype(np.float32, copy=False)
