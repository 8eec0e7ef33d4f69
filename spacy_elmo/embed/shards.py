"""Shards of a distributed run: ``OUTPUT.shards/`` holds one small HDF5 file per
``shard_size`` input lines (datasets keyed by the global line index, as in the
final file, plus a ``sentences`` dataset with the lines) and ``index.json``.

A shard file is written whole and renamed into place, then listed in the index
(also replaced atomically); a shard counts as done only when both are there, so a
killed run never leaves a half shard behind and a restart redoes only the rest.
"""
import io
import json
import shutil
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import h5py
import numpy as np

from ..util.atomic import atomic_write_bytes, atomic_write_text
from .hdf5 import describe_diff, with_defaults
from .reader import iter_lines

INDEX_FILE = "index.json"


def shard_dir_for(output: Path) -> Path:
    return output.with_name(output.name + ".shards")


def shard_bytes(start: int, lines: Sequence[str], arrays: Sequence[np.ndarray]) -> bytes:
    """One shard as the bytes of an HDF5 file (made in memory by the worker)."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for offset, array in enumerate(arrays):
            f.create_dataset(str(start + offset), data=array)
        f.create_dataset("sentences", data=list(lines), dtype=h5py.string_dtype())
    return buffer.getvalue()


def iter_shards(path: Path, shard_size: int) -> Iterator[Tuple[int, int, List[str]]]:
    """``(shard id, first line index, lines)`` over the input, streamed."""
    lines: List[str] = []
    shard = start = 0
    for index, line in iter_lines(path):
        if not lines:
            start = index
        lines.append(line)
        if len(lines) == shard_size:
            yield shard, start, lines
            shard, lines = shard + 1, []
    if lines:
        yield shard, start, lines


class ShardIndex:
    """``index.json``: the run's settings and, per finished shard, its line range,
    file and word count."""

    def __init__(self, directory: Path, meta: Dict[str, Any], *, overwrite: bool = False) -> None:
        self.directory = Path(directory)
        self.meta = dict(meta)
        if overwrite and self.directory.exists():
            shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / INDEX_FILE
        self.shards: Dict[str, Dict[str, Any]] = {}
        if path.exists():
            stored = json.loads(path.read_text(encoding="utf-8"))
            old = with_defaults(stored.get("meta", {}))
            if old != self.meta:
                raise ValueError(
                    f"{self.directory} holds shards of another embed run ({describe_diff(old, self.meta)}); "
                    "use the same input and options to resume, or pass --overwrite"
                )
            self.shards = {k: v for k, v in stored["shards"].items() if (self.directory / v["file"]).is_file()}
        self._save()

    def done(self, shard: int) -> bool:
        return str(shard) in self.shards

    def add(self, shard: int, start: int, n_lines: int, n_words: int, data: bytes) -> None:
        name = f"shard-{shard:06d}.h5"
        atomic_write_bytes(self.directory / name, data)
        self.shards[str(shard)] = {"start": start, "stop": start + n_lines, "file": name, "n_words": n_words}
        self._save()

    def _save(self) -> None:
        text = json.dumps({"meta": self.meta, "shards": self.shards}, indent=1, sort_keys=True)
        atomic_write_text(self.directory / INDEX_FILE, text)

    def files(self) -> List[Path]:
        """The shard files in line order."""
        return [self.directory / v["file"] for v in sorted(self.shards.values(), key=lambda v: v["start"])]

    def covers(self, n_lines: int) -> bool:
        """Whether the finished shards hold lines 0..n_lines-1 exactly once."""
        ranges = sorted((v["start"], v["stop"]) for v in self.shards.values())
        expected = 0
        for start, stop in ranges:
            if start != expected:
                return False
            expected = stop
        return expected == n_lines

    def remove(self) -> None:
        shutil.rmtree(self.directory)
