"""Inference precision of the biLM: the ``precision`` setting of ``ElmoBiLM`` and of
the ``elmo`` component.

- ``"float32"`` (default): exact (the same vectors in any batch, within 1e-5).
- ``"int8"`` (CPU): the LSTM's input, recurrent and output-projection products
  dynamically quantized (``bilm.products.Int8Products``); the character CNN,
  the gates and the cell state stay float32.
- ``"bf16"`` / ``"fp16"`` (CUDA): the forward pass under ``torch.autocast`` in that
  type; the LSTM cell state stays float32, the outputs are returned as float32.

A setting other than float32 applies to inference only (autograd off, as in
``embed_sentences``, the component's ``predict`` and a frozen biLM in training);
with autograd on the biLM always computes in float32.
"""
import contextlib
from typing import Iterator, Optional

import torch

PRECISIONS = ("float32", "int8", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISION_OF_AUTOCAST = {dtype: name for name, dtype in AUTOCAST_DTYPES.items()}


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
            f"but the biLM is on {device}; use 'bf16' or 'fp16' on a GPU"
        )
    if precision in AUTOCAST_DTYPES and device.type != "cuda":
        raise ValueError(
            f"{where}: precision {precision!r} is for CUDA GPUs, but the biLM is on {device}; "
            "on the CPU use 'float32' or 'int8'"
        )


def lstm_products(precision: str) -> Optional[str]:
    """The LSTM products kind (``bilm.products``) for a precision (None: the default)."""
    return "int8" if precision == "int8" else None


@contextlib.contextmanager
def autocast_for(precision: str, device: torch.device) -> Iterator[None]:
    """``torch.autocast`` in the precision's type for bf16/fp16, else nothing."""
    if precision in AUTOCAST_DTYPES:
        with torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision]):
            yield
    else:
        yield
