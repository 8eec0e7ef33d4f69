"""torchrun support: the process group from the environment torchrun sets, and the
few collectives by which ranks agree (sums for logging, a stop flag)."""
import contextlib
import gc
import os
from typing import Iterator, Tuple

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
        # The trainer sits in a reference cycle: collect it (and its DDP module, which holds
        # the process group) now, not at interpreter exit after the group is gone, where
        # gloo's threads can abort the process ("terminate called without an active
        # exception", exit code -6, about one torchrun run in ten on a loaded CPU).
        gc.collect()
        torch.distributed.destroy_process_group()


def rank_world() -> Tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a process group."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def sum_over_ranks(value: float, device: torch.device) -> float:
    """The sum of ``value`` over all ranks (the value itself in a single process)."""
    if rank_world()[1] == 1:
        return value
    total = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(total)
    return float(total.item())


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when ``flag`` is true on any (so that all ranks stop at the same
    step and none is left waiting alone in a collective)."""
    if rank_world()[1] == 1:
        return flag
    value = torch.tensor([float(flag)], device=device)
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return bool(value.item())
