"""Keep freed host memory in the process for reuse (glibc only), so that a training step's large
buffers do not fault in fresh pages at every step.

glibc serves every allocation above its mmap threshold (at most 32 MB) with a fresh ``mmap``
and unmaps it on free; the next step's buffer of that size then faults in and zeroes every
4 KB page again. At ``small`` (8,192-token batches) a step allocates about 2 GB that way: about
500,000 page faults and a second of kernel time in a 7.8 s step on one thread. With mmap turned
off and the heap never trimmed, freed blocks go back to the heap and the next step reuses them
(about 16,000 faults and 0.1 s). Resident memory then stays near the run's peak, which a
training process reaches at every step anyway.

``limit_onednn_cache`` bounds the other thing that grew a pretraining process's memory: the
products of a bf16 or fp16 run on the CPU go through oneDNN, which keeps a compiled primitive for
every shape it has met, up to 1,024 by default. The fused LSTM's per-step products have one row
count per step of the packed batch, and the set of row counts differs from batch to batch, so the
cache fills with primitives that are rarely used again.

``host_memory`` reports what the process holds (resident memory, its peak, the heap and its free
part), for the trainer's progress records.
"""
import ctypes
import ctypes.util
import functools
import os
import sys
from typing import Dict

_M_TRIM_THRESHOLD = -1  # mallopt parameters of glibc's malloc.h
_M_MMAP_MAX = -4
_applied = False
GB = 1e9


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later): every field a ``size_t``."""

    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve large blocks from the heap and never trim it (process-wide,
    for the rest of the process). Returns whether it applied (False off Linux or without glibc)."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, -1))
    return _applied


def host_memory() -> Dict[str, float]:
    """The process's memory in GB: resident now (``resident_gb``) and at its peak so far
    (``peak_resident_gb``, Linux), and under glibc what its heap holds (``heap_gb``: malloc's
    arenas) and how much of that is free for reuse (``heap_free_gb``). Keys that cannot be read
    are left out."""
    found: Dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS:", "VmHWM:")))
        found["resident_gb"] = int(fields["VmRSS"].split()[0]) * 1024 / GB
        found["peak_resident_gb"] = int(fields["VmHWM"].split()[0]) * 1024 / GB
    except (OSError, ValueError, KeyError, IndexError):
        return found
    try:
        mallinfo2 = _libc().mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc before 2.33
        return found
    mallinfo2.argtypes, mallinfo2.restype = [], _MallInfo2
    info = mallinfo2()
    found["heap_gb"], found["heap_free_gb"] = info.arena / GB, info.fordblks / GB
    return found


ONEDNN_CACHE_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_CACHE_CAPACITY = 64


def limit_onednn_cache(capacity: int = ONEDNN_CACHE_CAPACITY) -> str:
    """Bound oneDNN's primitive cache to ``capacity`` entries, process-wide, unless the environment
    already sets ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` (the user's value wins). Returns the value in
    force. oneDNN reads it once, when it creates its first primitive, so this must run before
    any oneDNN product in the process (``pretrain`` calls it before it builds the model).

    Measured on a 2-core Intel Xeon with AMX (``docs/pretraining.md``, "Memory"): the shipped
    model's shape in bf16 with 32,768-token batches grew past 18 GB by step 180 with oneDNN's
    default of 1,024; with 64 it was at 8.2 GB at step 200 and 12.6 GB at step 400, at the same
    tokens/s.
    """
    if capacity < 0:
        raise ValueError(f"oneDNN primitive cache capacity must be 0 or more, not {capacity}")
    return os.environ.setdefault(ONEDNN_CACHE_ENV, str(capacity))
