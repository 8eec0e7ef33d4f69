"""The project's own weight format: a directory with ``config.json`` (the options
fields plus ``vocab_size``, ``softmax`` and ``format_version``), ``model.safetensors``
(the module's state_dict) and, when there is a softmax, ``vocab.txt`` (one word a
line, line number = id).

These functions read and write configs and state dicts; they know nothing of the
module (``ElmoBiLM.save`` / ``load`` / ``to_bytes`` / ``from_bytes`` use them).
"""
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from ..util.atomic import atomic_write_bytes
from .config import BiLMConfig
from .errors import OptionsError, WeightsError
from .int8 import dequantize_state, quantize_state

FORMAT_VERSION = 2  # the newest this version reads; files are written at the oldest that holds them
INT8_FORMAT_VERSION = 2  # int8 weights with scales (older readers would see unknown tensors)
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VOCAB_NAME = "vocab.txt"
MODEL_FILES = (CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME)
CONFIG_METADATA_KEY = "spacy_elmo.config"  # the config.json form inside a safetensors blob
SHA256_METADATA_KEY = "spacy_elmo.tensors_sha256"  # tensors_sha256 of the blob's tensors
CONFIG_SHA256_KEY = "weights_sha256"  # in config.json: sha256 of the model.safetensors bytes

State = Dict[str, torch.Tensor]
# How weights may be stored: "int8" is int8 matrices with float32 scales (``bilm.int8``)
STORAGE_DTYPES = ("float32", "float16", "int8")


def check_storage_dtype(dtype: object, where: str = "model files") -> str:
    """``dtype`` if it is one of ``STORAGE_DTYPES``, else a ValueError naming ``where``."""
    if not isinstance(dtype, str) or dtype not in STORAGE_DTYPES:
        raise ValueError(f"{where}: unknown weights dtype {dtype!r} (expected one of {', '.join(STORAGE_DTYPES)})")
    return dtype


def format_version(dtype: str) -> int:
    """The format_version a model stored in ``dtype`` is written with: 1, or
    ``INT8_FORMAT_VERSION`` for int8, so that older readers refuse it by name."""
    return INT8_FORMAT_VERSION if dtype == "int8" else 1


def storage_dtype(half: bool = False, dtype: Optional[str] = None) -> str:
    """The storage dtype that ``half`` (float16, the older flag) and ``dtype`` ask for;
    a ValueError when they disagree."""
    if dtype is None:
        return "float16" if half else "float32"
    check_storage_dtype(dtype)
    if half and dtype != "float16":
        raise ValueError(f"half=True asks for float16 weights but dtype is {dtype!r}; give one of them")
    return dtype


def stored_tensors(state: Mapping[str, torch.Tensor], dtype: str = "float32") -> State:
    """The tensors of a state dict as they are stored in ``dtype`` (contiguous, on the CPU)."""
    check_storage_dtype(dtype)
    if dtype == "int8":
        state = quantize_state(state)
        return {k: v.contiguous().cpu() for k, v in state.items()}
    torch_dtype = torch.float16 if dtype == "float16" else torch.float32
    return {k: v.detach().to(torch_dtype).contiguous().cpu() for k, v in state.items()}


def state_to_bytes(state: Mapping[str, torch.Tensor], dtype: str = "float32", config: Optional[BiLMConfig] = None) -> bytes:
    """A state dict as safetensors bytes with weights in ``dtype`` (``STORAGE_DTYPES``); with
    ``config``, the blob carries it in its metadata and so describes itself."""
    from safetensors.torch import save

    tensors = stored_tensors(state, dtype)
    metadata = None
    if config is not None:
        metadata = {
            CONFIG_METADATA_KEY: json.dumps(config.to_dict()),
            "format_version": str(format_version(dtype)),
            SHA256_METADATA_KEY: tensors_sha256(tensors),
        }
    return save(tensors, metadata=metadata)


def state_from_bytes(data: bytes, source: str) -> State:
    """The tensors of safetensors bytes (int8 ones dequantized to float32); WeightsError
    names ``source`` if they are not readable."""
    from safetensors.torch import load

    try:
        state = load(data)
    except Exception as err:  # safetensors raises its own error type
        raise WeightsError(
            f"{source}: not a readable safetensors file (damaged or truncated header?): {err}"
        ) from None
    verify_sha256(tensors_sha256(state), _metadata(data).get(SHA256_METADATA_KEY), source, "stored sha256")
    return dequantize_state(state, source)


def _metadata(data: bytes) -> Dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (already parsed once by ``load``)."""
    size = int.from_bytes(data[:8], "little")
    return json.loads(bytes(data[8 : 8 + size]).decode("utf-8")).get("__metadata__") or {}


def config_from_bytes(data: bytes, source: str) -> BiLMConfig:
    """The config stored in the metadata of ``state_to_bytes(..., config=...)``.

    Reads the safetensors header: 8 bytes little-endian length N, then N bytes of
    JSON whose ``__metadata__`` holds string pairs."""
    try:
        size = int.from_bytes(data[:8], "little")
        if len(data) < 8 + size:
            raise ValueError("truncated header")
        metadata = json.loads(bytes(data[8 : 8 + size]).decode("utf-8")).get("__metadata__") or {}
    except (ValueError, AttributeError) as err:
        raise WeightsError(f"{source}: not a safetensors file: {err}") from None
    if CONFIG_METADATA_KEY not in metadata:
        raise WeightsError(f"{source}: the weights carry no config ('{CONFIG_METADATA_KEY}' metadata)")
    try:
        version = int(metadata.get("format_version", FORMAT_VERSION))
    except ValueError:
        raise WeightsError(f"{source}: bad format_version {metadata.get('format_version')!r}") from None
    return _config_from_json_text(metadata[CONFIG_METADATA_KEY], version, source)


def check_state(state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], source: str) -> None:
    """Raise WeightsError naming ``source`` unless ``state`` has exactly the tensors
    (names and shapes) of ``expected``."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise WeightsError(f"{source}: tensors do not match the config (missing {missing}, unexpected {unexpected})")
    for name, value in state.items():
        if tuple(value.shape) != tuple(expected[name].shape):
            raise WeightsError(
                f"{source}: tensor '{name}' has shape {tuple(value.shape)}, expected {tuple(expected[name].shape)}"
            )
    for name, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise WeightsError(f"{source}: tensor '{name}' holds non-finite values (NaN or inf)")


def tensors_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 of the tensors as stored (names, dtypes, shapes and bytes, by name), so
    the same weights give the same digest whatever the file layout."""
    digest = hashlib.sha256()
    for name in sorted(state):
        value = state[name].detach().contiguous().cpu()
        digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}|".encode("utf-8"))
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def verify_sha256(actual: str, expected: Any, source: str, what: str) -> None:
    """WeightsError unless ``expected`` is None (no checksum stored: accepted) or equal."""
    if expected is not None and actual != expected:
        raise WeightsError(
            f"{source}: the weights do not match their checksum ({what} {expected}, found {actual}): "
            "the file is damaged (overwritten or truncated); copy or export the model again"
        )


def model_file_bytes(
    config: BiLMConfig, state: Mapping[str, torch.Tensor], vocab: Optional[Sequence[str]], dtype: str
) -> List[Tuple[str, bytes]]:
    """The model files' names and contents, config.json last."""
    if config.vocab_size and vocab is not None and len(vocab) != config.vocab_size:
        raise ValueError(f"vocab has {len(vocab)} words but the softmax has {config.vocab_size}")
    weights = state_to_bytes(state, dtype)  # a ValueError first if dtype is unknown
    data = config.to_dict()
    data["format_version"] = format_version(dtype)
    data["dtype"] = dtype
    data[CONFIG_SHA256_KEY] = hashlib.sha256(weights).hexdigest()
    files = [(WEIGHTS_NAME, weights)]
    if vocab is not None:
        files.append((VOCAB_NAME, "".join(f"{w}\n" for w in vocab).encode("utf-8")))
    files.append((CONFIG_NAME, json.dumps(data, indent=2).encode("utf-8")))
    return files


def save_model_dir(
    path: Path, config: BiLMConfig, state: Mapping[str, torch.Tensor], vocab: Optional[Sequence[str]] = None,
    dtype: str = "float32",
) -> None:
    """Write a model directory: each model file replaced atomically, config.json (which
    holds the weights' checksum) last; stale model files are removed, every other file of
    the directory (a model card, dot-files such as ``.git``) is kept."""
    path = Path(path)
    files = model_file_bytes(config, state, vocab, dtype)
    write_model_files(path, config, state, vocab=vocab, dtype=dtype, files=files)
    written = {name for name, _ in files}
    for name in MODEL_FILES:
        if name not in written and (path / name).is_file():
            (path / name).unlink()


def write_model_files(
    path: Path, config: BiLMConfig, state: Mapping[str, torch.Tensor], vocab: Optional[Sequence[str]] = None,
    dtype: str = "float32", files: Optional[List[Tuple[str, bytes]]] = None,
) -> None:
    """Write the model files into a directory, keeping its other files (e.g.
    checkpoints); each file is written atomically, config.json last."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OSError(f"{path} is a file, not a model directory")
    path.mkdir(parents=True, exist_ok=True)
    for name, data in files if files is not None else model_file_bytes(config, state, vocab, dtype):
        atomic_write_bytes(path / name, data)


def read_config(path: Path) -> BiLMConfig:
    """The config of a model directory."""
    cfg_path = Path(path) / CONFIG_NAME
    if not cfg_path.exists():
        raise OptionsError(f"not an ELMo model directory (no {CONFIG_NAME}): {path}")
    try:
        text = cfg_path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OptionsError(f"{cfg_path} is not valid JSON: {err}") from None
    version = data.get("format_version", FORMAT_VERSION) if isinstance(data, dict) else FORMAT_VERSION
    return _config_from_json_text(text, version, str(cfg_path))


def _config_from_json_text(text: str, version: Any, source: str) -> BiLMConfig:
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise OptionsError(f"{source}: format_version {version} is newer than this spacy-elmo reads ({FORMAT_VERSION})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise OptionsError(f"{source} is not valid JSON: {err}") from None
    return BiLMConfig.from_dict(data, source)


def read_model_dir(path: Path) -> Tuple[BiLMConfig, State]:
    """Config and tensors of a model directory (float32 or float16 as stored; int8 ones
    dequantized to float32)."""
    config = read_config(path)
    weights = Path(path) / WEIGHTS_NAME
    if not weights.exists():
        raise WeightsError(f"ELMo weights file not found: {weights}")
    data = weights.read_bytes()
    expected = json.loads((Path(path) / CONFIG_NAME).read_text(encoding="utf-8")).get(CONFIG_SHA256_KEY)
    # No checksum (models written before it was stored) is accepted; a wrong one is not.
    verify_sha256(hashlib.sha256(data).hexdigest(), expected, str(weights), f"{CONFIG_NAME} says")
    return config, state_from_bytes(data, str(weights))


def read_vocab(path: Path) -> List[str]:
    vocab_path = Path(path) / VOCAB_NAME
    if not vocab_path.exists():
        raise OptionsError(f"{path}: no {VOCAB_NAME}")
    return vocab_path.read_text(encoding="utf-8").split("\n")[:-1]
