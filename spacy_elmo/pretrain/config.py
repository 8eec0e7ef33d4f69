"""The pretraining config: sections, defaults and validation.

[paths] train, dev: prepared corpus files (``prepare``) or raw text files; init (optional):
    a model directory to start from (same shapes and vocabulary), with a fresh optimizer.
[model]: the biLM options in the options.json form ([model.lstm], [model.char_cnn]).
[vocab] size: output vocabulary size (top words by frequency, incl. <S>, </S>, <unk>).
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
    cfg["model"] = validate_options(cfg["model"], source="pretrain config [model]")
    if int(cfg["vocab"].get("size", 0)) < 4:
        raise ValueError("pretrain config: [vocab] size must be at least 4")
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
