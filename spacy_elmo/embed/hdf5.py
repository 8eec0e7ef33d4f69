"""The output file, in the layout AllenNLP's ``elmo`` command writes.

- one float dataset per input line, named by the line's index (``"0"``, ``"1"``, ...):
  ``(3, n_tokens, 2P)`` for ``all`` layers, ``(n_tokens, 2P)`` for ``top`` / ``average``;
- ``sentence_to_index``: a one-element variable-length string dataset holding the
  JSON map from each (stripped) line to its key (a repeated line maps to its last key).

A blank line gets an empty ``(3, 0, 2P)`` / ``(0, 2P)`` dataset, so keys stay line
numbers (AllenNLP refused such files). The root's ``spacy_elmo`` attribute (JSON:
the settings and the input's fingerprint) lets a restarted run check that it
continues the same job; readers of the AllenNLP layout never look at it.

The file is flushed after every batch and its metadata is kept in memory between
flushes, so a killed run leaves a readable file holding every batch up to the last
flush; a restart skips the lines already in it.
"""
import json
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import h5py
import numpy as np

from ..util.atomic import atomic_path

INDEX_KEY = "sentence_to_index"
META_ATTR = "spacy_elmo"
# Settings added after outputs were first written, with the value older files had.
META_DEFAULTS: Dict[str, Any] = {"precision": "float32"}


def with_defaults(meta: Dict[str, Any]) -> Dict[str, Any]:
    """Stored settings with ``META_DEFAULTS`` for the ones an older file lacks."""
    return {**META_DEFAULTS, **meta}


def describe_diff(stored: Dict[str, Any], now: Dict[str, Any]) -> str:
    """The settings that differ, each with its stored and its current value."""
    keys = sorted(k for k in set(stored) | set(now) if stored.get(k) != now.get(k))
    return ", ".join(f"{k}: {stored.get(k)!r} in the file, {now.get(k)!r} now" for k in keys)


def _hold_metadata(f: h5py.File) -> None:
    """Keep dirty metadata in memory until ``flush`` (no evictions in between), so
    the file on disk changes its structure only at a flush."""
    config = f.id.get_mdc_config()
    config.evictions_enabled = False
    config.incr_mode = 0  # H5C_incr__off: required with evictions off
    config.flash_incr_mode = 0
    config.decr_mode = 0
    config.initial_size = config.max_size = 32 * 2**20
    f.id.set_mdc_config(config)


def read_meta(path: Path) -> Optional[Dict[str, Any]]:
    """The settings stored in an output file (None: not written by spacy-elmo embed)."""
    with h5py.File(path, "r") as f:
        stored = f.attrs.get(META_ATTR)
        meta = with_defaults(json.loads(stored)) if stored is not None else None
        if meta is not None:
            meta["complete"] = bool(f.attrs.get("complete", False))
        return meta


def open_new(path: Path) -> h5py.File:
    # fs_strategy "none": freed space is never reused, so data written after a flush
    # cannot overwrite metadata the last flushed state still points to.
    f = h5py.File(path, "w", libver=("earliest", "v110"), fs_strategy="none", track_order=False)
    _hold_metadata(f)
    return f


class EmbeddingWriter:
    """Writes line datasets into ``path``, resuming a file written with the same
    ``meta`` (settings and input fingerprint)."""

    def __init__(self, path: Path, meta: Dict[str, Any], *, overwrite: bool = False) -> None:
        self.path = Path(path)
        self.meta = dict(meta)
        if self.path.exists() and not overwrite:
            self.file = h5py.File(self.path, "a")
            _hold_metadata(self.file)
            self._check_meta()
        else:
            self.file = open_new(self.path)
            self.file.attrs[META_ATTR] = json.dumps(self.meta, sort_keys=True)
            self.file.flush()
        self.done: Set[str] = {key for key in self.file.keys() if key != INDEX_KEY}

    def _check_meta(self) -> None:
        stored = self.file.attrs.get(META_ATTR)
        if stored is None:
            self.file.close()
            raise ValueError(
                f"{self.path} exists and was not written by spacy-elmo embed; "
                "remove it, pick another output or pass --overwrite"
            )
        old = with_defaults(json.loads(stored))
        if any(old.get(k) != v for k, v in self.meta.items()):
            self.file.close()
            what = describe_diff({k: old.get(k) for k in self.meta}, self.meta)
            raise ValueError(
                f"{self.path} was written by another embed run ({what}); "
                "use the same input and options to resume, or pass --overwrite"
            )

    @property
    def complete(self) -> bool:
        return bool(self.file.attrs.get("complete", False))

    def write(self, items: Iterable[Tuple[int, np.ndarray]]) -> None:
        """Write one batch of ``(line index, array)`` and flush."""
        for index, array in items:
            key = str(index)
            if key in self.done:
                raise ValueError(f"{self.path}: line {index} is already written")
            self.file.create_dataset(key, data=array)
            self.done.add(key)
        self.file.flush()

    def finish(self, lines: Optional[Iterable[Tuple[int, str]]]) -> None:
        """Write ``sentence_to_index`` from ``(index, line)`` (None: leave it out),
        mark the file complete and close it."""
        if lines is not None:
            write_sentence_index(self.file, lines)
        self.file.attrs["complete"] = True
        self.close()

    def close(self) -> None:
        if self.file.id.valid:
            self.file.close()


def write_sentence_index(f: h5py.File, lines: Iterable[Tuple[int, str]]) -> None:
    mapping = {line: str(index) for index, line in lines}
    if INDEX_KEY in f:
        del f[INDEX_KEY]
    dset = f.create_dataset(INDEX_KEY, (1,), dtype=h5py.string_dtype())
    dset[0] = json.dumps(mapping)


def read_layout(path: Path) -> Tuple[Dict[str, int], Iterator[Tuple[str, np.ndarray]]]:
    """The ``sentence_to_index`` map of an output file and its line datasets in line
    order (a reader of AllenNLP's layout, for checks and tests)."""
    f = h5py.File(path, "r")
    mapping = json.loads(f[INDEX_KEY][0]) if INDEX_KEY in f else {}
    keys = sorted((k for k in f.keys() if k != INDEX_KEY), key=int)

    def arrays() -> Iterator[Tuple[str, np.ndarray]]:
        with f:
            for key in keys:
                yield key, f[key][()]

    return mapping, arrays()


def shard_keys(f: h5py.File) -> List[str]:
    return sorted((k for k in f.keys() if k.isdigit()), key=int)


def merge_shards(shards: Sequence[Path], output: Path, meta: Dict[str, Any], with_index: bool) -> None:
    """Copy the line datasets of shard files (see ``ray.py``) into one file in the
    AllenNLP layout, written beside ``output`` and renamed over it at the end."""
    with atomic_path(output, suffix=".h5") as tmp, open_new(tmp) as out:
        out.attrs[META_ATTR] = json.dumps(meta, sort_keys=True)
        mapping: Dict[str, str] = {}
        for shard in shards:
            with h5py.File(shard, "r") as f:
                keys = shard_keys(f)
                for key in keys:
                    f.copy(f[key], out, name=key)
                if with_index:
                    for key, line in zip(keys, f["sentences"].asstr()[()]):
                        mapping[line] = key
            out.flush()
        if with_index:
            dset = out.create_dataset(INDEX_KEY, (1,), dtype=h5py.string_dtype())
            dset[0] = json.dumps(mapping)
        out.attrs["complete"] = True
