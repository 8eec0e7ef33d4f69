"""torchrun support: initialise the process group from the environment it sets."""
import contextlib
import os
from typing import Iterator

import torch


@contextlib.contextmanager
def distributed_from_env(cuda: bool = True) -> Iterator[None]:
    """Inside torchrun (WORLD_SIZE > 1) join the process group: nccl when ``cuda`` and a GPU
    is present (training.device "auto" or "cuda"), else gloo."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or torch.distributed.is_initialized():
        yield
        return
    if cuda and torch.cuda.is_available():
        # one GPU per process, chosen before NCCL starts (else every rank would use GPU 0)
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group("nccl")
    else:
        torch.distributed.init_process_group("gloo")
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()
