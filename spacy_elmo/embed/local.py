"""Embedding on one machine: one process, or a pool of ``n_process`` workers with
one torch thread each. Input is streamed and every batch is written (and flushed)
as soon as it is done, so memory stays bounded whatever the input size."""
import multiprocessing
import sys
import time
from collections import deque
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Deque, Iterable, Iterator, List, Optional, Tuple

import numpy as np
from tqdm import tqdm

from ..util.atomic import atomic_path
from .embedder import Embedder, EmbedSettings, on_gpu, prefetch_weights
from .hdf5 import EmbeddingWriter
from .reader import InputStats, iter_lines, scan_input

Batch = List[Tuple[int, str]]


@dataclass
class EmbedReport:
    n_lines: int  # lines in the input
    n_embedded: int  # lines embedded by this run
    n_skipped: int  # lines already in the output (resumed run)
    n_words: int  # whitespace tokens embedded by this run
    seconds: float
    first_words: int = 0  # tokens of the first batch (or shard) written
    first_seconds: float = 0.0  # time until it was written: start-up (model loading) plus its work

    @property
    def steady_words_per_second(self) -> float:
        """Throughput after the first batch: what a large corpus sees."""
        seconds = self.seconds - self.first_seconds
        return (self.n_words - self.first_words) / seconds if seconds > 0 else 0.0

    @property
    def words_per_second(self) -> float:
        return self.n_words / self.seconds if self.seconds > 0 else 0.0


def run_meta(settings: EmbedSettings, stats: InputStats) -> dict:
    """What a resumed run must share with the run that started the output."""
    meta = settings.to_dict()
    meta.update(input_sha1=stats.sha1, n_lines=stats.n_lines)
    return meta


def batches(lines: Iterable[Tuple[int, str]], batch_size: int) -> Iterator[Batch]:
    it = iter(lines)
    while True:
        batch = list(islice(it, batch_size))
        if not batch:
            return
        yield batch


def progress_bar(stats: InputStats, done_words: int, settings: EmbedSettings, show: bool) -> tqdm:
    unit = "word" if settings.tokenize else "tok"
    return tqdm(
        total=stats.n_words, initial=done_words, unit=unit, unit_scale=True, file=sys.stderr,
        disable=not show, dynamic_ncols=True, smoothing=0.1,
    )


# Worker processes ---------------------------------------------------------------------

_WORKER: Optional[Embedder] = None


def _init_worker(settings: EmbedSettings) -> None:
    import torch

    global _WORKER
    torch.set_num_threads(1)
    _WORKER = Embedder(settings)


def _embed_in_worker(batch: Batch) -> List[Tuple[int, np.ndarray]]:
    assert _WORKER is not None
    return list(zip((i for i, _ in batch), _WORKER.embed([line for _, line in batch])))


def map_batches(
    work: Iterable[Batch], settings: EmbedSettings, n_process: int
) -> Iterator[Tuple[Batch, List[Tuple[int, np.ndarray]]]]:
    """``(batch, results)`` in input order; with ``n_process > 1`` at most
    ``2 * n_process`` batches are in flight (bounded memory)."""
    if n_process <= 1:
        embedder = Embedder(settings)
        for batch in work:
            yield batch, list(zip((i for i, _ in batch), embedder.embed([line for _, line in batch])))
        return
    prefetch_weights(settings)
    ctx = multiprocessing.get_context("spawn")  # no fork after torch/OpenMP started
    with ctx.Pool(n_process, initializer=_init_worker, initargs=(settings,)) as pool:
        pending: Deque[Tuple[Batch, Any]] = deque()
        for batch in work:
            pending.append((batch, pool.apply_async(_embed_in_worker, (batch,))))
            if len(pending) >= 2 * n_process:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()


def embed_file(
    input_path: Path,
    output_path: Path,
    settings: EmbedSettings = EmbedSettings(),
    *,
    batch_size: int = 64,
    n_process: int = 1,
    with_index: bool = True,
    overwrite: bool = False,
    progress: bool = True,
) -> EmbedReport:
    """Embed a text file (one sentence, or with ``settings.tokenize`` one text, per
    line) into ``output_path`` in AllenNLP's ``elmo`` layout (see ``hdf5.py``).

    batch_size: lines per batch (each batch is written and flushed when done).
    n_process: worker processes (one torch thread each); 1 runs in this process.
    with_index: write the ``sentence_to_index`` JSON map (its size is that of the
        input's text; it is built at the end by reading the input once more).
    overwrite: start afresh instead of resuming an existing output.
    """
    if batch_size < 1 or n_process < 1:
        raise ValueError("--batch-size and --n-process must be at least 1")
    settings.check_device(gpu=n_process == 1 and on_gpu())  # spawned workers run on the CPU
    start = time.perf_counter()
    stats = scan_input(input_path)
    writer = EmbeddingWriter(output_path, run_meta(settings, stats), overwrite=overwrite)
    try:
        done = writer.done
        todo = (item for item in iter_lines(input_path) if str(item[0]) not in done)
        done_words = sum(len(line.split()) for i, line in iter_lines(input_path) if str(i) in done) if done else 0
        n_skipped, n_embedded, n_words = len(done), 0, 0
        first_words, first_seconds = 0, 0.0
        if writer.complete:
            return EmbedReport(stats.n_lines, 0, n_skipped, 0, time.perf_counter() - start)
        with progress_bar(stats, done_words, settings, progress) as bar:
            for batch, results in map_batches(batches(todo, batch_size), settings, n_process):
                writer.write(results)
                words = sum(len(line.split()) for _, line in batch)
                n_embedded += len(batch)
                n_words += words
                bar.update(words)
                if not first_words:
                    first_words, first_seconds = words, time.perf_counter() - start
        writer.finish(iter_lines(input_path) if with_index else None)
    finally:
        writer.close()
    return EmbedReport(
        stats.n_lines, n_embedded, n_skipped, n_words, time.perf_counter() - start, first_words, first_seconds
    )


def embed_docbin(
    input_path: Path,
    output_path: Path,
    settings: EmbedSettings = EmbedSettings(),
    *,
    batch_size: int = 64,
    n_process: int = 1,
    progress: bool = True,
) -> EmbedReport:
    """``.spacy`` in, ``.spacy`` out: every Doc gets ``doc._.elmo`` (all layers,
    float32, as the component sets it), kept by ``DocBin(store_user_data=True)``.
    The Docs keep their own sentence boundaries; the output is written beside
    ``output_path`` and renamed over it when complete (a rerun starts again)."""
    from spacy.tokens import DocBin

    if settings.layers != "all" or settings.dtype != "float32":
        raise ValueError("the DocBin mode stores doc._.elmo as the component sets it: all layers, float32")
    if not Path(input_path).is_file():
        raise ValueError(f"{input_path}: input file not found")
    settings.check_device(gpu=n_process == 1 and on_gpu())
    start = time.perf_counter()
    embedder = Embedder(settings)
    try:
        docs = list(DocBin().from_disk(input_path).get_docs(embedder.nlp.vocab))
    except Exception as err:  # msgpack/zlib errors of a damaged or non-DocBin file
        raise ValueError(f"{input_path}: not a readable .spacy (DocBin) file ({err})") from None
    if not docs or not any(len(doc) for doc in docs):
        raise ValueError(f"{input_path}: the DocBin holds no tokens")
    out = DocBin(store_user_data=True)
    n_words = sum(len(doc) for doc in docs)
    with progress_bar(InputStats(len(docs), 0, n_words, ""), 0, settings, progress) as bar:
        for doc in embedder.nlp.pipe(docs, batch_size=batch_size, n_process=n_process):
            out.add(doc)
            bar.update(len(doc))
    with atomic_path(Path(output_path), suffix=".spacy") as tmp:
        out.to_disk(tmp)
    return EmbedReport(len(docs), len(docs), 0, n_words, time.perf_counter() - start)
