"""The pretraining output directory: whose it is, one run at a time, no litter.

A run writes only its own files (``OUTPUT_FILES``). It refuses a directory that holds
other files and no checkpoint (a user's directory, or a model of someone else's) unless
told ``force``, and takes a lock so that a second run into the same directory stops at
once with a clear error instead of overwriting the first one's work.
"""
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..bilm.serialize import MODEL_FILES
from ..util.atomic import atomic_write_text
from .checkpoint import CHECKPOINT

LOCK_NAME = "pretrain.lock"
METRICS_NAME = "metrics.jsonl"
OUTPUT_FILES = (CHECKPOINT, METRICS_NAME, LOCK_NAME) + tuple(MODEL_FILES)


def _is_temp_of_ours(name: str) -> bool:
    """Temporary files of the atomic writes (``.NAME.XXXX.tmp``), and of older versions
    (``tmpXXXX.tmp``)."""
    if name.startswith("tmp") and name.endswith(".tmp"):
        return True
    return any(name.startswith(f".{ours}.") and name.endswith(".tmp") for ours in OUTPUT_FILES)


def check_output_dir(path: Path, force: bool = False) -> None:
    """Refuse an output that is a file, or a directory holding files that are not a
    pretraining run's (no checkpoint) unless ``force``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output {path} is a file, not a directory")
    if not path.is_dir() or (path / CHECKPOINT).exists() or force:
        return
    foreign = sorted(p.name for p in path.iterdir() if p.name not in (METRICS_NAME, LOCK_NAME) and not _is_temp_of_ours(p.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(
            f"--output {path} is not empty ({shown}) and holds no pretraining checkpoint; choose a new or "
            f"empty directory, or pass --force to write the run's files there ({', '.join(MODEL_FILES)} "
            "are overwritten, other files are kept)"
        )


def remove_stale_temp_files(path: Path) -> List[str]:
    """Remove the temporary files a killed run left in ``path`` (call with the lock held)."""
    removed = []
    for p in Path(path).iterdir():
        if p.is_file() and _is_temp_of_ours(p.name):
            p.unlink()
            removed.append(p.name)
    return removed


def truncate_metrics(path: Path, step: int) -> None:
    """Drop the metrics records past ``step`` (written after the checkpoint a run resumes
    from, so that the resumed run does not repeat their steps) and any partial line."""
    metrics = Path(path) / METRICS_NAME
    if not metrics.exists():
        return
    kept = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            record: Dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and int(record.get("step", 0)) <= step:
            kept.append(line + "\n")
    atomic_write_text(metrics, "".join(kept))


class OutputLock:
    """An exclusive lock on an output directory (``pretrain.lock``, holding the owner's pid
    and host). The operating system releases it when its process ends, however it ends, so a
    lock file left by a killed run is stale and is taken over. Use as a context manager.

    path: the output directory (created if missing; an unwritable one fails here, at once).
    """

    def __init__(self, path: Path) -> None:
        self.dir = Path(path)
        self.path = self.dir / LOCK_NAME
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot create --output {self.dir}: {err.strerror}") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise ValueError(f"--output {self.dir} is not writable")
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise ValueError(f"cannot write to --output {self.dir}: {err.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                owner = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                    raise ValueError(
                        f"--output {self.dir} is in use by another pretraining run ({owner}); wait for it "
                        "to finish or stop it, or choose another --output"
                    ) from None
                raise
            # The file may have been removed (and re-created) by its previous owner between our
            # open and our lock: then we hold a lock on a file nobody else sees; try again.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode("utf-8"))
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "OutputLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
