"""``embed``: a corpus in, ELMo vectors out (AllenNLP's ``elmo`` HDF5 layout, or
``.spacy`` to ``.spacy``). The work is done by ``spacy_elmo.embed``."""
from pathlib import Path
from typing import Optional

import typer

from ._app import app, clear_errors


@app.command("embed")
@clear_errors
def embed_cli(
    input_path: Path = typer.Argument(..., help="text, one sentence per line (or raw text with --tokenize), or a .spacy DocBin"),
    output_path: Path = typer.Argument(..., help="HDF5 file in AllenNLP's elmo layout (a .spacy file for a .spacy input)"),
    weights: Optional[str] = typer.Option(None, "--weights", help="model dir (either format) or published model name; default: the shipped English model"),
    layers: str = typer.Option("all", "--layers", help="all: (3, n, 2P); top or average: (n, 2P)"),
    dtype: str = typer.Option("float32", "--dtype", help="float32 or float16 for the stored vectors"),
    precision: str = typer.Option("float32", "--precision", help="how the biLM computes: float32, int8 (CPU) or bf16 / fp16 (CUDA: ray with --num-gpus-per-worker)"),
    batch_size: int = typer.Option(64, "--batch-size", help="lines per batch (written and flushed per batch)"),
    n_process: int = typer.Option(1, "--n-process", help="worker processes (local) or actors (ray), one torch thread each"),
    tokenize: bool = typer.Option(False, "--tokenize", help="lines are raw text: spaCy's tokenizer and the elmo component's segmentation"),
    max_length: int = typer.Option(256, "--max-length", help="longest biLM sentence in tokens; longer ones are cut"),
    lang: str = typer.Option("en", "--lang", help="language of the tokenizer used with --tokenize"),
    forget_sentences: bool = typer.Option(False, "--forget-sentences", help="leave out the sentence_to_index map"),
    overwrite: bool = typer.Option(False, "--overwrite", help="start afresh instead of resuming an existing output"),
    engine: str = typer.Option("local", "--engine", help="local (this machine) or ray (a Ray cluster; needs the ray extra)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="join this Ray cluster (default: start a local Ray instance)"),
    num_gpus_per_worker: float = typer.Option(0.0, "--num-gpus-per-worker", help="GPUs each Ray actor reserves (and runs on)"),
    shard_size: int = typer.Option(1000, "--shard-size", help="lines per Ray shard (the unit of resuming)"),
    merge: bool = typer.Option(True, "--merge/--no-merge", help="ray: merge the shards into OUTPUT when all are done (--no-merge keeps OUTPUT.shards/ only)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
) -> None:
    """Embed a corpus with ELMo: one HDF5 dataset per input line (AllenNLP's layout),
    or a .spacy file whose Docs carry doc._.elmo. An interrupted run, started again
    with the same options, continues where it stopped."""
    from ..embed import EmbedSettings, embed_docbin, embed_file

    settings = EmbedSettings(
        weights=weights, layers=layers, dtype=dtype, tokenize=tokenize, max_length=max_length, lang=lang, precision=precision
    )
    if engine not in ("local", "ray"):
        raise ValueError(f"--engine must be local or ray, got {engine!r}")
    if engine == "local" and (ray_address is not None or num_gpus_per_worker > 0):
        raise ValueError("--ray-address and --num-gpus-per-worker need --engine ray")
    if input_path.suffix == ".spacy":
        if engine != "local" or output_path.suffix != ".spacy":
            raise ValueError("a .spacy input needs a .spacy output and --engine local")
        report = embed_docbin(input_path, output_path, settings, batch_size=batch_size, n_process=n_process, progress=not quiet)
    elif engine == "ray":
        from ..embed.ray import embed_file_ray

        report = embed_file_ray(
            input_path, output_path, settings, batch_size=batch_size, n_workers=n_process,
            address=ray_address, num_gpus_per_worker=num_gpus_per_worker, shard_size=shard_size,
            merge=merge, with_index=not forget_sentences, overwrite=overwrite, progress=not quiet,
        )
    else:
        report = embed_file(
            input_path, output_path, settings, batch_size=batch_size, n_process=n_process,
            with_index=not forget_sentences, overwrite=overwrite, progress=not quiet,
        )
    resumed = f", {report.n_skipped} already done" if report.n_skipped else ""
    typer.echo(
        f"Embedded {report.n_embedded} of {report.n_lines} lines{resumed} "
        f"({report.n_words} tokens, {report.words_per_second:,.0f} tokens/s) -> {output_path}"
    )
