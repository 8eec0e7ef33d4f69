"""Inference precision of the biLM: the ``precision`` setting of ``ElmoBiLM`` and of
the ``elmo`` component.

- ``"float32"`` (default): exact (the same vectors in any batch, within 1e-5).
- ``"int8"`` (CPU): the LSTM's input, recurrent and output-projection products
  dynamically quantized (``bilm.products.Int8Products``); the character CNN,
  the gates and the cell state stay float32.

A setting other than float32 applies to inference only (autograd off, as in
``embed_sentences``, the component's ``predict`` and a frozen biLM in training);
with autograd on the biLM always computes in float32.
"""
from typing import Optional

import torch

PRECISIONS = ("float32", "int8")


def check_precision(value: object, where: str = "ElmoBiLM") -> str:
    """``value`` if it is a known precision, else a ValueError naming ``where``."""
    if not isinstance(value, str) or value not in PRECISIONS:
        raise ValueError(f"{where}: unknown precision {value!r} (expected one of {', '.join(PRECISIONS)})")
    return value


def check_device(precision: str, device: torch.device, where: str = "ElmoBiLM") -> None:
    """A ValueError when ``precision`` cannot run on ``device``."""
    if precision == "int8" and device.type != "cpu":
        raise ValueError(
            f"{where}: precision 'int8' (dynamic quantization) runs on the CPU only, "
            f"but the biLM is on {device}"
        )


def lstm_products(precision: str) -> Optional[str]:
    """The LSTM products kind (``bilm.products``) for a precision (None: the default)."""
    return "int8" if precision == "int8" else None
