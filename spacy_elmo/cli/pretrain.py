"""``pretrain``: train a biLM (``spacy_elmo.pretrain.run``)."""
import os
from pathlib import Path

import typer

from ._app import app, clear_errors


@app.command("pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@clear_errors
def pretrain_cli(
    ctx: typer.Context,
    config_path: Path = typer.Argument(..., help="pretraining config (e.g. configs/pretrain/tiny.cfg)"),
    output: Path = typer.Option(..., "--output", "-o", help="output directory (model + checkpoints)"),
    force: bool = typer.Option(False, "--force", help="write into a directory that holds other files (model files there are overwritten)"),
) -> None:
    """Train a biLM (resumes from OUTPUT's checkpoint). Override settings like --training.max_steps 1000."""
    from spacy.cli._util import parse_config_overrides

    from ..pretrain.run import pretrain

    result = pretrain(config_path, output, parse_config_overrides(ctx.args), force=force)
    if int(os.environ.get("RANK", "0")) == 0:  # a run stopped by a signal says so, not "Done"
        if not result.get("stopped"):
            typer.echo(f"Done at step {result['step']}; model in {output}")
