"""The pretraining config: its schema (sections, settings, defaults, allowed ranges).

Every section is checked as a whole, as spaCy checks its own configs (pydantic models):
an unknown setting or section, a value of the wrong type or out of range is an error
naming it. The sections:

[paths] train, dev: prepared corpus files (``prepare``) or raw text files; init (optional):
    the model to continue from, with a fresh optimizer: a spacy-elmo model directory,
    published weights (a directory with options + one .hdf5, the .hdf5 file, or the list
    [options.json, weights.hdf5]) or a published model name (see ``pretrain/init.py``).
[model]: the biLM options in the options.json form ([model.lstm], [model.char_cnn]); with
    paths.init it may be left empty (the shapes come from the init model; a non-empty
    [model] must agree with it, or with [training] grow = true be a wider shape of it).
[vocab] size: output vocabulary size (top words by frequency, incl. <S>, </S>, <unk>);
    from_init (default true): with paths.init, keep the init model's vocabulary and softmax
    (words outside it become <unk>); false, or an init model without softmax (published
    weights): a fresh softmax over the corpus's top ``size`` words.
[softmax] type ("adaptive" or "full"), cutoffs, div_value: the LM output layer.
[training]: see ``TrainingSchema`` (and ``TRAINING_DEFAULTS``).
"""
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from ..bilm.config import validate_options


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PathsSchema(_Section):
    train: str = Field(..., min_length=1, description="training text: a prepared corpus (.npz) or raw text")
    dev: Optional[str] = Field(None, description="held-out text for the periodic perplexity (null: none)")
    init: Optional[Union[str, List[str]]] = Field(None, description="the model to continue from (fresh optimizer)")


class LstmSchema(_Section):
    dim: int = Field(..., gt=0, description="LSTM cell size")
    projection_dim: int = Field(..., gt=0, description="projection (output) size per direction")
    n_layers: int = Field(2, ge=1, description="LSTM layers per direction")
    cell_clip: Optional[float] = Field(None, ge=0, description="clip of the cell state (null/0: none)")
    proj_clip: Optional[float] = Field(None, ge=0, description="clip of the projected state (null/0: none)")
    use_skip_connections: StrictBool = Field(True, description="residual connection around upper layers")


class EmbeddingSchema(_Section):
    dim: int = Field(..., gt=0, description="character embedding size")


class CharCnnSchema(_Section):
    embedding: EmbeddingSchema
    filters: List[List[int]] = Field(..., min_length=1, description="[width, count] of each convolution")
    n_highway: int = Field(0, ge=0, description="highway layers after the convolutions")
    activation: Literal["relu", "tanh"] = "relu"
    n_characters: Literal[261, 262] = Field(262, description="character ids (bilm-tf: 261 + padding)")
    max_characters_per_token: int = Field(50, gt=0, description="longer tokens are cut")


class ModelSchema(_Section):
    lstm: LstmSchema
    char_cnn: CharCnnSchema


class VocabSchema(_Section):
    size: Optional[int] = Field(None, gt=3, description="output vocabulary size, <S>, </S>, <unk> included")
    from_init: StrictBool = Field(True, description="with paths.init: keep the init model's vocabulary")


class SoftmaxSchema(_Section):
    type: Literal["adaptive", "full"] = "adaptive"
    cutoffs: List[int] = Field([2000, 10000], description="adaptive: cluster boundaries (ascending)")
    div_value: float = Field(4.0, gt=0, description="adaptive: size ratio of successive clusters")


class TrainingSchema(_Section):
    seed: int = Field(0, ge=0, description="seeds batching, dropout and initialisation")
    max_steps: int = Field(1000, ge=1, description="optimizer steps in all")
    batch_tokens: int = Field(2048, ge=1, description="tokens per global batch (whole sentences, boundaries included)")
    max_sentence_length: int = Field(64, ge=1, description="longer sentences are cut into pieces")
    lr: float = Field(0.002, gt=0, le=1.0, allow_inf_nan=False,
                      description="Adam learning rate after warm-up (at most 1: larger ones only diverge)")
    warmup_steps: int = Field(200, ge=0, description="linear warm-up from 0")
    final_lr_ratio: float = Field(0.1, ge=0, le=1, description="linear decay to lr * final_lr_ratio at max_steps")
    grad_clip: float = Field(10.0, gt=0, allow_inf_nan=False, description="clip of the global gradient norm (bilm-tf: 10)")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout on the top layer before the softmax")
    checkpoint_every: int = Field(500, ge=1, description="steps between checkpoints (and model writes)")
    eval_every: int = Field(500, ge=1, description="steps between held-out perplexity evaluations")
    eval_sentences: int = Field(2000, ge=0, description="dev sentences of the periodic evaluation (0 = all)")
    log_every: int = Field(50, ge=1, description="steps between progress lines")
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = torch's default)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="cuda needs a GPU")
    amp: Literal["none", "bf16", "fp16"] = Field("none", description="autocast (fp16 with loss scaling); the softmax stays float32")
    ema_decay: float = Field(0.0, ge=0, lt=1, description="0: off; else the model files and the held-out "
                             "perplexity use an exponential moving average of the weights, updated after every "
                             "step with this decay (0.999 averages over about the last 1,000 steps)")
    grow: StrictBool = Field(False, description="with paths.init: a [model] with a larger lstm.dim or "
                                                "projection_dim, or more char-CNN filters, widens the init model "
                                                "(see pretrain/grow.py)")


class PretrainSchema(_Section):
    paths: PathsSchema
    model: Dict[str, Any]  # ModelSchema, or empty with paths.init
    vocab: VocabSchema
    softmax: SoftmaxSchema = SoftmaxSchema()
    training: TrainingSchema = TrainingSchema()


TRAINING_DEFAULTS: Dict[str, Any] = TrainingSchema().model_dump()
AMP_MODES = ("none", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
# Settings a resumed run must share with its checkpoint (the rest, e.g. max_steps and the
# logging and evaluation intervals, may change between runs).
RESUME_FIXED = ("model", "vocab", "softmax", "training.seed", "training.batch_tokens", "training.max_sentence_length")


def _where(loc: tuple) -> str:
    names = [str(p) for p in loc if not isinstance(p, int)]
    if len(names) <= 1:
        return f"[{names[0]}]" if names else "config"
    return f"[{'.'.join(names[:-1])}] {names[-1]}"


def _message(err: ValidationError, prefix: str = "") -> str:
    unknown: Dict[str, List[str]] = {}
    problems: List[str] = []
    for e in err.errors():
        loc = ((prefix,) if prefix else ()) + tuple(e["loc"])
        if e["type"] == "extra_forbidden":
            section = ".".join(str(p) for p in loc[:-1])
            if section:
                unknown.setdefault(section, []).append(str(loc[-1]))
            else:
                problems.append(f"unknown section [{loc[-1]}]")
        elif e["type"] == "missing":
            what = _where(loc)
            problems.append(f"missing section {what}" if len(loc) == 1 else f"{what} is not set")
        else:
            problems.append(f"{_where(loc)}: {e['msg'][0].lower()}{e['msg'][1:]} (got {e.get('input')!r})")
    parts = [f"unknown [{s}] settings {sorted(keys)}" for s, keys in unknown.items()] + problems
    return "pretrain config: " + "; ".join(parts)


def validate_pretrain_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """Check the whole config against the schema and fill defaults; returns plain dicts.
    Raises ValueError naming every unknown setting and bad value."""
    cfg: Dict[str, Any] = {}
    try:
        cfg = PretrainSchema.model_validate(config).model_dump()
        init = cfg["paths"]["init"]
        if cfg["model"] or not init:  # with paths.init, an empty [model] is taken from the init model
            cfg["model"] = ModelSchema.model_validate(cfg["model"]).model_dump()
    except ValidationError as err:
        raise ValueError(_message(err, "model" if "paths" in cfg else "")) from None
    if cfg["vocab"]["size"] is None and not init:
        raise ValueError("pretrain config: [vocab] size is not set")
    if not cfg["model"]:
        return cfg
    if not all(len(f) == 2 and f[0] >= 1 and f[1] >= 1 for f in cfg["model"]["char_cnn"]["filters"]):
        raise ValueError("pretrain config: [model.char_cnn] filters must be a list of [width >= 1, count >= 1]")
    cutoffs = cfg["softmax"]["cutoffs"]
    if any(c <= 0 for c in cutoffs) or cutoffs != sorted(set(cutoffs)):
        raise ValueError(f"pretrain config: [softmax] cutoffs must be positive and ascending (got {cutoffs})")
    cfg["model"] = validate_options(cfg["model"], source="pretrain config [model]")
    return cfg


def resume_changes(saved: Dict[str, Any], config: Dict[str, Any]) -> List[str]:
    """The settings of ``RESUME_FIXED`` that differ between a checkpoint's config and this one."""
    changed = []
    for name in RESUME_FIXED:
        section, _, key = name.partition(".")
        old, new = saved.get(section, {}), config.get(section, {})
        if key:
            old, new = old.get(key), new.get(key)
        if section == "vocab" and isinstance(old, dict):  # from_init only matters at the start
            old, new = {**old, "from_init": None}, {**new, "from_init": None}
        if old != new:
            if isinstance(old, dict) and isinstance(new, dict):
                changed.extend(f"{section}.{k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
            else:
                changed.append(name)
    return changed


def load_pretrain_config(path: Path, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Read a pretraining config file (with ``--section.key value`` overrides) and validate it."""
    from thinc.api import Config

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pretrain config not found: {path}")
    try:
        config = Config().from_disk(path, overrides=overrides or {}, interpolate=True)
    except Exception as err:  # thinc raises ConfigValidationError and configparser errors
        raise ValueError(f"pretrain config {path}: {err}") from None
    return validate_pretrain_config(dict(config))
