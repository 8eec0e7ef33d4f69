"""The pretraining config: sections, defaults and validation.

[paths] train, dev: prepared corpus files (``prepare``) or raw text files; init (optional):
    the model to continue from, with a fresh optimizer: a spacy-elmo model directory,
    published weights (a directory with options + one .hdf5, the .hdf5 file, or the list
    [options.json, weights.hdf5]) or a published model name (see ``pretrain/init.py``).
[model]: the biLM options in the options.json form ([model.lstm], [model.char_cnn]); with
    paths.init it may be left empty (the shapes come from the init model; a non-empty
    [model] must agree with it).
[vocab] size: output vocabulary size (top words by frequency, incl. <S>, </S>, <unk>);
    from_init (default true): with paths.init, keep the init model's vocabulary and softmax
    (words outside it become <unk>); false, or an init model without softmax (published
    weights): a fresh softmax over the corpus's top ``size`` words.
[softmax] type ("adaptive" or "full"), cutoffs, div_value: the LM output layer.
[training]: see TRAINING_DEFAULTS.
"""
from pathlib import Path
from typing import Any, Dict, Optional

from ..bilm.config import validate_options
from ..bilm.softmax import SOFTMAX_TYPES

TRAINING_DEFAULTS: Dict[str, Any] = {
    "seed": 0,  # seeds batching, dropout and initialisation
    "max_steps": 1000,  # optimizer steps in all
    "batch_tokens": 2048,  # tokens per global batch (whole sentences, boundaries included)
    "max_sentence_length": 64,  # longer sentences are cut into pieces
    "lr": 0.002,  # Adam learning rate after warm-up
    "warmup_steps": 200,  # linear warm-up from 0
    "final_lr_ratio": 0.1,  # linear decay to lr * final_lr_ratio at max_steps
    "grad_clip": 10.0,  # clip the global gradient norm (bilm-tf: 10)
    "dropout": 0.1,  # dropout on the top layer before the softmax
    "checkpoint_every": 500,  # steps between checkpoints (and model writes)
    "eval_every": 500,  # steps between held-out perplexity evaluations
    "eval_sentences": 2000,  # dev sentences used for the periodic evaluation (0 = all)
    "log_every": 50,  # steps between progress lines
    "threads": 0,  # torch CPU threads (0 = torch's default)
    "device": "auto",  # "auto", "cpu" or "cuda"
    "amp": "none",  # "none", "bf16" or "fp16" autocast (fp16 with loss scaling); the softmax stays float32
}
AMP_MODES = ("none", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")


def validate_pretrain_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """Check the sections and fill defaults; raises ValueError naming the bad value."""
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for section in ("paths", "model", "vocab", "training"):
        if section not in cfg:
            raise ValueError(f"pretrain config: missing section [{section}]")
    unknown = set(cfg["training"]) - set(TRAINING_DEFAULTS)
    if unknown:
        raise ValueError(f"pretrain config: unknown [training] settings {sorted(unknown)}")
    cfg["training"] = {**TRAINING_DEFAULTS, **cfg["training"]}
    training = cfg["training"]
    if training["amp"] not in AMP_MODES:
        raise ValueError(f"pretrain config: unknown training.amp {training['amp']!r} (expected {AMP_MODES})")
    if training["device"] not in DEVICES:
        raise ValueError(f"pretrain config: unknown training.device {training['device']!r} (expected {DEVICES})")
    for key in ("max_steps", "batch_tokens", "max_sentence_length", "checkpoint_every", "eval_every", "log_every"):
        if int(training[key]) < 1:
            raise ValueError(f"pretrain config: training.{key} must be >= 1")
    init = cfg["paths"].get("init")
    if cfg["model"] or not init:  # with paths.init, an empty [model] is taken from the init model
        cfg["model"] = validate_options(cfg["model"], source="pretrain config [model]")
    vocab = cfg["vocab"]
    unknown = set(vocab) - {"size", "from_init"}
    if unknown:
        raise ValueError(f"pretrain config: unknown [vocab] settings {sorted(unknown)} (expected size, from_init)")
    if not isinstance(vocab.setdefault("from_init", True), bool):
        raise ValueError(f"pretrain config: vocab.from_init must be true or false, not {vocab['from_init']!r}")
    if vocab.get("size") is not None or not init:
        if isinstance(vocab.get("size"), bool) or not isinstance(vocab.get("size", 0), int) or int(vocab.get("size", 0)) < 4:
            raise ValueError(f"pretrain config: [vocab] size must be an integer of at least 4, not {vocab.get('size')!r}")
    softmax = dict(cfg.get("softmax") or {"type": "adaptive"})
    if softmax.get("type", "adaptive") not in SOFTMAX_TYPES:
        raise ValueError(f"pretrain config: unknown softmax type {softmax.get('type')!r} (expected {SOFTMAX_TYPES})")
    cfg["softmax"] = softmax
    if not cfg["paths"].get("train"):
        raise ValueError("pretrain config: paths.train is not set")
    return cfg


def load_pretrain_config(path: Path, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    from thinc.api import Config

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"pretrain config not found: {path}")
    config = Config().from_disk(path, overrides=overrides or {}, interpolate=True)
    return validate_pretrain_config(dict(config))
