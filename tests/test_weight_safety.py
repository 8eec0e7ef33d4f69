"""Damaged or mismatched weights give a clear error naming the file and tensor, never
NaN vectors or another model (issue 13, "silent garbage" and "unclear errors")."""
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoBiLM, WeightsError
from spacy_elmo.bilm.errors import OptionsError
from spacy_elmo.loaders import MODELS_DIR, DEFAULT_MODEL

SHIPPED = MODELS_DIR / DEFAULT_MODEL


def copy_tiny(tiny_dir: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_dir / "options.json", dest / "options.json")
    shutil.copy(tiny_dir / "weights.hdf5", dest / "weights.hdf5")
    return dest


def copy_without_checksum(model_dir: Path, dest: Path) -> Path:
    """A copy of a model directory whose config.json has no weights_sha256 (as older files)."""
    shutil.copytree(model_dir, dest)
    cfg = json.loads((dest / "config.json").read_text())
    del cfg["weights_sha256"]
    (dest / "config.json").write_text(json.dumps(cfg))
    return dest


def overwrite(path: Path, offset: int, n: int = 1000, value: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    assert offset + n <= len(data)
    data[offset : offset + n] = bytes([value]) * n
    path.write_bytes(bytes(data))


def test_nan_in_hdf5_names_the_dataset(tiny_dir, tmp_path):
    d = copy_tiny(tiny_dir, tmp_path)
    with h5py.File(d / "weights.hdf5", "r+") as h5:
        w = h5["CNN_proj/W_proj"][...]
        w[0, 0] = np.nan
        h5["CNN_proj/W_proj"][...] = w
    with pytest.raises(WeightsError, match=r"weights.hdf5: dataset 'CNN_proj/W_proj' holds non-finite"):
        ElmoBiLM.from_allennlp(d / "options.json", d / "weights.hdf5")


@pytest.mark.parametrize("section,key", [("char_cnn", "n_highway"), ("lstm", "n_layers")])
def test_options_that_miss_datasets_are_refused(tiny_dir, tmp_path, section, key):
    d = copy_tiny(tiny_dir, tmp_path)
    options = json.loads((d / "options.json").read_text())
    assert options[section][key] == 2
    options[section][key] = 1
    (d / "options.json").write_text(json.dumps(options))
    extra = "CNN_high_1/W_carry" if key == "n_highway" else "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B"
    with pytest.raises(WeightsError, match=f"does not account for: .*{extra}"):
        ElmoBiLM.from_allennlp(d / "options.json", d / "weights.hdf5")


def test_directories_instead_of_files(tiny_dir, tmp_path):
    with pytest.raises(OptionsError, match="options path is not a file"):
        ElmoBiLM.from_allennlp(tmp_path, tiny_dir / "weights.hdf5")
    with pytest.raises(WeightsError, match="weights path is not a file"):
        ElmoBiLM.from_allennlp(tiny_dir / "options.json", tmp_path)
    # A directory of another kind given to ElmoBiLM.load.
    with pytest.raises(OptionsError, match="not an ELMo model directory"):
        ElmoBiLM.load(tiny_dir)


def test_own_format_nan_and_overwritten_bytes(tiny_bilm, tmp_path):
    tiny_bilm.save(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    size = weights.stat().st_size
    assert "weights_sha256" in json.loads((tmp_path / "m" / "config.json").read_text())
    # 1,000 bytes overwritten inside the tensor data: the checksum in config.json catches it.
    shutil.copytree(tmp_path / "m", tmp_path / "data")
    overwrite(tmp_path / "data" / "model.safetensors", size - 2000)
    with pytest.raises(WeightsError, match="model.safetensors: the weights do not match their checksum"):
        ElmoBiLM.load(tmp_path / "data")
    # Inside the header: a parse error that says so.
    shutil.copytree(tmp_path / "m", tmp_path / "header")
    overwrite(tmp_path / "header" / "model.safetensors", 20, 200, ord("x"))
    with pytest.raises(WeightsError, match="checksum|not a readable safetensors file"):
        ElmoBiLM.load(tmp_path / "header")
    # Without a stored checksum (older files) the NaN is still found, named by tensor.
    copy_without_checksum(tmp_path / "m", tmp_path / "nan")
    overwrite(tmp_path / "nan" / "model.safetensors", size - 1000, 1000)  # 0xFF bytes: NaN floats
    with pytest.raises(WeightsError, match=r"tensor '.*' holds non-finite values"):
        ElmoBiLM.load(tmp_path / "nan")


def test_shipped_model_checksum_and_older_files_without_one(tmp_path):
    if not (SHIPPED / "config.json").exists():
        pytest.skip("no shipped model")
    assert "weights_sha256" in json.loads((SHIPPED / "config.json").read_text())
    bilm = ElmoBiLM.load(SHIPPED)  # the stored checksum verifies
    # A config.json written before checksums were stored loads too (nothing to verify against).
    old = ElmoBiLM.load(copy_without_checksum(SHIPPED, tmp_path / "old")).state_dict()
    for name, value in bilm.state_dict().items():
        assert torch.equal(old[name], value), name


def test_wrong_checksum_is_an_error(tiny_bilm, tmp_path):
    tiny_bilm.save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["weights_sha256"] = "0" * 64
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightsError, match="config.json says 0000"):
        ElmoBiLM.load(tmp_path / "m")


def test_pipeline_model_damaged_or_truncated(elmo_nlp, tmp_path):
    elmo_nlp.to_disk(tmp_path / "pipe")
    model = tmp_path / "pipe" / "elmo" / "model"
    good = model.read_bytes()
    # Overwritten inside the tensor data.
    overwrite(model, len(good) - 3000)
    with pytest.raises(ValueError, match=r"pipe/elmo/model: .*do not match their checksum"):
        spacy.load(tmp_path / "pipe")
    # Truncated.
    model.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"elmo.model.*(truncated|damaged)"):
        spacy.load(tmp_path / "pipe")
    model.write_bytes(good)
    assert spacy.load(tmp_path / "pipe")("A bank.")._.elmo.shape[0] == 3
