"""``perplexity``: held-out perplexity of a model (``spacy_elmo.pretrain.perplexity``)."""
from pathlib import Path
from typing import Optional

import typer

from ._app import app, clear_errors


@app.command("perplexity")
@clear_errors
def perplexity_cli(
    model_dir: Path = typer.Argument(..., help="pretrained model directory"),
    text: Path = typer.Argument(..., help="text file (raw, .gz) or prepared corpus (.npz)"),
    kind: str = typer.Option("auto", "--kind", help="auto, plain, wikitext or imdb"),
    baseline_train: Optional[Path] = typer.Option(
        None, "--baseline-train", help="also print an add-one unigram baseline counted on this training text"
    ),
    threads: int = typer.Option(0, "--threads", help="torch CPU threads (0: torch's default)"),
    lang: str = typer.Option("en", "--lang", help="language of spaCy's tokenizer for raw text (as prepare --lang)"),
) -> None:
    """Held-out perplexity of a pretrained model on a text file."""
    from ..pretrain.perplexity import perplexity, unigram_baseline

    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    typer.echo(f"perplexity {perplexity(model_dir, text, kind, lang=lang, progress=True):.2f}")
    if baseline_train is not None:
        typer.echo(f"unigram baseline perplexity {unigram_baseline(model_dir, baseline_train, text, kind, lang=lang):.2f}")
