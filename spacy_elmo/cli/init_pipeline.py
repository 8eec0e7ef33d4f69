"""``init-pipeline``: a spaCy pipeline directory with an initialised ``elmo`` component."""
from pathlib import Path
from typing import Any, Dict, Optional, Union

import typer

from ._app import app


def weights_loader_config(weights: Union[str, Path]) -> Dict[str, Any]:
    """The loader block for a weights directory: the project's own format
    (config.json) or the published layout (options.json + one .hdf5 file); or, where no
    such path exists, the name of a published model (``spacy-elmo.PublishedLoader.v1``)."""
    from ..published import PUBLISHED

    if not Path(weights).exists() and str(weights) in PUBLISHED:
        return {"@misc": "spacy-elmo.PublishedLoader.v1", "name": str(weights)}
    weights = Path(weights)
    if (weights / "config.json").exists():
        return {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(weights)}
    hdf5 = sorted(weights.glob("*.hdf5")) if weights.is_dir() else []
    if (weights / "options.json").exists() and len(hdf5) == 1:
        return {
            "@misc": "spacy-elmo.AllenNLPLoader.v1",
            "options_path": str(weights / "options.json"),
            "weights_path": str(hdf5[0]),
        }
    raise ValueError(
        f"{weights}: expected a spacy-elmo model directory (config.json + model.safetensors), "
        "a directory with options.json and one .hdf5 weights file, or a published model name "
        f"({', '.join(PUBLISHED)})"
    )


def init_pipeline(weights: Path, output_dir: Path, lang: str = "en", frozen: bool = True) -> Path:
    """Create ``output_dir`` holding a blank ``lang`` pipeline with an initialised
    ``elmo`` component (the weights are copied into the pipeline)."""
    import spacy

    nlp = spacy.blank(lang)
    nlp.add_pipe("elmo", config={"frozen": frozen})
    nlp.config["initialize"]["components"]["elmo"] = {"loader": weights_loader_config(weights)}
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
