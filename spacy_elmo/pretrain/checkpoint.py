"""Checkpoints: everything a resume needs, written atomically.

``checkpoint.pt`` holds the model, optimizer and loss-scaler states, the step, the data
position and the Python, NumPy and torch (CPU and CUDA) random states. It is always read
onto the CPU: ``torch.set_rng_state`` takes a CPU ByteTensor (a checkpoint loaded onto a
GPU could not be resumed), and ``load_state_dict`` moves model and optimizer tensors to
their parameters' device.
"""
import random
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from ..util.atomic import atomic_path

CHECKPOINT = "checkpoint.pt"


def rng_states() -> Dict[str, Any]:
    """The random states of Python, NumPy and torch (CPU, and every GPU when present)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_states(states: Dict[str, Any]) -> None:
    """Restore the random states saved by ``rng_states`` (CUDA ones only where a GPU is)."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"].cpu())
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in states["cuda"]])


def save_checkpoint(state: Dict[str, Any], path: Path) -> None:
    """Write ``state`` to ``path`` atomically (a reader sees the old file or the new one)."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: Path, mmap: bool = False) -> Dict[str, Any]:
    """The state saved at ``path``, on the CPU; a clear error for an empty or damaged file.
    mmap (bool): map the tensors from the file instead of reading them, for a quick look at the
        config and vocabulary."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as err:  # torch raises EOFError, RuntimeError, UnpicklingError, ...
        detail = "empty file" if path.stat().st_size == 0 else f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise ValueError(f"{path} is not a readable checkpoint ({detail}); restore it, or delete it to "
                         "start the run afresh") from None
    if not isinstance(state, dict) or not {"model", "optimizer", "step", "config", "vocab"} <= set(state):
        raise ValueError(f"{path} is not a pretraining checkpoint of spacy-elmo")
    return state
