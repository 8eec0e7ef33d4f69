"""Command line: ``python -m spacy_elmo COMMAND`` or ``spacy-elmo COMMAND``.

Each command is a thin typer wrapper over a plain, testable function.
"""
from ._app import app

# Importing the command modules registers their commands on ``app``.
from . import demo, embed, init_pipeline, pretrain  # noqa: F401,E402

__all__ = ["app"]
