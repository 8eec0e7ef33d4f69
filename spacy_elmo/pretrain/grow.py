"""Growing the init model (``[training] grow = true``): continued pretraining of a wider biLM
that starts out computing exactly what the init model computes.

Three sizes can grow, everything else must match the init model:

- ``lstm.dim``: each LSTM layer gets more memory cells. The old cells keep their gate weights
  and biases; the new cells get fresh gate weights (the forget bias of 1) and zero rows in the
  output projection, so at the start they add nothing to the projected state.
- ``char_cnn.filters``: more filters of a width already there (``[4, 128]`` to ``[4, 256]``)
  or groups of new widths. Each old group keeps its filters at the front of the first
  unused group of the same width. The highway layers' old outputs get zero weights from the
  new filters, and the token projection gets zero columns for them.
- ``lstm.projection_dim``: wider ELMo layers. The token projection and each LSTM layer's output
  projection get zero rows for the new dimensions, so those stay zero at the start; what reads
  them (the LSTM input and recurrent weights, the softmax) gets fresh weights there. The adaptive
  softmax's tail clusters widen with it; their old outputs get zero weights from the new units.
  The grown layers hold the init model's values in the first dimensions of each direction, and
  zeros after them.

For new cells and filters the zero blocks sit where their outputs are read, never where they
read their input, so their gradients are not zero: the projections learn to read the new units
on the first step and the new units' own weights learn from the next one. For new projection
dimensions it is the other way round (zero rows that make them, fresh weights that read them),
with the same effect. Function-preserving
widening is the idea of Net2Net (Chen et al. 2016), here with zeros rather than copies.
"""
import itertools
from typing import Any, Dict, List, Sequence, Tuple

import torch

from ..bilm import ElmoBiLM
from ..bilm.config import option_differences

GROWABLE = ("lstm.dim", "lstm.projection_dim", "char_cnn.filters")


def matching_groups(old: Sequence[Sequence[int]], new: Sequence[Sequence[int]]) -> List[int]:
    """For each ``[width, count]`` group of ``old``, the index of the group of ``new`` that takes
    its filters (at its front): the first unused one of that width with at least ``count``.
    Raises ValueError when an old group has none."""
    taken: List[int] = []
    for width, count in old:
        place = next((j for j, (w, n) in enumerate(new)
                      if j not in taken and int(w) == int(width) and int(n) >= int(count)), None)
        if place is None:
            raise ValueError(f"char_cnn.filters: no group of width {width} with at least {count} filters "
                             f"is left for the init model's group [{width}, {count}]")
        taken.append(place)
    return taken


def growth_problems(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """The differences between two options dicts that growing cannot bridge (empty: it can),
    each as ``name (new vs old)``."""
    problems = [d for d in option_differences(new, old) if not d.startswith(GROWABLE)]
    for name in ("dim", "projection_dim"):
        if new["lstm"][name] < old["lstm"][name]:
            problems.append(f"lstm.{name} ({new['lstm'][name]} vs {old['lstm'][name]}: it can only grow)")
    try:
        matching_groups(old["char_cnn"]["filters"], new["char_cnn"]["filters"])
    except ValueError as err:
        problems.append(str(err))
    return problems


def _grown(old: torch.Tensor, new: torch.Tensor, index: Tuple[Any, ...], zero: Tuple[Any, ...] = ()) -> None:
    """In ``new``: the old values at ``index``, zeros at ``zero`` (the rest keeps its fresh init)."""
    if zero:
        new[zero] = 0
    new[index] = old.to(new.dtype)


@torch.no_grad()
def grow_weights(new: ElmoBiLM, old: ElmoBiLM, keep_softmax: bool) -> None:
    """Copy ``old``'s weights into the wider, freshly initialised ``new`` (see the module
    docstring); ``new`` then computes ``old``'s layers (and, with ``keep_softmax``, its loss)."""
    problems = growth_problems(old.options, new.options)
    if problems:
        raise ValueError("[training] grow: the model cannot grow from the init model: " + "; ".join(problems))
    o, n = old.token_encoder, new.token_encoder
    n.char_embedding.weight.copy_(o.char_embedding.weight)
    starts = [0, *itertools.accumulate(conv.out_channels for conv in n.convs)]  # of each new group's features
    kept_parts = []  # the positions of the old features among the new ones
    for conv, place in zip(o.convs, matching_groups(old.config.filters, new.config.filters)):
        n.convs[place].weight[: conv.out_channels] = conv.weight  # each old group at the front of its new one
        n.convs[place].bias[: conv.out_channels] = conv.bias
        kept_parts.append(torch.arange(starts[place], starts[place] + conv.out_channels))
    kept = torch.cat(kept_parts)
    added = torch.ones(n.n_filters, dtype=torch.bool)
    added[kept] = False
    added = added.nonzero()[:, 0]
    for o_highway, n_highway in zip(o.highways, n.highways):
        for o_lin, n_lin in ((o_highway.transform, n_highway.transform), (o_highway.gate, n_highway.gate)):
            _grown(o_lin.weight, n_lin.weight, (kept[:, None], kept[None, :]), (kept[:, None], added[None, :]))
            n_lin.bias[kept] = o_lin.bias
    # The token and LSTM output projections are zero but for the old block: new filters and cells
    # are not read yet, and the new projection dimensions (from P on) start at zero.
    P = o.projection.out_features
    n.projection.weight.zero_()
    n.projection.weight[:P, kept] = o.projection.weight
    n.projection.bias.zero_()
    n.projection.bias[:P] = o.projection.bias

    for o_layer, n_layer in zip(old.lstm.layers, new.lstm.layers):
        C, C_new = o_layer.cell_dim, n_layer.cell_dim
        gates = torch.cat([torch.arange(C) + block * C_new for block in range(4)])
        for name in ("weight_ih", "weight_hh"):  # (direction, input, gate): old inputs, old cells
            getattr(n_layer, name)[:, :P, gates] = getattr(o_layer, name)
        n_layer.bias[:, gates] = o_layer.bias
        n_layer.weight_proj.zero_()
        n_layer.weight_proj[:, :C, :P] = o_layer.weight_proj
    if keep_softmax:
        if old.softmax is None or new.softmax is None:
            raise ValueError("[training] grow: the init model's softmax is kept but one of the models has none")
        _grow_softmax(old.softmax, new.softmax)


def _grow_softmax(old: torch.nn.Module, new: torch.nn.Module) -> None:
    """Each of ``old``'s weights at the front of ``new``'s. Only an adaptive softmax's tail
    clusters have inner units that grow with the projection: their outputs get zero weights
    from the new units (the new projection dimensions are zero at the start: any weights may
    read them)."""
    new_params = dict(new.named_parameters())
    for name, value in old.named_parameters():
        target = new_params[name]
        target[tuple(slice(0, d) for d in value.shape)] = value
        if ".tail." in name and name.endswith(".1.weight"):  # (cluster size, inner units)
            target[:, value.shape[1]:] = 0
