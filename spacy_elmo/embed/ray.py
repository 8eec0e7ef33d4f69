"""The Ray engine: the same work as ``local.py``, mapped over a Ray Data dataset of
input shards by a pool of actors (each loads the model once).

Without an address it starts a local Ray instance; with one it joins that cluster.
Workers send each finished shard back as the bytes of a small HDF5 file; this
process writes it under ``OUTPUT.shards/`` (see ``shards.py``), so workers need no
shared file system. When every shard is done they are merged into OUTPUT in the
AllenNLP layout (by default; ``merge=False`` keeps the shards for a later run).
Needs the ``ray`` extra: ``pip install "spacy-elmo[ray]"``.
"""
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from .embedder import Embedder, EmbedSettings, prefetch_weights
from .hdf5 import describe_diff, merge_shards, read_meta
from .local import EmbedReport, progress_bar, run_meta
from .reader import scan_input
from .shards import ShardIndex, iter_shards, shard_bytes, shard_dir_for


class ShardEmbedder:
    """The callable class of ``map_batches``: one per actor, the model loaded once.

    settings: what to compute (see ``EmbedSettings``).
    batch_size: lines per forward pass within a shard.
    use_gpu: run on the GPU Ray gives this actor (``--num-gpus-per-worker``).
    """

    def __init__(self, settings: EmbedSettings, batch_size: int, use_gpu: bool) -> None:
        import torch

        torch.set_num_threads(1)
        if use_gpu:
            import spacy

            spacy.require_gpu(0)  # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU
        self.embedder = Embedder(settings)
        self.batch_size = batch_size

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        payloads: List[bytes] = []
        n_words: List[int] = []
        for start, lines in zip(batch["start"], batch["lines"]):
            lines = [str(line) for line in lines]
            arrays: List[np.ndarray] = []
            for i in range(0, len(lines), self.batch_size):
                arrays.extend(self.embedder.embed(lines[i : i + self.batch_size]))
            payloads.append(shard_bytes(int(start), lines, arrays))
            n_words.append(sum(len(line.split()) for line in lines))
        return {
            "shard": batch["shard"],
            "start": batch["start"],
            "n_lines": np.asarray([len(lines) for lines in batch["lines"]], dtype=np.int64),
            "n_words": np.asarray(n_words, dtype=np.int64),
            "payload": np.asarray(payloads, dtype=object),
        }


def _start_ray(address: Optional[str]) -> bool:
    """Connect to ``address`` or start a local instance; True when this call did it."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=address, include_dashboard=False, logging_level="WARNING", log_to_driver=True)
    return True


def embed_file_ray(
    input_path: Path,
    output_path: Path,
    settings: EmbedSettings = EmbedSettings(),
    *,
    batch_size: int = 64,
    n_workers: int = 1,
    address: Optional[str] = None,
    num_gpus_per_worker: float = 0.0,
    shard_size: int = 1000,
    merge: bool = True,
    with_index: bool = True,
    overwrite: bool = False,
    progress: bool = True,
) -> EmbedReport:
    """Embed a text file on a Ray cluster into ``output_path`` (AllenNLP's layout).

    n_workers: actors in the pool (each reserves one CPU, or ``num_gpus_per_worker`` GPUs).
    address: a running cluster (``ray start --head`` prints it); None starts Ray
        here, unless this process already called ``ray.init``.
    shard_size: lines per shard, the unit of work and of resuming.
    merge: merge the shards into ``output_path`` once all are done, then remove them.
    The other arguments are those of ``local.embed_file``.
    """
    settings.check_device(gpu=num_gpus_per_worker > 0)  # where the actors run
    try:
        import ray
        import ray.data
    except ImportError:
        raise ValueError('--engine ray needs Ray: pip install "spacy-elmo[ray]"') from None
    if min(batch_size, n_workers, shard_size) < 1:
        raise ValueError("--batch-size, --n-process and --shard-size must be at least 1")
    begin = time.perf_counter()
    stats = scan_input(input_path)
    meta = dict(run_meta(settings, stats), shard_size=shard_size)
    output_path = Path(output_path)
    if output_path.exists() and not overwrite:
        done_meta = read_meta(output_path)
        if done_meta is not None and done_meta.pop("complete") and done_meta == meta:
            return EmbedReport(stats.n_lines, 0, stats.n_lines, 0, time.perf_counter() - begin)
        what = f" ({describe_diff(done_meta, meta)})" if done_meta is not None and done_meta != meta else ""
        raise ValueError(f"{output_path} exists and is not the finished output of this run{what}; pass --overwrite")
    index = ShardIndex(shard_dir_for(output_path), meta, overwrite=overwrite)
    items = [
        {"shard": shard, "start": start, "lines": lines}
        for shard, start, lines in iter_shards(input_path, shard_size)
        if not index.done(shard)
    ]
    n_skipped = stats.n_lines - sum(len(item["lines"]) for item in items)
    n_embedded = n_words = first_words = 0
    first_seconds = 0.0
    if items:
        done_words = sum(v["n_words"] for v in index.shards.values())
        prefetch_weights(settings)
        started = _start_ray(address)
        try:
            ray.data.DataContext.get_current().enable_progress_bars = False
            ds = ray.data.from_items(items, override_num_blocks=len(items))
            ds = ds.map_batches(
                ShardEmbedder,
                fn_constructor_kwargs={"settings": settings, "batch_size": batch_size, "use_gpu": num_gpus_per_worker > 0},
                batch_size=1,
                compute=ray.data.ActorPoolStrategy(size=n_workers),
                num_cpus=1,
                num_gpus=num_gpus_per_worker,
            )
            del items
            with progress_bar(stats, done_words, settings, progress) as bar:
                for row in ds.iter_rows():
                    index.add(int(row["shard"]), int(row["start"]), int(row["n_lines"]), int(row["n_words"]), row["payload"])
                    n_embedded += int(row["n_lines"])
                    n_words += int(row["n_words"])
                    bar.update(int(row["n_words"]))
                    if not first_words:
                        first_words, first_seconds = int(row["n_words"]), time.perf_counter() - begin
        finally:
            if started:
                ray.shutdown()
    if merge:
        if not index.covers(stats.n_lines):
            raise ValueError(f"{index.directory}: the shards do not cover the input's {stats.n_lines} lines; rerun")
        merge_shards(index.files(), output_path, meta, with_index)
        index.remove()
    return EmbedReport(
        stats.n_lines, n_embedded, n_skipped, n_words, time.perf_counter() - begin, first_words, first_seconds
    )
