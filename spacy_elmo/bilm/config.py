"""The biLM's hyper-parameters as a typed config, and its two JSON forms.

``BiLMConfig.from_options`` reads the AllenNLP / bilm-tf ``options.json`` form, e.g.
the published "small" model::

    {"lstm": {"dim": 1024, "projection_dim": 128, "n_layers": 2, "cell_clip": 3,
              "proj_clip": 3, "use_skip_connections": true},
     "char_cnn": {"embedding": {"dim": 16}, "filters": [[1, 32], ..., [7, 1024]],
                  "n_highway": 1, "activation": "relu", "n_characters": 262,
                  "max_characters_per_token": 50}}

``to_options`` writes it back. The project's own ``config.json`` is that form plus
``vocab_size`` and ``softmax`` (the language-model head), read by ``from_dict`` and
written by ``to_dict``. Fields of the two sections this code does not use (bilm-tf's
training settings) are kept, so a file read and written again loses nothing.
"""
import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .chars import MAX_CHARS, N_CHARACTERS
from .errors import OptionsError

Options = Dict[str, Any]

ACTIVATIONS = ("relu", "tanh")
SOFTMAX_TYPES = ("full", "adaptive")
_LSTM_KEYS = ("dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections")
_CNN_KEYS = ("embedding", "filters", "n_highway", "activation", "n_characters", "max_characters_per_token")


@dataclass(frozen=True)
class BiLMConfig:
    """Shapes and settings of an ``ElmoBiLM``.

    cell_dim: LSTM memory cell size C (``lstm.dim``).
    projection_dim: LSTM output width P; every output layer is 2P wide.
    n_layers: LSTM layers per direction.
    cell_clip / proj_clip: clip the cell / projected state to +-value (None or 0: never).
    use_skip_connections: residual connection around LSTM layers above the first.
    char_dim: character embedding width (``char_cnn.embedding.dim``).
    filters: (width, count) of each character CNN filter group.
    n_highway: highway layers after the CNN.
    activation: "relu" or "tanh" after max-pooling each filter.
    n_characters: character vocabulary size (262 in every published model).
    max_characters_per_token: characters read per token (longer tokens are cut).
    vocab_size: output vocabulary of the language-model softmax (0: no softmax, as
        in published weight files).
    softmax: the softmax's settings: ``{"type": "full"}`` or ``{"type": "adaptive",
        "cutoffs": [...], "div_value": ...}``.
    extra: option fields not used here, per section (``{"lstm": {...}, "char_cnn": {...}}``).
    """

    cell_dim: int
    projection_dim: int
    char_dim: int
    filters: Tuple[Tuple[int, int], ...]
    n_layers: int = 2
    cell_clip: Optional[float] = None
    proj_clip: Optional[float] = None
    use_skip_connections: bool = True
    n_highway: int = 0
    activation: str = "relu"
    n_characters: int = N_CHARACTERS
    max_characters_per_token: int = MAX_CHARS
    vocab_size: int = 0
    softmax: Mapping[str, Any] = field(default_factory=lambda: {"type": "full"})
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def output_dim(self) -> int:
        """Width of every output layer: 2 x projection_dim."""
        return 2 * self.projection_dim

    @property
    def n_output_layers(self) -> int:
        """The token layer plus one per LSTM layer."""
        return self.n_layers + 1

    @property
    def n_char_rows(self) -> int:
        """Rows of the character embedding table (row 0 is padding)."""
        return max(self.n_characters, N_CHARACTERS)

    @property
    def cell_clip_value(self) -> Optional[float]:
        return clip_value(self.cell_clip)

    @property
    def proj_clip_value(self) -> Optional[float]:
        return clip_value(self.proj_clip)

    def with_head(self, vocab_size: int, softmax: Optional[Mapping[str, Any]] = None) -> "BiLMConfig":
        """The same biLM with a language-model softmax over ``vocab_size`` words."""
        return dataclasses.replace(
            self, vocab_size=_check_vocab_size(vocab_size, "vocab_size"), softmax=_check_softmax(softmax, "softmax")
        )

    # The options.json form -----------------------------------------------------------

    @classmethod
    def from_options(cls, options: Any, source: str = "options") -> "BiLMConfig":
        """Read and check the ``options.json`` form; raises OptionsError naming
        ``source`` and the offending field. Missing optional fields get bilm-tf's defaults."""
        if not isinstance(options, Mapping):
            raise OptionsError(f"{source}: expected a JSON object, got {type(options).__name__}")
        lstm = _section(options, "lstm", source)
        cnn = _section(options, "char_cnn", source)
        where_lstm, where_cnn = f"{source} [lstm]", f"{source} [char_cnn]"
        for key in ("dim", "projection_dim"):
            _positive_int(_require(lstm, key, where_lstm), key, where_lstm)
        n_layers = lstm.get("n_layers", 2)
        _positive_int(n_layers, "n_layers", where_lstm)
        emb = _require(cnn, "embedding", where_cnn)
        if not isinstance(emb, Mapping):
            raise OptionsError(f"{where_cnn}: 'embedding' must be an object with 'dim'")
        char_dim = _require(emb, "dim", f"{source} [char_cnn.embedding]")
        _positive_int(char_dim, "dim", f"{source} [char_cnn.embedding]")
        filters: List[Any] = _require(cnn, "filters", where_cnn)
        if (
            not isinstance(filters, (list, tuple))
            or not filters
            or any(not isinstance(f, (list, tuple)) or len(f) != 2 or f[0] < 1 or f[1] < 1 for f in filters)
        ):
            raise OptionsError(f"{where_cnn}: 'filters' must be a non-empty list of [width, count]")
        activation = cnn.get("activation", "relu")
        if activation not in ACTIVATIONS:
            raise OptionsError(f"{where_cnn}: unknown activation {activation!r} (expected one of {ACTIVATIONS})")
        max_chars = cnn.get("max_characters_per_token", MAX_CHARS)
        _positive_int(max_chars, "max_characters_per_token", where_cnn)
        widest = max(int(w) for w, _ in filters)
        if widest > max_chars:
            raise OptionsError(f"{where_cnn}: filter width {widest} exceeds max_characters_per_token {max_chars}")
        extra = {
            name: {k: copy.deepcopy(v) for k, v in section.items() if k not in keys}
            for name, section, keys in (("lstm", lstm, _LSTM_KEYS), ("char_cnn", cnn, _CNN_KEYS))
        }
        return cls(
            cell_dim=int(lstm["dim"]),
            projection_dim=int(lstm["projection_dim"]),
            n_layers=int(n_layers),
            cell_clip=lstm.get("cell_clip"),
            proj_clip=lstm.get("proj_clip"),
            use_skip_connections=bool(lstm.get("use_skip_connections", True)),
            char_dim=int(char_dim),
            filters=tuple((int(w), int(n)) for w, n in filters),
            n_highway=int(cnn.get("n_highway", 0)),
            activation=str(activation),
            n_characters=int(cnn.get("n_characters", N_CHARACTERS)),
            max_characters_per_token=int(max_chars),
            extra={k: v for k, v in extra.items() if v},
        )

    def to_options(self) -> Options:
        """The ``options.json`` form (a new dict)."""
        lstm: Dict[str, Any] = {
            "dim": self.cell_dim,
            "projection_dim": self.projection_dim,
            "n_layers": self.n_layers,
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "use_skip_connections": self.use_skip_connections,
        }
        cnn: Dict[str, Any] = {
            "embedding": {"dim": self.char_dim},
            "filters": [[w, n] for w, n in self.filters],
            "n_highway": self.n_highway,
            "activation": self.activation,
            "n_characters": self.n_characters,
            "max_characters_per_token": self.max_characters_per_token,
        }
        lstm.update(copy.deepcopy(dict(self.extra.get("lstm", {}))))
        cnn.update(copy.deepcopy(dict(self.extra.get("char_cnn", {}))))
        return {"lstm": lstm, "char_cnn": cnn}

    # The config.json form ------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> "BiLMConfig":
        """Read the ``config.json`` form (options + ``vocab_size`` + ``softmax``)."""
        config = cls.from_options(data, source)
        return config.with_head(
            _check_vocab_size(data.get("vocab_size", 0), f"{source}: vocab_size"),
            _check_softmax(data.get("softmax"), f"{source}: softmax"),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The ``config.json`` form (a new dict, JSON-serializable)."""
        data = self.to_options()
        data["vocab_size"] = self.vocab_size
        data["softmax"] = copy.deepcopy(dict(self.softmax))
        return data


def validate_options(options: Any, source: str = "options") -> Options:
    """Check an ``options.json``-form dict and return it normalised (defaults filled)."""
    return BiLMConfig.from_options(options, source).to_options()


def clip_value(value: Optional[float]) -> Optional[float]:
    """A clip setting as used: None for no clipping (bilm-tf writes 0 or null)."""
    return None if value in (None, 0) else float(value)


def _section(options: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    section = _require(options, key, source)
    if not isinstance(section, Mapping):
        raise OptionsError(f"{source}: '{key}' must be a JSON object, got {type(section).__name__}")
    return section


def _require(section: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in section:
        raise OptionsError(f"{where}: missing option '{key}'")
    return section[key]


def _positive_int(value: Any, key: str, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise OptionsError(f"{where}: '{key}' must be a positive integer, got {value!r}")


def _check_vocab_size(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OptionsError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def _check_softmax(value: Any, where: str) -> Dict[str, Any]:
    if value is None:
        return {"type": "full"}
    if not isinstance(value, Mapping) or value.get("type", "full") not in SOFTMAX_TYPES:
        raise OptionsError(f"{where} must be an object with 'type' one of {SOFTMAX_TYPES}, got {value!r}")
    return copy.deepcopy(dict(value))


def option_differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> List[str]:
    """The fields in which two options dicts differ, each as ``name (a's value vs b's)``
    (``n_characters`` is not compared: 261 and 262 load the same)."""
    out = []
    for key in sorted(set(a) | set(b)):
        name = f"{prefix}{key}"
        if key == "n_characters":  # 261 in training files, 262 after; both load the same
            continue
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out.extend(option_differences(x, y, name + "."))
        elif _plain(x) != _plain(y):
            out.append(f"{name} ({x!r} vs {y!r})")
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
