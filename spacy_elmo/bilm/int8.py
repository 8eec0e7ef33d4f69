"""int8 storage of a model's weights (``export --dtype int8``): smaller files, float32 compute.

Each weight matrix with at least ``MIN_ELEMENTS`` values is stored as int8 with one float32
scale for each slice along its axis 1, the axis every stored matrix reduces over (the input
of a ``Linear`` weight ``(out, in)``, of an LSTM weight ``(direction, in, out)``, and the
channels of a conv weight ``(out, in, width)``; an embedding's axis 1 is its width, so one
scale a row). The scale is the slice's largest magnitude over 127 (symmetric, no zero point),
so each weight is off by at most half a scale step. Everything else (biases, small tensors)
is stored in float16. Reading dequantizes (int8 times its scale) to float32; the biLM then
computes in whatever precision it is set to, as with any other file.

This is weight-only quantization, unlike the ``int8`` inference precision
(``bilm.products``), which also quantizes each product's inputs at run time.
"""
from typing import Dict, Mapping, Tuple

import torch

from .errors import WeightsError

SCALE_SUFFIX = ".int8_scale"
MIN_ELEMENTS = 4096  # smaller tensors gain little and are stored in float16
AXIS = 1
QMAX = 127


def quantizable(value: torch.Tensor) -> bool:
    """Whether ``value`` is stored as int8: a floating-point matrix (or higher) of at least
    ``MIN_ELEMENTS`` values."""
    return value.is_floating_point() and value.dim() >= 2 and value.numel() >= MIN_ELEMENTS


def quantize(value: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(int8 values, float32 scales)`` with ``values * scales ≈ value``; the scales keep
    axis 1 as a dimension of size 1, so they broadcast."""
    value = value.detach().float()
    amax = value.abs().amax(dim=AXIS, keepdim=True)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    q = torch.clamp(torch.round(value / scale), -QMAX, QMAX).to(torch.int8)
    return q, scale


def quantize_state(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A state dict for int8 storage: each ``quantizable`` tensor as int8 plus its scales
    under ``name + SCALE_SUFFIX``, every other floating-point tensor as float16."""
    out: Dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith(SCALE_SUFFIX):
            raise ValueError(f"int8 storage: tensor name '{name}' ends with the reserved '{SCALE_SUFFIX}'")
        if quantizable(value):
            out[name], out[name + SCALE_SUFFIX] = quantize(value)
        else:
            out[name] = value.detach().half() if value.is_floating_point() else value.detach()
    return out


def dequantize_state(state: Mapping[str, torch.Tensor], source: str) -> Dict[str, torch.Tensor]:
    """The float32 tensors of a state dict written by ``quantize_state`` (any other state
    dict is returned as it is). WeightsError names ``source`` when an int8 tensor has no
    scales, or scales that do not fit it, or scales that belong to no tensor."""
    scales = {name[: -len(SCALE_SUFFIX)]: value for name, value in state.items() if name.endswith(SCALE_SUFFIX)}
    int8 = {name for name, value in state.items() if value.dtype == torch.int8}
    if not scales and not int8:
        return dict(state)
    orphans = sorted(set(scales) - int8)
    if orphans:
        raise WeightsError(f"{source}: int8 scales for tensors that are not int8 or missing: {orphans}")
    out: Dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        if value.dtype != torch.int8:
            out[name] = value
            continue
        if name not in scales:
            raise WeightsError(f"{source}: tensor '{name}' is int8 but its scales ('{name}{SCALE_SUFFIX}') are missing")
        scale = scales[name]
        want = tuple(1 if axis == AXIS else size for axis, size in enumerate(value.shape))
        if tuple(scale.shape) != want or not scale.is_floating_point():
            raise WeightsError(
                f"{source}: the scales of int8 tensor '{name}' have shape {tuple(scale.shape)} "
                f"and dtype {scale.dtype}, expected floating point of shape {want}"
            )
        out[name] = value.float() * scale.float()
    return out
