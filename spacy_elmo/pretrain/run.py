"""``pretrain`` as a library call: read the config, claim the output directory, join
torchrun's process group, train."""
import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from .config import load_pretrain_config
from .distributed import distributed_from_env
from .memory import keep_freed_memory, limit_onednn_cache
from .output import OutputLock, check_output_dir, remove_stale_temp_files


def pretrain(config_path: Path, output: Path, overrides: Optional[Dict[str, Any]] = None, force: bool = False,
             log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Train a biLM as the config says; resumes from ``output``'s checkpoint if there is one.

    config_path: the pretraining config (e.g. configs/pretrain/tiny.cfg).
    output: the output directory (model files, checkpoint, metrics). A directory that holds
        other files and no checkpoint is refused unless ``force``; a directory another run
        is writing to is refused (a lock).
    overrides: config overrides by dotted name (``{"training.max_steps": 10}``).
    force: write the run's files into a directory that holds other files.
    log: where progress lines go.

    The process keeps freed host memory for reuse from here on (``memory.keep_freed_memory``),
    and bounds oneDNN's primitive cache unless the environment sets it (``memory.limit_onednn_cache``).
    """
    from .trainer import Trainer

    config = load_pretrain_config(config_path, overrides)
    output = Path(output)
    rank0 = int(os.environ.get("RANK", "0")) == 0  # torchrun: only rank 0 writes
    keep_freed_memory()  # a step's large buffers reuse the last step's pages
    limit_onednn_cache()  # bf16/fp16 products: a bounded cache of compiled shapes
    with contextlib.ExitStack() as stack:
        if rank0:
            check_output_dir(output, force=force)
            stack.enter_context(OutputLock(output))
            removed = remove_stale_temp_files(output)
            if removed:
                log(f"Removed {len(removed)} temporary file(s) left in {output} by a stopped run")
        with distributed_from_env(cuda=config["training"]["device"] != "cpu"):
            return Trainer(config, output, log=log if rank0 else (lambda s: None)).run()
    raise AssertionError("unreachable")
