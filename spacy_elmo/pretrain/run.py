"""``pretrain`` as a library call: read the config, join torchrun's process group, train."""
from pathlib import Path
from typing import Any, Dict, Optional

from .config import load_pretrain_config
from .distributed import distributed_from_env


def pretrain(config_path: Path, output: Path, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Train a biLM as the config says; resumes from ``output``'s checkpoint if there is one.

    config_path: the pretraining config (e.g. configs/pretrain/tiny.cfg).
    output: the output directory (model files, checkpoint, metrics).
    overrides: config overrides by dotted name (``{"training.max_steps": 10}``).
    """
    from .trainer import Trainer

    config = load_pretrain_config(config_path, overrides)
    with distributed_from_env(cuda=config["training"]["device"] != "cpu"):
        return Trainer(config, output).run()
