"""Read and write the published ELMo weights: ``options.json`` + HDF5 (bilm-tf layout).

TensorFlow conventions of the file: matrices are ``[in, out]``; LSTM gate blocks are
ordered (input, candidate, forget, output) and the bias lacks TF's forget bias of +1;
``char_embed`` has no padding row; highway "carry" multiplies the transform branch.
"""
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Set, Tuple

import numpy as np
import torch

from ..util.atomic import atomic_path, atomic_write_text
from .errors import OptionsError, WeightsError
from .chars import N_CHARACTERS
from .config import BiLMConfig


def _tf_to_ours(blocks: np.ndarray) -> np.ndarray:
    """Gate blocks on the last axis: TF (i, j, f, o) -> ours (i, f, o, j)."""
    i, j, f, o = np.split(blocks, 4, axis=-1)
    return np.concatenate([i, f, o, j], axis=-1)


def _ours_to_tf(blocks: np.ndarray) -> np.ndarray:
    i, f, o, j = np.split(blocks, 4, axis=-1)
    return np.concatenate([i, j, f, o], axis=-1)


def read_options(path: Path) -> BiLMConfig:
    """The config of an ``options.json`` file."""
    if not path.exists():
        raise OptionsError(f"ELMo options file not found: {path}")
    if not path.is_file():
        raise OptionsError(f"ELMo options path is not a file: {path} (expected an options.json file)")
    try:
        with path.open(encoding="utf-8") as f:
            options = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OptionsError(f"ELMo options file {path} is not valid JSON: {err}") from None
    return BiLMConfig.from_options(options, source=str(path))


def read_allennlp(options_path: Path, weights_path: Path) -> Tuple[BiLMConfig, Dict[str, torch.Tensor]]:
    """Config and state dict (``ElmoBiLM``'s names, float32) of published weights."""
    import h5py

    config = read_options(options_path)
    if not weights_path.exists():
        raise WeightsError(f"ELMo weights file not found: {weights_path}")
    if not weights_path.is_file():
        raise WeightsError(f"ELMo weights path is not a file: {weights_path} (expected an HDF5 file)")
    try:
        h5 = h5py.File(weights_path, "r")
    except OSError as err:
        raise WeightsError(f"ELMo weights file {weights_path} is not an HDF5 file: {err}") from None

    read: Set[str] = set()
    with h5:

        def get(name: str, shape: Tuple[int, ...]) -> np.ndarray:
            if name not in h5:
                raise WeightsError(f"{weights_path}: dataset '{name}' is missing (options: {options_path})")
            data = h5[name]
            if tuple(data.shape) != tuple(shape):
                raise WeightsError(
                    f"{weights_path}: dataset '{name}' has shape {tuple(data.shape)}, "
                    f"but {options_path} implies {tuple(shape)}"
                )
            try:
                value = np.asarray(data[...], dtype=np.float32)
            except (OSError, ValueError, TypeError) as err:
                raise WeightsError(f"{weights_path}: dataset '{name}' cannot be read: {err}") from None
            if not np.isfinite(value).all():
                raise WeightsError(f"{weights_path}: dataset '{name}' holds non-finite values (NaN or inf)")
            read.add(name)
            return value

        state = _allennlp_state(config, get)
        extra = sorted(set(_dataset_names(h5)) - read)
    if extra:
        shown = ", ".join(extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
        raise WeightsError(
            f"{weights_path}: datasets that {options_path} does not account for: {shown} "
            f"(options: n_highway = {config.n_highway}, n_layers = {config.n_layers}, "
            f"{len(config.filters)} filters); the options do not describe this file"
        )
    return config, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


def _dataset_names(h5: Any) -> List[str]:
    import h5py

    names: List[str] = []
    h5.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def _forget_bias(cell_dim: int) -> np.ndarray:
    """TF's run-time forget bias of +1, in our gate layout."""
    forget = np.zeros(4 * cell_dim, dtype=np.float32)
    forget[cell_dim : 2 * cell_dim] = 1.0
    return forget


def _allennlp_state(config: BiLMConfig, get: Callable[[str, Tuple[int, ...]], np.ndarray]) -> Dict[str, np.ndarray]:
    E, P, C = config.char_dim, config.projection_dim, config.cell_dim
    F = sum(n for _, n in config.filters)
    state: Dict[str, np.ndarray] = {}
    table = np.zeros((config.n_char_rows, E), dtype=np.float32)
    table[1:N_CHARACTERS] = get("char_embed", (N_CHARACTERS - 1, E))
    state["token_encoder.char_embedding.weight"] = table
    for i, (w, n) in enumerate(config.filters):
        kernel = get(f"CNN/W_cnn_{i}", (1, w, E, n))[0]  # (w, E, n)
        state[f"token_encoder.convs.{i}.weight"] = kernel.transpose(2, 1, 0)
        state[f"token_encoder.convs.{i}.bias"] = get(f"CNN/b_cnn_{i}", (n,))
    for k in range(config.n_highway):
        for tf_name, ours in (("transform", "transform"), ("carry", "gate")):
            state[f"token_encoder.highways.{k}.{ours}.weight"] = get(f"CNN_high_{k}/W_{tf_name}", (F, F)).T
            state[f"token_encoder.highways.{k}.{ours}.bias"] = get(f"CNN_high_{k}/b_{tf_name}", (F,))
    state["token_encoder.projection.weight"] = get("CNN_proj/W_proj", (F, P)).T
    state["token_encoder.projection.bias"] = get("CNN_proj/b_proj", (P,))
    forget = _forget_bias(C)
    for layer in range(config.n_layers):
        w_ih, w_hh, bias, w_proj = [], [], [], []
        for d in range(2):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            W = _tf_to_ours(get(f"{prefix}/W_0", (2 * P, 4 * C)))
            w_ih.append(W[:P])
            w_hh.append(W[P:])
            # float32 addition of TF's run-time forget bias, as AllenNLP does.
            bias.append(_tf_to_ours(get(f"{prefix}/B", (4 * C,))) + forget)
            w_proj.append(get(f"{prefix}/W_P_0", (C, P)))
        base = f"lstm.layers.{layer}"
        state[f"{base}.weight_ih"] = np.stack(w_ih)
        state[f"{base}.weight_hh"] = np.stack(w_hh)
        state[f"{base}.bias"] = np.stack(bias)
        state[f"{base}.weight_proj"] = np.stack(w_proj)
    return state


def write_allennlp(config: BiLMConfig, state: Mapping[str, torch.Tensor], out_dir: Path) -> None:
    """Write ``options.json`` and ``weights.hdf5`` (each atomically) from a config and
    an ``ElmoBiLM`` state dict; the softmax, which the layout lacks, is left out."""
    import h5py

    out_dir.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().float().cpu().numpy() for k, v in state.items()}
    forget = _forget_bias(config.cell_dim)
    data: Dict[str, np.ndarray] = {"char_embed": sd["token_encoder.char_embedding.weight"][1:N_CHARACTERS]}
    for i in range(len(config.filters)):
        data[f"CNN/W_cnn_{i}"] = sd[f"token_encoder.convs.{i}.weight"].transpose(2, 1, 0)[None]
        data[f"CNN/b_cnn_{i}"] = sd[f"token_encoder.convs.{i}.bias"]
    for k in range(config.n_highway):
        for tf_name, ours in (("transform", "transform"), ("carry", "gate")):
            data[f"CNN_high_{k}/W_{tf_name}"] = sd[f"token_encoder.highways.{k}.{ours}.weight"].T
            data[f"CNN_high_{k}/b_{tf_name}"] = sd[f"token_encoder.highways.{k}.{ours}.bias"]
    data["CNN_proj/W_proj"] = sd["token_encoder.projection.weight"].T
    data["CNN_proj/b_proj"] = sd["token_encoder.projection.bias"]
    for layer in range(config.n_layers):
        base = f"lstm.layers.{layer}"
        for d in range(2):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            W = np.concatenate([sd[f"{base}.weight_ih"][d], sd[f"{base}.weight_hh"][d]], axis=0)
            data[f"{prefix}/W_0"] = _ours_to_tf(W)
            data[f"{prefix}/B"] = _ours_to_tf(sd[f"{base}.bias"][d] - forget)
            data[f"{prefix}/W_P_0"] = sd[f"{base}.weight_proj"][d]
    options = config.to_options()
    options["char_cnn"]["n_characters"] = N_CHARACTERS
    with atomic_path(out_dir / "weights.hdf5", suffix=".hdf5") as tmp:
        with h5py.File(tmp, "w") as h5:
            for name, value in data.items():
                h5.create_dataset(name, data=np.ascontiguousarray(value, dtype=np.float32))
    atomic_write_text(out_dir / "options.json", json.dumps(options, indent=2))
