"""Registered weight loaders, used from ``[initialize.components.elmo.loader]``.

Each returns a function that loads an ``ElmoBiLM`` when the component initializes
(never at construction).
"""
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

from spacy.util import registry

from .bilm import ElmoBiLM

MODELS_DIR = Path(__file__).parent / "models"
DEFAULT_MODEL = "en_elmo_cpu"

LOADER_HINT = """
[initialize.components.elmo.loader]
@misc = "spacy-elmo.ElmoLoader.v1"
path = "path/to/elmo_model_dir"

or, for published AllenNLP / bilm-tf weights:

[initialize.components.elmo.loader]
@misc = "spacy-elmo.AllenNLPLoader.v1"
options_path = "path/to/options.json"
weights_path = "path/to/weights.hdf5"
"""


@registry.misc("spacy-elmo.AllenNLPLoader.v1")
def allennlp_loader_v1(options_path: Path, weights_path: Path) -> Callable[[], ElmoBiLM]:
    """Load published ELMo weights.

    options_path (Path): the ``options.json`` of the model.
    weights_path (Path): the HDF5 weights file (bilm-tf / AllenNLP layout).
    """

    def load() -> ElmoBiLM:
        return ElmoBiLM.from_allennlp(options_path, weights_path)

    return load


@registry.misc("spacy-elmo.ElmoLoader.v1")
def elmo_loader_v1(path: Optional[Path] = None) -> Callable[[], ElmoBiLM]:
    """Load a biLM in the project's own format (a directory written by
    ``ElmoBiLM.save`` or by ``python -m spacy_elmo pretrain``).

    path (Optional[Path]): the model directory (config.json + model.safetensors);
        null for the English model shipped with spacy-elmo.
    """

    def load() -> ElmoBiLM:
        if path is None:
            return default_loader()()
        return ElmoBiLM.load(path)

    return load


def default_loader() -> Callable[[], ElmoBiLM]:
    """The English model shipped inside the package, if there is one."""
    path = MODELS_DIR / DEFAULT_MODEL
    if not (path / "config.json").exists():
        raise ValueError(
            "elmo: no weight loader given and no shipped default model found. Add a loader "
            "to the config:\n" + LOADER_HINT
        )

    def load() -> ElmoBiLM:
        return ElmoBiLM.load(path)

    return load


@registry.misc("spacy-elmo.PublishedLoader.v1")
def published_loader_v1(name: str, mirror: Optional[str] = None) -> Callable[[], ElmoBiLM]:
    """Load a published AllenNLP ELMo model by name, downloading it once into the user
    cache (``SPACY_ELMO_CACHE``, else ``~/.cache/spacy_elmo``) at initialize.

    name (str): "small", "medium", "original", "original-5.5b", "pubmed", "pt-wikipedia",
        "pt-brwac" or "ja" (see docs/published.md).
    mirror (Optional[str]): a base URL serving the same files under the same relative paths;
        null for the ``SPACY_ELMO_MIRROR`` environment variable, else the original host.
    """
    from .published import fetch_published, get_published

    try:
        get_published(name)
    except KeyError as err:
        raise ValueError(err.args[0]) from None

    def load() -> ElmoBiLM:
        options_path, weights_path = fetch_published(name, mirror=mirror)
        return ElmoBiLM.from_allennlp(options_path, weights_path)

    return load


def resolve_weights(weights: Union[str, Path]) -> Dict[str, Any]:
    """The loader block (``[initialize.components.elmo.loader]``) for a weights argument
    of the command line (``demo --weights``, ``init-pipeline``): a directory in the
    project's own format (config.json) or in the published layout (options.json and one
    .hdf5 file); or, where no such path exists, the name of a published model
    (``spacy-elmo.PublishedLoader.v1``)."""
    from .published import PUBLISHED

    if not Path(weights).exists() and str(weights) in PUBLISHED:
        return {"@misc": "spacy-elmo.PublishedLoader.v1", "name": str(weights)}
    path = Path(weights)
    if (path / "config.json").exists():
        return {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(path)}
    hdf5 = sorted(path.glob("*.hdf5")) if path.is_dir() else []
    if (path / "options.json").exists() and len(hdf5) == 1:
        return {
            "@misc": "spacy-elmo.AllenNLPLoader.v1",
            "options_path": str(path / "options.json"),
            "weights_path": str(hdf5[0]),
        }
    raise ValueError(
        f"{path}: expected a spacy-elmo model directory (config.json + model.safetensors), "
        "a directory with options.json and one .hdf5 weights file, or a published model name "
        f"({', '.join(PUBLISHED)})"
    )
