import functools
import os
from typing import Any, Callable, TypeVar

import typer

app = typer.Typer(
    name="spacy-elmo",
    help="spaCy ELMo: pretrain, evaluate, export and package ELMo biLMs.",
    no_args_is_help=True,
    add_completion=False,
)

F = TypeVar("F", bound=Callable[..., Any])


def clear_errors(command: F) -> F:
    """Bad input (a missing file, an empty corpus, an unknown config value) ends the
    command with its one-line message and exit status 1 instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (ValueError, OSError, KeyError) as err:
            message = err.args[0] if isinstance(err, KeyError) and err.args else err
            typer.echo(f"Error: {message}", err=True)
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:  # an unforeseen failure: still one line (the traceback on request)
            if os.environ.get("SPACY_ELMO_TRACEBACK"):
                raise
            first = str(err).splitlines()[0] if str(err) else ""
            typer.echo(f"Error: {type(err).__name__}: {first} (set SPACY_ELMO_TRACEBACK=1 for the traceback)", err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]
