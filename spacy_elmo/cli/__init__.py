"""Command line: ``python -m spacy_elmo COMMAND`` or ``spacy-elmo COMMAND``.

Each command is a thin typer wrapper over a plain, testable function.
"""
from ._app import app

# Importing the command modules registers their commands on ``app``.
from . import demo, init_pipeline, prepare, pretrain, perplexity, export, embed  # noqa: F401,E402,I001 (the order of --help)

__all__ = ["app"]
