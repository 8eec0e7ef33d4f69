"""``init-pipeline``: a spaCy pipeline directory with an initialised ``elmo`` component."""
from pathlib import Path

import typer

from ..loaders import resolve_weights
from ._app import app, clear_errors


def check_output_dir(output_dir: Path, force: bool) -> None:
    """Refuse to write a pipeline over a file, or into a non-empty directory unless
    ``force`` (then only the pipeline's own files are written; others are kept)."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"{output_dir} is a file, not a directory: give a directory for the pipeline")
    if output_dir.is_dir() and not force:
        held = sorted(p.name for p in output_dir.iterdir())
        if held:
            shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
            raise ValueError(
                f"{output_dir} is not empty (it holds {shown}); pass --force to write the "
                "pipeline's files (config.cfg, meta.json, tokenizer, vocab/, elmo/) into it anyway"
            )


def init_pipeline(
    weights: Path, output_dir: Path, lang: str = "en", frozen: bool = True, force: bool = False
) -> Path:
    """Create ``output_dir`` holding a blank ``lang`` pipeline with an initialised
    ``elmo`` component (the weights are copied into the pipeline).

    force: write into a non-empty ``output_dir``; only the pipeline's own files are
        written (an existing pipeline's files of the same names are replaced)."""
    import spacy

    check_output_dir(output_dir, force)
    try:
        nlp = spacy.blank(lang)
    except ImportError:
        raise ValueError(f"unknown language code {lang!r} for --lang (spaCy has no such language)") from None
    nlp.add_pipe("elmo", config={"frozen": frozen})
    nlp.config["initialize"]["components"]["elmo"] = {"loader": resolve_weights(weights)}
    nlp.initialize()
    # The weights now live in the pipeline; the original files are not needed to load it.
    nlp.config["initialize"]["components"] = {}
    nlp.to_disk(output_dir)
    return Path(output_dir)


@app.command("init-pipeline")
@clear_errors
def init_pipeline_cli(
    weights: Path = typer.Argument(..., help="spacy-elmo model dir, dir with options.json + weights .hdf5, or a published model name (small, medium, original, original-5.5b, pubmed, pt-wikipedia, pt-brwac, ja)"),
    output_dir: Path = typer.Argument(..., help="where to write the spaCy pipeline"),
    lang: str = typer.Option("en", "--lang", help="language of the blank pipeline"),
    fine_tune: bool = typer.Option(False, "--fine-tune", help="set frozen = false (fine-tune the biLM)"),
    force: bool = typer.Option(False, "--force", help="write into a non-empty OUTPUT_DIR (only the pipeline's own files)"),
) -> None:
    """Make a spaCy pipeline directory with an initialised `elmo` component."""
    out = init_pipeline(weights, output_dir, lang=lang, frozen=not fine_tune, force=force)
    typer.echo(f"Saved pipeline with an initialised 'elmo' component to {out}")
