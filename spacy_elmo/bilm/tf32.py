"""TF32 off for a block of code: float32 products on NVIDIA GPUs then keep all their
mantissa bits, as the exactness promise (the same vectors in any batch, within 5e-5
on GPU) needs. Only the settings the block changes are touched, and they are put
back as they were, whatever the caller chose for the rest of the program."""
import contextlib
from typing import Any, Iterator, List, Tuple

import torch


def _settings() -> List[Tuple[Any, str, Any]]:
    """(object, attribute, value meaning 'no TF32') for this torch's API."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(matmul, "fp32_precision") and hasattr(getattr(cudnn, "conv", None), "fp32_precision"):
        # cuDNN's RNN flag too: with conv and rnn different, torch's legacy getter
        # (cudnn.allow_tf32) raises for anyone reading it inside the block.
        return [(matmul, "fp32_precision", "ieee"), (cudnn.conv, "fp32_precision", "ieee"), (cudnn.rnn, "fp32_precision", "ieee")]
    return [(matmul, "allow_tf32", False), (cudnn, "allow_tf32", False)]


@contextlib.contextmanager
def no_tf32() -> Iterator[None]:
    """Run the block with TF32 off for CUDA matrix products and cuDNN convolutions."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in _settings()]
    try:
        for obj, name, value in _settings():
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
