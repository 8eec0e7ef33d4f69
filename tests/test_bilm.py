"""The biLM against the AllenNLP golden fixture, its weight files and its fast paths."""
import copy
import json
import shutil
from pathlib import Path
from typing import List

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo.bilm import ElmoBiLM, OptionsError, ScalarMix, WeightsError, tokens_to_char_ids
from spacy_elmo.bilm.tf32 import no_tf32
from spacy_elmo.bilm.token_encoder import trimmed_widths

ATOL = RTOL = 1e-5


@pytest.fixture(scope="module")
def expected(golden_dir: Path):
    """The AllenNLP golden outputs for ``tiny_bilm`` (the test skips without them)."""
    return np.load(golden_dir / "expected.npz")


@pytest.fixture(scope="module")
def bilm(tiny_bilm: ElmoBiLM, device: torch.device) -> ElmoBiLM:
    """``tiny_bilm`` on the test device (a copy on CUDA with ``pytest --gpu``)."""
    return tiny_bilm if device.type == "cpu" else copy.deepcopy(tiny_bilm).to(device)


def close(actual, desired, device: torch.device = torch.device("cpu")) -> None:
    """Within 1e-5 on the CPU; 5e-5 on a GPU (other kernels, TF32 off), as the fixture
    README recommends."""
    tol = ATOL if device.type == "cpu" else 5e-5
    np.testing.assert_allclose(actual, desired, atol=tol, rtol=RTOL)


def fixture_mix() -> ScalarMix:
    return ScalarMix(initial_weights=[0.1, 0.5, -0.3], initial_gamma=1.3)


@pytest.mark.parametrize("cache", [True, False])
def test_layers_and_mix_in_one_batch(bilm: ElmoBiLM, expected, sentences, cache: bool, device) -> None:
    bilm.set_token_cache(1000 if cache else 0)
    for _ in range(2 if cache else 1):  # cold, then warm cache
        layers = bilm.embed_sentences(sentences)
        for i, acts in enumerate(layers):
            close(acts, expected[f"activations_{i:02d}"], device)
            with torch.no_grad():
                close(fixture_mix()(torch.from_numpy(acts)).numpy(), expected[f"elmo_representation_{i:02d}"], device)
    bilm.set_token_cache(1000)


def test_one_sentence_at_a_time(bilm: ElmoBiLM, expected, sentences, device) -> None:
    for i, sent in enumerate(sentences):
        with torch.no_grad():
            acts = bilm(bilm.char_ids([sent]), [len(sent)])
        close(acts.cpu().numpy(), expected[f"activations_{i:02d}"], device)


def test_training_path_matches_and_has_gradients(bilm: ElmoBiLM, expected, sentences, device) -> None:
    """With autograd on (the pretraining path, no cache) the numbers are the same."""
    acts = bilm.forward_with_boundaries(bilm.char_ids(sentences), [len(s) for s in sentences])
    assert acts.requires_grad and acts.device.type == device.type
    offset = 0
    for i, sent in enumerate(sentences):
        n = len(sent) + 2
        close(acts[:, offset : offset + n].detach().cpu().numpy(), expected["activations_with_bos_eos"][i, :, :n], device)
        offset += n
    acts.sum().backward()
    params = dict(bilm.named_parameters())
    for name in ("token_encoder.convs.4.weight", "lstm.layers.0.weight_hh", "lstm.layers.1.weight_proj"):
        assert params[name].grad is not None and params[name].grad.abs().sum() > 0
    bilm.zero_grad(set_to_none=True)


def test_boundaries_in_inference(bilm: ElmoBiLM, expected, sentences, device) -> None:
    with torch.inference_mode():
        acts = bilm.forward_with_boundaries(bilm.char_ids(sentences), [len(s) for s in sentences])
    offset = 0
    for i, sent in enumerate(sentences):
        n = len(sent) + 2
        close(acts[:, offset : offset + n].cpu().numpy(), expected["activations_with_bos_eos"][i, :, :n], device)
        offset += n


def test_debug_cnn_and_highway(bilm: ElmoBiLM, expected, device) -> None:
    encoder = bilm.token_encoder
    for i in range(3):
        ids = torch.from_numpy(expected[f"char_ids_{i:02d}"].astype(np.int64)).to(device)
        with torch.no_grad(), no_tf32():
            cnn = encoder.cnn(ids)
            x = cnn
            for highway in encoder.highways:
                x = highway(x)
        close(cnn.cpu().numpy(), expected[f"debug_cnn_out_{i:02d}"], device)
        close(x.cpu().numpy(), expected[f"debug_highway_out_{i:02d}"], device)


def test_char_ids_match_fixture(sentences, expected) -> None:
    for i, sent in enumerate(sentences):
        ids = expected[f"char_ids_{i:02d}"]
        np.testing.assert_array_equal(tokens_to_char_ids(sent), ids[1:-1])


def test_char_id_mapping(shared_dir: Path) -> None:
    mapping = json.loads((shared_dir / "fixtures" / "char_id_mapping.json").read_text(encoding="utf-8"))
    assert len(mapping["tokens"]) == 28
    for entry in mapping["tokens"]:
        token = "".join(chr(int(cp[2:], 16)) for cp in entry["token_codepoints"])
        assert bytes(entry["utf8_bytes"]) == token.encode("utf-8", "ignore")
        np.testing.assert_array_equal(tokens_to_char_ids([token])[0], entry["char_ids"], err_msg=repr(token))
    np.testing.assert_array_equal(tokens_to_char_ids(["<S>"])[0], mapping["bos_token_char_ids"])
    np.testing.assert_array_equal(tokens_to_char_ids(["</S>"])[0], mapping["eos_token_char_ids"])


def test_same_sentence_in_any_company(bilm: ElmoBiLM, sentences) -> None:
    """Alone, in different batches and next to much longer sentences: within 1e-5."""
    target = sentences[3]
    alone = bilm.embed_sentences([target])[0]
    long_one = sentences[4] * 3
    for company in ([sentences[0], target], sentences[::-1], [long_one, target, long_one], [target] * 5):
        bilm.set_token_cache(0 if len(company) % 2 else 1000)
        for out, sent in zip(bilm.embed_sentences(company, batch_tokens=64), company):
            if sent is target:
                np.testing.assert_allclose(out, alone, atol=1e-5, rtol=0)
    bilm.set_token_cache(1000)


def test_trimming_is_exact(tiny_bilm: ElmoBiLM) -> None:
    tokens = ["a", "word", "x" * 40, "x" * 45, "y" * 60, "", "<S>"]
    ids = torch.from_numpy(tokens_to_char_ids(tokens))
    widths = trimmed_widths(ids, 5)
    assert widths.tolist() == [8, 11, 47, 50, 50, 7, 8]
    encoder = tiny_bilm.token_encoder
    with torch.no_grad():
        full = torch.cat([encoder._cnn(ids[i : i + 1]) for i in range(len(tokens))])
        close(encoder.activation(full).numpy(), encoder.cnn(ids).numpy())


def test_cache_follows_weight_changes(tiny_dir: Path, sentences) -> None:
    bilm = ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5")
    before = bilm.embed_sentences(sentences[:2])
    with torch.no_grad():
        bilm.token_encoder.projection.bias.add_(0.5)
    after = bilm.embed_sentences(sentences[:2])
    bilm.set_token_cache(0)
    close(np.concatenate(after, axis=1), np.concatenate(bilm.embed_sentences(sentences[:2]), axis=1))
    assert np.abs(before[0] - after[0]).max() > 0.1
    cached = ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5")
    cached.set_token_cache(4)  # fewer entries than tokens: eviction keeps results exact
    for _ in range(2):
        close(np.concatenate(cached.embed_sentences(sentences), axis=1),
              np.concatenate(ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5")
                             .embed_sentences(sentences), axis=1))
    assert len(cached.token_cache) == 4


def test_own_format_round_trip(tiny_bilm: ElmoBiLM, tmp_path: Path, sentences) -> None:
    reference = tiny_bilm.embed_sentences(sentences)
    tiny_bilm.save(tmp_path / "full")
    loaded = ElmoBiLM.load(tmp_path / "full")
    for a, b in zip(reference, loaded.embed_sentences(sentences)):
        np.testing.assert_array_equal(a, b)
    tiny_bilm.save(tmp_path / "half", half=True)
    half = ElmoBiLM.load(tmp_path / "half")
    assert json.loads((tmp_path / "half" / "config.json").read_text())["dtype"] == "float16"
    for a, b in zip(reference, half.embed_sentences(sentences)):
        np.testing.assert_allclose(a, b, atol=0.1)


def test_save_over_a_model_keeps_its_card(tiny_bilm: ElmoBiLM, tmp_path: Path) -> None:
    """Saving over a model directory replaces the model files and keeps the rest (a model
    card); a vocab.txt the new model does not have is not left behind."""
    target = tmp_path / "model"
    tiny_bilm.save(target, half=True)
    (target / "README.md").write_text("# card\n", encoding="utf-8")
    (target / ".git").mkdir()
    (target / ".git" / "HEAD").write_text("ref\n", encoding="utf-8")
    (target / ".env").write_text("KEY=1\n", encoding="utf-8")
    (target / "vocab.txt").write_text("stale\n", encoding="utf-8")
    tiny_bilm.save(target)
    assert (target / "README.md").read_text(encoding="utf-8") == "# card\n"
    assert (target / ".git" / "HEAD").read_text(encoding="utf-8") == "ref\n"  # a user's dot-files are kept
    assert (target / ".env").read_text(encoding="utf-8") == "KEY=1\n"
    assert (target / "model.safetensors").stat().st_mode & 0o777 != 0o600
    assert not (target / "vocab.txt").exists()
    assert json.loads((target / "config.json").read_text())["dtype"] == "float32"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["model"]


def test_allennlp_round_trip(tiny_bilm: ElmoBiLM, tmp_path: Path, tiny_dir: Path) -> None:
    tiny_bilm.to_allennlp(tmp_path)
    with h5py.File(tmp_path / "weights.hdf5", "r") as new, h5py.File(tiny_dir / "weights.hdf5", "r") as old:
        names: List[str] = []
        old.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            np.testing.assert_allclose(new[name][...], old[name][...], atol=1e-7, err_msg=name)
    again = ElmoBiLM.from_allennlp(tmp_path / "options.json", tmp_path / "weights.hdf5")
    for key, value in tiny_bilm.state_dict().items():
        torch.testing.assert_close(again.state_dict()[key], value, atol=1e-7, rtol=0)


def _copy_weights(tiny_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "weights.hdf5"
    shutil.copy(tiny_dir / "weights.hdf5", target)
    return target


def test_missing_dataset_is_named(tiny_dir: Path, tmp_path: Path) -> None:
    weights = _copy_weights(tiny_dir, tmp_path)
    with h5py.File(weights, "a") as h5:
        del h5["CNN_proj/W_proj"]
    with pytest.raises(WeightsError, match=r"weights\.hdf5.*'CNN_proj/W_proj' is missing"):
        ElmoBiLM.from_allennlp(tiny_dir / "options.json", weights)


def test_wrong_shape_is_named(tiny_dir: Path, tmp_path: Path) -> None:
    weights = _copy_weights(tiny_dir, tmp_path)
    with h5py.File(weights, "a") as h5:
        del h5["char_embed"]
        h5.create_dataset("char_embed", data=np.zeros((261, 8), dtype=np.float32))
    with pytest.raises(WeightsError, match=r"weights\.hdf5.*'char_embed' has shape \(261, 8\).*\(261, 16\)"):
        ElmoBiLM.from_allennlp(tiny_dir / "options.json", weights)


def test_not_hdf5_is_named(tiny_dir: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights.hdf5"
    weights.write_text("not an HDF5 file")
    with pytest.raises(WeightsError, match=r"weights\.hdf5 is not an HDF5 file"):
        ElmoBiLM.from_allennlp(tiny_dir / "options.json", weights)


def test_missing_options_is_named(tiny_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match=r"options file not found: .*options\.json"):
        ElmoBiLM.from_allennlp(tmp_path / "options.json", tiny_dir / "weights.hdf5")
    with pytest.raises(WeightsError, match=r"weights file not found: .*nothing\.hdf5"):
        ElmoBiLM.from_allennlp(tiny_dir / "options.json", tmp_path / "nothing.hdf5")
