"""The biLM hyper-parameters, in the AllenNLP / bilm-tf ``options.json`` form.

Example (the published "small" model)::

    {"lstm": {"dim": 1024, "projection_dim": 128, "n_layers": 2, "cell_clip": 3,
              "proj_clip": 3, "use_skip_connections": true},
     "char_cnn": {"embedding": {"dim": 16}, "filters": [[1, 32], ..., [7, 1024]],
                  "n_highway": 1, "activation": "relu", "n_characters": 262,
                  "max_characters_per_token": 50}}
"""
import copy
from typing import Any, Dict, List, Optional

from .errors import OptionsError

Options = Dict[str, Any]

ACTIVATIONS = ("relu", "tanh")


def _require(section: Dict[str, Any], key: str, where: str) -> Any:
    if key not in section:
        raise OptionsError(f"{where}: missing option '{key}'")
    return section[key]


def validate_options(options: Options, source: str = "options") -> Options:
    """Check an options dict and return a normalised deep copy.

    Raises OptionsError naming ``source`` and the offending field.
    """
    if not isinstance(options, dict):
        raise OptionsError(f"{source}: expected a JSON object, got {type(options).__name__}")
    opts = copy.deepcopy(options)
    lstm = _require(opts, "lstm", source)
    cnn = _require(opts, "char_cnn", source)
    for key in ("dim", "projection_dim"):
        value = _require(lstm, key, f"{source} [lstm]")
        if not isinstance(value, int) or value <= 0:
            raise OptionsError(f"{source} [lstm]: '{key}' must be a positive integer, got {value!r}")
    lstm.setdefault("n_layers", 2)
    if not isinstance(lstm["n_layers"], int) or lstm["n_layers"] < 1:
        raise OptionsError(f"{source} [lstm]: 'n_layers' must be a positive integer")
    lstm.setdefault("cell_clip", None)
    lstm.setdefault("proj_clip", None)
    lstm.setdefault("use_skip_connections", True)
    emb = _require(cnn, "embedding", f"{source} [char_cnn]")
    _require(emb, "dim", f"{source} [char_cnn.embedding]")
    filters: List[List[int]] = _require(cnn, "filters", f"{source} [char_cnn]")
    if not filters or any(len(f) != 2 or f[0] < 1 or f[1] < 1 for f in filters):
        raise OptionsError(f"{source} [char_cnn]: 'filters' must be a non-empty list of [width, count]")
    cnn["filters"] = [[int(w), int(n)] for w, n in filters]
    cnn.setdefault("n_highway", 0)
    cnn.setdefault("activation", "relu")
    if cnn["activation"] not in ACTIVATIONS:
        raise OptionsError(
            f"{source} [char_cnn]: unknown activation {cnn['activation']!r} (expected one of {ACTIVATIONS})"
        )
    cnn.setdefault("n_characters", 262)
    cnn.setdefault("max_characters_per_token", 50)
    max_chars = cnn["max_characters_per_token"]
    widest = max(w for w, _ in cnn["filters"])
    if widest > max_chars:
        raise OptionsError(f"{source} [char_cnn]: filter width {widest} exceeds max_characters_per_token {max_chars}")
    return opts


def output_dim(options: Options) -> int:
    """Width D of every output layer: 2 x projection_dim."""
    return 2 * int(options["lstm"]["projection_dim"])


def n_output_layers(options: Options) -> int:
    """Number of output layers: the token layer plus one per LSTM layer."""
    return int(options["lstm"]["n_layers"]) + 1


def clip_value(value: Optional[float]) -> Optional[float]:
    return None if value in (None, 0) else float(value)
