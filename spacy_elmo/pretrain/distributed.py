"""torchrun support: initialise the process group from the environment it sets."""
import contextlib
import os
from typing import Iterator

import torch


@contextlib.contextmanager
def distributed_from_env() -> Iterator[None]:
    """Inside torchrun (WORLD_SIZE > 1) join the process group (nccl on GPUs, else gloo)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or torch.distributed.is_initialized():
        yield
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    torch.distributed.init_process_group(backend)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()
