"""``export``: a model to the published AllenNLP layout or the own format (``spacy_elmo.export``)."""
from pathlib import Path
from typing import Optional

import typer

from ._app import app, clear_errors


@app.command("export")
@clear_errors
def export_cli(
    model_dir: Path = typer.Argument(..., help="model directory in the own format"),
    out_dir: Path = typer.Argument(..., help="output directory"),
    fmt: str = typer.Option("allennlp", "--format", help="allennlp (options.json + weights.hdf5) or elmo"),
    half: bool = typer.Option(False, "--half", help="with --format elmo: half-precision weights (--dtype float16)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="with --format elmo: float32 (default), float16 or int8 (int8 matrices with float32 scales)"),
    force: bool = typer.Option(False, "--force", help="overwrite the format's files in OUT_DIR (its other files are kept)"),
) -> None:
    """Export a model to the published AllenNLP layout or the own format."""
    from ..export import export

    typer.echo(f"Wrote {export(model_dir, out_dir, fmt, half, force=force, dtype=dtype)}")
