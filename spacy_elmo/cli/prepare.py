"""``prepare``: raw text to the prepared corpus file (``spacy_elmo.pretrain.data.prepare``)."""
from pathlib import Path
from typing import List

import typer

from ._app import app, clear_errors


@app.command("prepare")
@clear_errors
def prepare_cli(
    texts: List[Path] = typer.Argument(..., help="raw text files (.txt, .gz, or an aclImdb .tar.gz)"),
    output: Path = typer.Option(..., "--output", "-o", help="prepared corpus file (.npz)"),
    kind: str = typer.Option("auto", "--kind", help="auto, plain, wikitext or imdb"),
    lang: str = typer.Option("en", "--lang", help="language code of spaCy's tokenizer (spacy.blank(LANG)), e.g. de, fr"),
) -> None:
    """Tokenize and sentence-split raw text once into the corpus file pretraining reads."""
    from ..pretrain.data import prepare

    stats = prepare(texts, output, kind, lang=lang, progress=True)
    typer.echo(f"Wrote {output}: {stats['sentences']:,} sentences, {stats['tokens']:,} tokens, {stats['types']:,} types")
