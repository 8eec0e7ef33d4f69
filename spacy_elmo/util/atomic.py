"""Atomic file writes: a reader sees the old file or the new one, never a part.

The new content goes to a temporary file in the target's directory (same file
system), which then replaces the target with ``os.replace``. On any error the
temporary file is removed and the target is left as it was.
"""
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, os.PathLike]


def file_mode() -> int:
    """The mode a plain ``open()`` would give a new file under the current umask
    (mkstemp makes 0o600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def remove_stale_temps(path: PathLike, *, suffix: str = ".tmp") -> int:
    """Remove temporary files that a killed writer of ``path`` left beside it (those
    ``atomic_path(path, suffix=suffix)`` makes); returns how many. Call it before writing
    ``path`` again, when no other process writes the same file."""
    path = Path(path)
    stale = list(path.parent.glob(f".{path.name}.*{suffix}")) if path.parent.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return len(stale)


@contextlib.contextmanager
def atomic_path(path: PathLike, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; write it completely inside the
    ``with`` block (with any library that takes a path: ``torch.save``, h5py, NumPy).
    On a normal exit it replaces ``path``; on an exception it is removed.

    suffix: the temporary file's suffix (some writers look at it, e.g. ``.npz``).
    The parent directory must exist.
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (flushed to disk before the rename)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode(encoding))
