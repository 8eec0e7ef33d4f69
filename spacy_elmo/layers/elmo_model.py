"""``spacy-elmo.ElmoModel.v2`` (and v1): the biLM as a Thinc model, Docs in, all layers out.

The model is built without weights (shapes come from the weights, loaded at
``nlp.initialize`` by the component's loader). Its bytes are ``ElmoBiLM.to_bytes``,
which carry the biLM's config next to its tensors, so a saved pipeline rebuilds the
same biLM; v2 chooses the dtype those tensors are stored in.
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, torch2xp, xp2torch
from thinc.types import Floats3d
from torch import nn

from ..bilm import BiLMConfig, ElmoBiLM, WeightsError
from ..bilm.chars import tokens_to_char_ids
from ..bilm.serialize import check_storage_dtype, state_from_bytes
from ..segmentation import batch_segments
from .torch_shim import TorchModuleShim, torch_module
from .types import ElmoModelT

DEFAULT_MAX_LENGTH = 256


class NoWeights(nn.Module):
    """Stands in for the biLM until weights are loaded."""

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise ValueError(
            "The ELMo biLM has no weights yet: call nlp.initialize() with a loader in "
            "[initialize.components.elmo.loader], or load a saved pipeline."
        )


def _serializer(storage_dtype: str) -> Callable[[nn.Module], bytes]:
    def serialize(module: nn.Module) -> bytes:
        return module.to_bytes(dtype=storage_dtype) if isinstance(module, ElmoBiLM) else b""

    return serialize


def _deserialize(module: nn.Module, data: bytes, device: torch.device) -> nn.Module:
    if not data:
        return NoWeights()
    try:
        bilm = ElmoBiLM.from_bytes(data, "serialized elmo model")
    except WeightsError:
        legacy = _from_legacy_bytes(data)
        if legacy is None:
            raise
        if not isinstance(legacy, ElmoBiLM):
            return legacy
        bilm = legacy
    return bilm.to(device)


def _from_legacy_bytes(data: bytes) -> Optional[nn.Module]:
    """Pipelines saved by spacy-elmo 0.1 before ``ElmoBiLM.to_bytes``: msgpack
    ``{"config": dict or None, "state": safetensors bytes}``."""
    try:
        msg = srsly.msgpack_loads(data)
    except Exception:
        return None
    if not isinstance(msg, dict) or set(msg) != {"config", "state"}:
        return None
    if msg["config"] is None:
        return NoWeights()
    bilm = ElmoBiLM(BiLMConfig.from_dict(msg["config"], "serialized elmo model"))
    bilm.load_state(state_from_bytes(msg["state"], "serialized elmo model"), "serialized elmo model")
    return bilm


def _make_shim(module: nn.Module, storage_dtype: str) -> TorchModuleShim:
    return TorchModuleShim(module, serialize_model=_serializer(storage_dtype), deserialize_model=_deserialize)


@registry.architectures("spacy-elmo.ElmoModel.v2")
def build_elmo_model_v2(storage_dtype: str = "float32") -> ElmoModelT:
    """The ELMo biLM: a list of Docs to an array ``(n_layers, len(doc), width)`` per Doc.

    The biLM's shapes come from the weights loaded at ``nlp.initialize`` (see
    ``[initialize.components.elmo.loader]``). The ``elmo`` component passes its
    ``max_length`` to ``elmo_layers``; a copy made by ``nlp.replace_listeners`` gets it
    in ``attrs["max_length"]``.

    storage_dtype: how a saved pipeline (``nlp.to_disk``, ``nlp.to_bytes``) stores the
        biLM's weights. "float32" gives back exactly the vectors of the pipeline that
        was saved; "float16" halves the size, and is exact too when the weights came
        from float16 files (the shipped model) and the biLM is frozen; "int8" (int8
        matrices with per-slice scales) is about a quarter, with vectors close to but
        not equal to the saved pipeline's. Memory and arithmetic stay float32.
    """
    check_storage_dtype(storage_dtype, "spacy-elmo.ElmoModel.v2 storage_dtype")
    return Model(
        "elmo",
        forward,
        shims=[_make_shim(NoWeights(), storage_dtype)],
        attrs={"max_length": DEFAULT_MAX_LENGTH, "storage_dtype": storage_dtype},
        dims={"nO": None},
    )


@registry.architectures("spacy-elmo.ElmoModel.v1")
def build_elmo_model_v1() -> ElmoModelT:
    """``spacy-elmo.ElmoModel.v2`` with ``storage_dtype = "float32"`` (what v1 always did):

    [model]
    @architectures = "spacy-elmo.ElmoModel.v1"
    """
    return build_elmo_model_v2("float32")


def set_bilm(model: Model, bilm: ElmoBiLM) -> None:
    """Put loaded weights into an ElmoModel (replaces its torch module)."""
    model.shims[0] = _make_shim(bilm, model.attrs.get("storage_dtype", "float32"))
    model.set_dim("nO", bilm.output_dim, force=True)


def get_bilm(model: Model) -> Optional[ElmoBiLM]:
    """The loaded biLM of an ElmoModel, or None before weights are loaded."""
    module = torch_module(model)
    return module if isinstance(module, ElmoBiLM) else None


def require_bilm(model: Model) -> ElmoBiLM:
    bilm = get_bilm(model)
    if bilm is None:
        NoWeights()()  # raises the explanatory error
    return cast(ElmoBiLM, bilm)


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    return elmo_layers(model, docs, max_length=int(model.attrs["max_length"]), is_train=is_train)


def elmo_layers(
    model: Model, docs: Sequence[Doc], *, max_length: int, is_train: bool
) -> Tuple[List[Floats3d], Callable]:
    """All biLM layers of each Doc, each Doc cut into sentences of at most
    ``max_length`` tokens, and the backprop callback (Docs get no gradient)."""
    bilm = require_bilm(model)
    n_layers, width = bilm.n_layers, bilm.output_dim
    words, lengths, rows = batch_segments(docs, max_length)
    # Character ids stay on the host: the biLM moves only the distinct tokens.
    char_ids = torch.from_numpy(tokens_to_char_ids(words, bilm.max_chars))
    Ytorch, torch_backprop = model.shims[0](ArgsKwargs(args=(char_ids, lengths), kwargs={}), is_train)
    flat = torch2xp(Ytorch, ops=model.ops)
    outputs: List[Floats3d] = []
    start = 0
    for doc, doc_rows in zip(docs, rows):
        out = model.ops.alloc3f(n_layers, len(doc), width)
        if len(doc_rows):
            out[:, model.ops.asarray(doc_rows)] = flat[:, start : start + len(doc_rows)]
        outputs.append(out)
        start += len(doc_rows)

    def backprop(d_outputs: List[Floats3d]) -> List[Doc]:
        parts = [d[:, model.ops.asarray(r)] for d, r in zip(d_outputs, rows) if len(r)]
        if parts and Ytorch.requires_grad:
            d_flat = model.ops.xp.concatenate(parts, axis=1)
            torch_backprop(ArgsKwargs(args=(Ytorch,), kwargs={"grad_tensors": (xp2torch(d_flat, device=bilm.device),)}))
        return []

    return outputs, backprop


def no_grad_layers(elmo: ElmoModelT) -> ElmoModelT:
    """Wrap an ElmoModel so it always predicts and passes no gradient back (a frozen biLM)."""

    def frozen_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
        return model.layers[0].predict(docs), lambda d: []

    return Model("elmo_frozen", frozen_forward, layers=[elmo], dims={"nO": None})


def set_replace_listener_hooks(model: Model, *, frozen: bool, max_length: int) -> None:
    """How ``nlp.replace_listeners`` copies an ElmoModel into a listening component:
    frozen (no gradient) or not, keeping the component's ``max_length``."""

    def replace_listener(new_model: Model, listener: Model, pipe: Any) -> Model:
        # The standalone copy has no component to pass max_length: it keeps it.
        new_model.attrs["max_length"] = max_length
        return no_grad_layers(new_model) if frozen else new_model

    def replace_listener_cfg(elmo_cfg: Dict[str, Any], listener_cfg: Dict[str, Any]) -> Dict[str, Any]:
        return {**listener_cfg, "elmo": dict(elmo_cfg), "elmo_frozen": frozen}

    model.attrs["replace_listener"] = replace_listener
    model.attrs["replace_listener_cfg"] = replace_listener_cfg


def layers_to_numpy(layerses: Sequence[Floats3d]) -> List[np.ndarray]:
    """Per-doc layers as float32 NumPy arrays, copied from the GPU in one transfer."""
    if all(isinstance(x, np.ndarray) for x in layerses):
        return [x.astype(np.float32, copy=False) for x in layerses]
    import cupy

    host = cupy.concatenate(list(layerses), axis=1).astype(cupy.float32, copy=False).get()
    bounds = np.cumsum([0] + [x.shape[1] for x in layerses])
    return [np.ascontiguousarray(host[:, bounds[i] : bounds[i + 1]]) for i in range(len(layerses))]
