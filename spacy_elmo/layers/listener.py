"""``spacy-elmo.ElmoListener.v1``: a task's view of the ELMo layers.

Training: the upstream ``elmo`` component sends the batch's layers (and a backprop
callback) to the listener. Prediction: the listener reads ``doc._.elmo``. Each task
learns its own scalar mix (softmax weights s_j and gamma) over the layers.
"""
from typing import Any, Callable, Iterable, List, Optional, Tuple

from spacy.errors import Errors
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import (
    ArgsKwargs,
    Linear,
    Model,
    PyTorchWrapper_v2,
    chain,
    concatenate,
    torch2xp,
    with_array,
    xp2torch,
)
from thinc.types import Floats2d, Floats3d

from ..bilm import ScalarMix
from .elmo_model import no_grad_layers
from .torch_shim import TorchModuleShim, torch_module
from .types import ElmoModelT, MixModelT, Tok2VecT


class ElmoListener(Model):
    """Receives the layers of the upstream ``elmo`` component (or reads them from
    ``doc._.elmo``). Output: ``(n_layers, len(doc), width)`` per Doc; ``nO`` = width,
    set by the upstream component once its weights are loaded."""

    name = "elmo-listener"

    def __init__(self, upstream_name: str, n_layers: int) -> None:
        Model.__init__(self, name=self.name, forward=listener_forward, dims={"nO": None})
        self.upstream_name = upstream_name
        self.n_layers = n_layers
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[Floats3d]] = None
        self._backprop: Optional[Callable] = None

    @classmethod
    def get_batch_id(cls, inputs: Iterable[Doc]) -> int:
        return sum(sum(token.orth for token in doc) for doc in inputs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop: Callable) -> None:
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop

    def verify_inputs(self, inputs: List[Doc]) -> None:
        if self._batch_id is None and self._outputs is None:
            raise ValueError(Errors.E954)
        batch_id = self.get_batch_id(inputs)
        if batch_id != self._batch_id:
            raise ValueError(Errors.E953.format(id1=batch_id, id2=self._batch_id))

    def backprop_and_clear(self, d_outputs: List[Floats3d]) -> Any:
        result = self._backprop(d_outputs) if self._backprop is not None else []
        self._batch_id = None
        self._outputs = None
        self._backprop = None
        return result


def _from_docs(model: ElmoListener, docs: List[Doc], is_train: bool) -> List[Floats3d]:
    outputs = []
    for doc in docs:
        layers = doc._.elmo if Doc.has_extension("elmo") else None
        if layers is None:
            if is_train:
                raise ValueError(
                    "ElmoListener: no ELMo layers received and doc._.elmo is not set. With the "
                    "'elmo' component in [training] frozen_components, also list it in "
                    "annotating_components (or use its own setting frozen = true)."
                )
            width = model.get_dim("nO") if model.has_dim("nO") else None
            if width is None:
                raise ValueError(
                    "ElmoListener: doc._.elmo is not set and the ELMo width is unknown; run the "
                    "'elmo' component first (or initialize the pipeline)."
                )
            outputs.append(model.ops.alloc3f(model.n_layers, len(doc), width))
        else:
            outputs.append(model.ops.asarray(layers, dtype="float32"))
    return outputs


def listener_forward(model: ElmoListener, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    if is_train and model._batch_id is not None:
        model.verify_inputs(docs)
        return model._outputs, model.backprop_and_clear  # type: ignore[return-value]
    return _from_docs(model, docs, is_train), lambda d: []


def build_scalar_mix(n_layers: int, layer_norm: bool, dropout: float) -> MixModelT:
    """The scalar mix (a torch ScalarMix) over each Doc's layers."""

    def convert_inputs(model: Model, Xs: List[Floats3d], is_train: bool) -> Tuple[ArgsKwargs, Callable]:
        lengths = [x.shape[1] for x in Xs]
        if Xs and Xs[0].shape[0] != n_layers:
            raise ValueError(f"ElmoListener: n_layers = {n_layers}, but the biLM gives {Xs[0].shape[0]} layers")
        flat = model.ops.xp.concatenate(Xs, axis=1) if Xs else model.ops.alloc3f(n_layers, 0, 0)
        X = xp2torch(flat, requires_grad=is_train, device=model.shims[0].device)

        def convert_back(dX: ArgsKwargs) -> List[Floats3d]:
            d_flat = torch2xp(dX.args[0], ops=model.ops)
            starts = model.ops.xp.cumsum(model.ops.xp.asarray([0] + lengths))
            return [d_flat[:, int(starts[i]) : int(starts[i + 1])] for i in range(len(lengths))]

        return ArgsKwargs(args=(X,), kwargs={}), convert_back

    def convert_outputs(model: Model, inputs_outputs: Any, is_train: bool) -> Tuple[List[Floats2d], Callable]:
        Xs, Ytorch = inputs_outputs
        Y = torch2xp(Ytorch, ops=model.ops)
        lengths = [x.shape[1] for x in Xs]
        Ys, start = [], 0
        for n in lengths:
            Ys.append(Y[start : start + n])
            start += n

        def convert_for_torch_backward(dYs: List[Floats2d]) -> ArgsKwargs:
            dY = model.ops.xp.concatenate(dYs, axis=0) if dYs else model.ops.alloc2f(0, Y.shape[1])
            return ArgsKwargs(args=(Ytorch,), kwargs={"grad_tensors": (xp2torch(dY, device=Ytorch.device),)})

        return Ys, convert_for_torch_backward

    module = ScalarMix(n_layers=n_layers, layer_norm=layer_norm, dropout=dropout)
    mix = PyTorchWrapper_v2(module, convert_inputs=convert_inputs, convert_outputs=convert_outputs)
    mix.name = "elmo_scalar_mix"
    mix.shims[0] = TorchModuleShim(module)  # thinc's shim, showing its module (get_scalar_mixes)
    return mix


def get_scalar_mixes(model: Model) -> List[ScalarMix]:
    """The ScalarMix of every ELMo listener inside ``model`` (e.g. a task's model)."""
    found: List[ScalarMix] = []
    for node in model.walk():
        module = torch_module(node) if node.name == "elmo_scalar_mix" else None
        if isinstance(module, ScalarMix) and not any(module is m for m in found):
            found.append(module)
    return found


@registry.architectures("spacy-elmo.ElmoListener.v1")
def build_elmo_listener_v1(
    width: int,
    upstream: str = "elmo",
    n_layers: int = 3,
    layer_norm: bool = False,
    dropout: float = 0.0,
    embed: Optional[Tok2VecT] = None,
    encode: Optional[Model[Floats2d, Floats2d]] = None,
    elmo: Optional[ElmoModelT] = None,
    elmo_frozen: bool = True,
) -> Tok2VecT:
    """ELMo features for a task component (use it as the ``tok2vec`` of NER, textcat...).

    width (int): output width per token (a linear projection of the features).
    upstream (str): name of the ``elmo`` component to listen to ("*" for any).
    n_layers (int): number of biLM layers mixed (3 for the published ELMo models).
    layer_norm (bool): normalise each layer per token before mixing.
    dropout (float): dropout on the mixed ELMo vector while training.
    embed (Optional[Model[List[Doc], List[Floats2d]]]): a context-independent token
        embedding (e.g. spacy.MultiHashEmbed.v2) concatenated with the mixed ELMo
        vector before the projection, as in the paper.
    encode (Optional[Model[Floats2d, Floats2d]]): a contextual encoder run on the
        projected features (e.g. spacy.MaxoutWindowEncoder.v2 of the same width), as the
        paper kept the task's own encoder on top of ELMo.
    elmo (Optional[Model]): a standalone ElmoModel used instead of listening; set by
        ``nlp.replace_listeners``, leave it null otherwise.
    elmo_frozen (bool): with ``elmo``, whether its biLM is frozen (no gradient).
    """
    if elmo is None:
        source: ElmoModelT = ElmoListener(upstream, n_layers)
    else:
        source = no_grad_layers(elmo) if elmo_frozen else elmo
    features: Tok2VecT = chain(source, build_scalar_mix(n_layers, layer_norm, dropout))
    if embed is not None:
        features = concatenate(features, embed)
    project: Model[Floats2d, Floats2d] = Linear(nO=width)
    if encode is not None:
        project = chain(project, encode)
    model: Tok2VecT = chain(features, with_array(project))
    model.set_dim("nO", width)
    model.set_ref("listener", source)
    return model
