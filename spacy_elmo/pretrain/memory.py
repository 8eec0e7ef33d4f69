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
"""
import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters of glibc's malloc.h
_M_MMAP_MAX = -4
_applied = False


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve large blocks from the heap and never trim it (process-wide,
    for the rest of the process). Returns whether it applied (False off Linux or without glibc)."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, -1))
    return _applied


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
