"""Clear errors of the ``elmo`` component: damaged saved weights, and listeners that
would never receive layers."""
import contextlib
from typing import Iterator, Set

from spacy.language import Language
from thinc.api import Model

from .bilm import OptionsError, WeightsError
from .layers.listener import ElmoListener


@contextlib.contextmanager
def clear_load_errors(source: str) -> Iterator[None]:
    """A damaged or truncated ``elmo/model`` file fails inside msgpack or safetensors
    with a message such as "Unpack failed"; name the file and what is wrong instead."""
    try:
        yield
    except (WeightsError, OptionsError) as err:
        raise type(err)(f"elmo: {source}: {err}") from None
    except (ValueError, TypeError, KeyError, EOFError) as err:
        raise ValueError(
            f"elmo: {source} is truncated or damaged and cannot be read ({type(err).__name__}: {err}); "
            "copy the pipeline again or re-create it with `python -m spacy_elmo init-pipeline`"
        ) from None


def check_listener_upstreams(nlp: Language, elmo_names: Set[str]) -> None:
    """An ElmoListener whose ``upstream`` names none of the pipeline's ``elmo``
    components (``elmo_names``) would never receive layers in training: say so at
    initialize."""
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if not isinstance(model, Model):
            continue
        for node in model.walk():
            if isinstance(node, ElmoListener) and node.upstream_name != "*" and node.upstream_name not in elmo_names:
                raise ValueError(
                    f"elmo: component '{name}' has an ElmoListener with upstream = "
                    f"{node.upstream_name!r}, but the pipeline's elmo components are "
                    f"{sorted(elmo_names)}; set upstream to one of them (or \"*\")"
                )
