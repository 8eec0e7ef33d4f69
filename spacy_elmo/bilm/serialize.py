"""The project's own weight format: a directory with ``config.json`` (the options
fields plus ``vocab_size``, ``softmax`` and ``format_version``), ``model.safetensors``
(the module's state_dict) and, when there is a softmax, ``vocab.txt`` (one word a
line, line number = id)."""
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type

import torch

from ..util.atomic import atomic_write_bytes
from .errors import OptionsError, WeightsError

if TYPE_CHECKING:
    from .model import ElmoBiLM

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VOCAB_NAME = "vocab.txt"
MODEL_FILES = (CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME)


def state_to_bytes(model: "ElmoBiLM", half: bool = False) -> bytes:
    from safetensors.torch import save

    dtype = torch.float16 if half else torch.float32
    return save({k: v.detach().to(dtype).contiguous().cpu() for k, v in model.state_dict().items()})


def load_state_bytes(model: "ElmoBiLM", data: bytes, source: str) -> None:
    from safetensors.torch import load

    try:
        state = load(data)
    except Exception as err:  # safetensors raises its own error type
        raise WeightsError(f"{source}: not a safetensors file: {err}") from None
    load_checked_state(model, state, source)


def load_checked_state(model: "ElmoBiLM", state: Dict[str, torch.Tensor], source: str) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise WeightsError(f"{source}: tensors do not match the config (missing {missing}, unexpected {unexpected})")
    for name, value in state.items():
        if tuple(value.shape) != tuple(expected[name].shape):
            raise WeightsError(
                f"{source}: tensor '{name}' has shape {tuple(value.shape)}, expected {tuple(expected[name].shape)}"
            )
    model.load_state_dict({k: v.float() for k, v in state.items()})


def model_file_bytes(model: "ElmoBiLM", vocab: Optional[Sequence[str]], half: bool) -> List[Tuple[str, bytes]]:
    """The model files' names and contents, config.json last."""
    config: Dict[str, Any] = model.config()
    config["format_version"] = FORMAT_VERSION
    config["dtype"] = "float16" if half else "float32"
    files = [(WEIGHTS_NAME, state_to_bytes(model, half))]
    if vocab is not None:
        files.append((VOCAB_NAME, "".join(f"{w}\n" for w in vocab).encode("utf-8")))
    files.append((CONFIG_NAME, json.dumps(config, indent=2).encode("utf-8")))
    return files


def save_elmo(model: "ElmoBiLM", path: Path, vocab: Optional[Sequence[str]] = None, half: bool = False) -> None:
    if model.vocab_size and vocab is not None and len(vocab) != model.vocab_size:
        raise ValueError(f"vocab has {len(vocab)} words but the softmax has {model.vocab_size}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp"))
    os.chmod(tmp, 0o755)  # mkdtemp makes the directory private
    try:
        for name, data in model_file_bytes(model, vocab, half):
            (tmp / name).write_bytes(data)
            os.chmod(tmp / name, 0o644)
        if path.is_dir():  # keep what else the directory holds (a model card), not stale model files
            for f in path.iterdir():
                if f.name not in MODEL_FILES and not f.name.startswith("."):
                    (shutil.copytree if f.is_dir() else shutil.copy2)(f, tmp / f.name)
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old{os.getpid()}"
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_model_files(model: "ElmoBiLM", path: Path, vocab: Optional[Sequence[str]] = None, half: bool = False) -> None:
    """Write the model files into an existing directory (kept for its other files,
    e.g. checkpoints), each file atomically; config.json last."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for name, data in model_file_bytes(model, vocab, half):
        atomic_write_bytes(path / name, data)


def read_config(path: Path) -> Dict[str, Any]:
    cfg_path = Path(path) / CONFIG_NAME
    if not cfg_path.exists():
        raise OptionsError(f"not an ELMo model directory (no {CONFIG_NAME}): {path}")
    try:
        return json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise OptionsError(f"{cfg_path} is not valid JSON: {err}") from None


def load_elmo(cls: "Type[ElmoBiLM]", path: Path) -> "ElmoBiLM":
    config = read_config(path)
    version = config.get("format_version", FORMAT_VERSION)
    if version > FORMAT_VERSION:
        raise OptionsError(f"{path}: format_version {version} is newer than this spacy-elmo reads ({FORMAT_VERSION})")
    model = cls.from_config(config)
    weights = Path(path) / WEIGHTS_NAME
    if not weights.exists():
        raise WeightsError(f"ELMo weights file not found: {weights}")
    load_state_bytes(model, weights.read_bytes(), str(weights))
    return model


def read_vocab(path: Path) -> List[str]:
    vocab_path = Path(path) / VOCAB_NAME
    if not vocab_path.exists():
        raise OptionsError(f"{path}: no {VOCAB_NAME}")
    return vocab_path.read_text(encoding="utf-8").split("\n")[:-1]
