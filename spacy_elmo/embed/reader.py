"""Streaming the input file: one sentence (or, with ``tokenize``, one text) per line.

The file is read twice, never held in memory: ``scan_input`` checks it (UTF-8 text,
not binary, not empty), counts lines and words and fingerprints it; ``iter_lines``
then yields the lines one at a time.
"""
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Tuple


@dataclass(frozen=True)
class InputStats:
    n_lines: int
    n_blank: int
    n_words: int  # whitespace-separated tokens
    sha1: str


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    if b"\x00" in raw:
        raise ValueError(
            f"{path}: line {lineno} contains NUL bytes; this looks like a binary file, "
            "expected UTF-8 text with one sentence per line"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: line {lineno} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); "
            "expected UTF-8 text with one sentence per line"
        ) from None
    if lineno == 1 and text.startswith("\ufeff"):
        text = text[1:]
    return text.strip()


def iter_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """``(index, line)`` for every line of ``path``, stripped of surrounding
    whitespace (as AllenNLP's ``elmo`` command did); blank lines are yielded as ""."""
    path = Path(path)
    with path.open("rb") as f:
        for i, raw in enumerate(f):
            yield i, _decode(raw, path, i + 1)


def scan_input(path: Path) -> InputStats:
    """Check ``path`` once, streaming: a clear ``ValueError`` for a missing, binary,
    non-UTF-8 or empty file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: input file not found")
    digest = hashlib.sha1()
    n_lines = n_blank = n_words = 0
    with path.open("rb") as f:
        for raw in f:
            digest.update(raw)
            n_lines += 1
            words = len(_decode(raw, path, n_lines).split())
            n_blank += words == 0
            n_words += words
    if n_words == 0:
        raise ValueError(f"{path}: the input is empty (no line has a token)")
    return InputStats(n_lines=n_lines, n_blank=n_blank, n_words=n_words, sha1=digest.hexdigest())
