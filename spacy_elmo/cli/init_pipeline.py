"""``init-pipeline``: a spaCy pipeline directory with an initialised ``elmo`` component."""
from pathlib import Path

import typer

from ..loaders import resolve_weights
from ._app import app


def init_pipeline(weights: Path, output_dir: Path, lang: str = "en", frozen: bool = True) -> Path:
    """Create ``output_dir`` holding a blank ``lang`` pipeline with an initialised
    ``elmo`` component (the weights are copied into the pipeline)."""
    import spacy

    nlp = spacy.blank(lang)
    nlp.add_pipe("elmo", config={"frozen": frozen})
    nlp.config["initialize"]["components"]["elmo"] = {"loader": resolve_weights(weights)}
    nlp.initialize()
    # The weights now live in the pipeline; the original files are not needed to load it.
    nlp.config["initialize"]["components"] = {}
    nlp.to_disk(output_dir)
    return Path(output_dir)


@app.command("init-pipeline")
def init_pipeline_cli(
    weights: Path = typer.Argument(..., help="spacy-elmo model dir, dir with options.json + weights .hdf5, or a published model name (small, medium, original, original-5.5b, pubmed, pt-wikipedia, pt-brwac, ja)"),
    output_dir: Path = typer.Argument(..., help="where to write the spaCy pipeline"),
    lang: str = typer.Option("en", "--lang", help="language of the blank pipeline"),
    fine_tune: bool = typer.Option(False, "--fine-tune", help="set frozen = false (fine-tune the biLM)"),
) -> None:
    """Make a spaCy pipeline directory with an initialised `elmo` component."""
    out = init_pipeline(weights, output_dir, lang=lang, frozen=not fine_tune)
    typer.echo(f"Saved pipeline with an initialised 'elmo' component to {out}")
