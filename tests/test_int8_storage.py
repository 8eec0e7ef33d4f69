"""int8 storage of the weights (``bilm.int8``, ``export --dtype int8``): what is stored, how
close the vectors stay, and clear errors for files that do not add up."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from spacy_elmo import ElmoBiLM
from spacy_elmo.bilm.errors import WeightsError
from spacy_elmo.bilm.int8 import MIN_ELEMENTS, SCALE_SUFFIX, dequantize_state, quantize, quantize_state
from spacy_elmo.bilm.serialize import CONFIG_METADATA_KEY, state_from_bytes
from spacy_elmo.export import export

from conftest import token_cosines


def test_quantize_is_within_half_a_step_and_keeps_zero_slices() -> None:
    gen = torch.Generator().manual_seed(0)
    value = torch.randn(3, 40, 70, generator=gen) * torch.linspace(0.01, 5, 70)  # scales differ by column
    value[1, :, 5] = 0
    q, scale = quantize(value)
    assert q.dtype == torch.int8 and scale.shape == (3, 1, 70) and int(q.abs().max()) == 127
    assert torch.all((q.float() * scale - value).abs() <= scale / 2 + 1e-7)
    assert torch.all(q[1, :, 5] == 0) and scale[1, 0, 5] == 1  # an all-zero slice: no division by zero


def test_only_large_matrices_are_int8(tiny_bilm: ElmoBiLM) -> None:
    stored = quantize_state(tiny_bilm.state_dict())
    for name, value in tiny_bilm.state_dict().items():
        if value.dim() >= 2 and value.numel() >= MIN_ELEMENTS:
            assert stored[name].dtype == torch.int8 and (name + SCALE_SUFFIX) in stored
        else:
            assert stored[name].dtype == torch.float16 and (name + SCALE_SUFFIX) not in stored
    back = dequantize_state(stored, "test")
    assert set(back) == set(tiny_bilm.state_dict())
    for name, value in tiny_bilm.state_dict().items():
        assert back[name].shape == value.shape
        torch.testing.assert_close(back[name].float(), value, atol=float(value.abs().max()) / 127, rtol=0)


def test_int8_model_dir_round_trip(tiny_bilm: ElmoBiLM, tmp_path: Path, sentences) -> None:
    tiny_bilm.save(tmp_path / "half", half=True)
    tiny_bilm.save(tmp_path / "int8", dtype="int8")
    configs = {d: json.loads((tmp_path / d / "config.json").read_text()) for d in ("half", "int8")}
    assert configs["int8"]["dtype"] == "int8" and configs["int8"]["format_version"] == 2  # older readers refuse it
    assert configs["half"]["format_version"] == 1  # what older readers still read
    with safe_open(str(tmp_path / "int8" / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
    assert dtypes == {torch.int8, torch.float32, torch.float16}
    sizes = {d: (tmp_path / d / "model.safetensors").stat().st_size for d in ("half", "int8")}
    assert sizes["int8"] < 0.75 * sizes["half"]
    loaded = ElmoBiLM.load(tmp_path / "int8")
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    for a, b in zip(tiny_bilm.embed_sentences(sentences), loaded.embed_sentences(sentences)):
        assert not np.array_equal(a, b)  # stored with rounding ...
        assert token_cosines(a, b).min() > 0.99  # ... close to the float32 vectors
    again = ElmoBiLM.from_bytes(loaded.to_bytes(dtype="int8"))  # int8 of int8: the same weights
    for a, b in zip(loaded.parameters(), again.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _tampered(bilm: ElmoBiLM, tmp_path: Path, change) -> bytes:
    """int8 bytes of ``bilm`` after ``change(tensors)`` (no stored checksum, as in older files)."""
    path = tmp_path / "t.safetensors"
    path.write_bytes(bilm.to_bytes(dtype="int8"))
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={CONFIG_METADATA_KEY: json.dumps(bilm.config.to_dict())})
    return path.read_bytes()


W = "lstm.layers.0.weight_ih"


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop(W + SCALE_SUFFIX), f"'{W}' is int8 but its scales"),
    (lambda t: t.__setitem__(W + SCALE_SUFFIX, t[W + SCALE_SUFFIX][:, :, :3].contiguous()), f"scales of int8 tensor '{W}' have shape"),
    (lambda t: t.__setitem__(W, t[W].float()), f"not int8 or missing: ['{W}']"),
])
def test_bad_int8_files_are_named(tiny_bilm: ElmoBiLM, tmp_path: Path, change, message) -> None:
    data = _tampered(tiny_bilm, tmp_path, change)
    with pytest.raises(WeightsError) as err:
        ElmoBiLM.from_bytes(data, "tampered.safetensors")
    assert message in str(err.value) and "tampered.safetensors" in str(err.value)


def test_dtype_choices_are_checked(tiny_bilm: ElmoBiLM, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown weights dtype 'int4'.*float32, float16, int8"):
        tiny_bilm.save(tmp_path / "a", dtype="int4")
    with pytest.raises(ValueError, match="half=True asks for float16 weights but dtype is 'int8'"):
        tiny_bilm.save(tmp_path / "b", half=True, dtype="int8")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    tiny_bilm.save(tmp_path / "m")
    with pytest.raises(ValueError, match="AllenNLP layout stores float32"):
        export(tmp_path / "m", tmp_path / "out", "allennlp", dtype="int8")
    assert state_from_bytes(tiny_bilm.to_bytes(), "x").keys() == tiny_bilm.state_dict().keys()


def _saved_pipeline(weights: Path, out: Path, storage_dtype: str):
    """A pipeline with an ``elmo`` (ElmoModel.v2 storing its biLM in ``storage_dtype``)
    initialised from ``weights``, saved to ``out``; (pipeline, size of the elmo model file)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.ElmoModel.v2", "storage_dtype": storage_dtype}})
    nlp.config["initialize"]["components"]["elmo"] = {"loader": {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(weights)}}
    nlp.initialize()
    nlp.to_disk(out)
    return nlp, (out / "elmo" / "model").stat().st_size


def test_int8_dir_in_a_pipeline_saves_and_loads_exactly(tiny_bilm: ElmoBiLM, tmp_path: Path) -> None:
    """The component loads an int8 directory (dequantized), and a saved pipeline gives back
    exactly the vectors it gave before saving."""
    import spacy

    tiny_bilm.save(tmp_path / "int8", dtype="int8")
    nlp, _ = _saved_pipeline(tmp_path / "int8", tmp_path / "pipeline", "float32")
    text = "The river bank by the café was flooded 🙂"  # one sentence
    before = nlp(text)
    (want,) = ElmoBiLM.load(tmp_path / "int8").embed_sentences([[t.text for t in before]])
    np.testing.assert_allclose(want, before._.elmo, atol=1e-5)
    after = spacy.load(tmp_path / "pipeline")(text)
    np.testing.assert_array_equal(before._.elmo, after._.elmo)


def test_pipeline_storage_dtype(tiny_bilm: ElmoBiLM, tmp_path: Path) -> None:
    """ElmoModel.v2's storage_dtype: float16 is exact for float16 weights and half the
    size; int8 is smaller still, close, and saving it again changes nothing."""
    import spacy

    tiny_bilm.save(tmp_path / "half", dtype="float16")
    text = "The river bank by the café was flooded 🙂"
    sizes, vectors = {}, {}
    for dtype in ("float32", "float16", "int8"):
        nlp, sizes[dtype] = _saved_pipeline(tmp_path / "half", tmp_path / dtype, dtype)
        before = nlp(text)._.elmo
        loaded = spacy.load(tmp_path / dtype)
        assert loaded.get_pipe("elmo").model.attrs["storage_dtype"] == dtype
        vectors[dtype] = loaded(text)._.elmo
        if dtype != "int8":
            np.testing.assert_array_equal(before, vectors[dtype])
    assert sizes["int8"] < 0.62 * sizes["float16"] and sizes["float16"] < 0.51 * sizes["float32"], sizes
    assert token_cosines(vectors["int8"], vectors["float32"]).min() > 0.98 and not np.array_equal(vectors["int8"], vectors["float32"])
    # a loaded int8 pipeline saved again keeps the same weights (quantizing is idempotent)
    spacy.load(tmp_path / "int8").to_disk(tmp_path / "again")
    np.testing.assert_array_equal(spacy.load(tmp_path / "again")(text)._.elmo, vectors["int8"])


def test_unknown_storage_dtype_is_named() -> None:
    import spacy

    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="ElmoModel.v2 storage_dtype: unknown weights dtype 'bfloat16'"):
        nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.ElmoModel.v2", "storage_dtype": "bfloat16"}})
