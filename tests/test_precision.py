"""The ``precision`` setting of ElmoBiLM and the ``elmo`` component: validation, int8
close to float32, float32 untouched."""
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo.bilm import ElmoBiLM
from spacy_elmo.bilm.precision import check_device

from conftest import make_elmo_nlp, tiny_sentences, token_cosines


@pytest.fixture
def tiny_fresh(tiny_dir: Path) -> ElmoBiLM:
    return ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5")


@pytest.mark.parametrize("value", ["int4", "INT8", "float16", "", None, 8])
def test_unknown_precision_is_refused(tiny_fresh: ElmoBiLM, value) -> None:
    with pytest.raises(ValueError, match="unknown precision"):
        tiny_fresh.precision = value
    assert tiny_fresh.precision == "float32"


def test_int8_needs_the_cpu() -> None:
    with pytest.raises(ValueError, match="'int8'.*CPU only.*cuda:0"):
        check_device("int8", torch.device("cuda:0"))
    check_device("int8", torch.device("cpu"))


def test_int8_is_close_to_float32(tiny_fresh: ElmoBiLM, tiny_dir: Path) -> None:
    sents = tiny_sentences(tiny_dir)
    exact = tiny_fresh.embed_sentences(sents)
    tiny_fresh.precision = "int8"
    quantized = tiny_fresh.embed_sentences(sents)
    for x, q in zip(exact, quantized):
        np.testing.assert_array_equal(q[0], x[0])  # the token layer stays float32
        assert token_cosines(x[1:], q[1:]).min() > 0.99
    assert max(float(np.abs(x - q).max()) for x, q in zip(exact, quantized)) > 1e-4  # really quantized
    # Back to float32: exact again (the token cache holds float32 outputs only).
    tiny_fresh.precision = "float32"
    for x, again in zip(exact, tiny_fresh.embed_sentences(sents)):
        np.testing.assert_array_equal(again, x)


def test_int8_applies_to_inference_only(tiny_fresh: ElmoBiLM, tiny_dir: Path) -> None:
    sents = tiny_sentences(tiny_dir)[:3]
    ids, lengths = tiny_fresh.char_ids(sents), [len(s) for s in sents]
    with torch.no_grad():
        exact = tiny_fresh(ids, lengths)
    tiny_fresh.precision = "int8"
    with_grad = tiny_fresh(ids, lengths)  # autograd on: float32
    torch.testing.assert_close(with_grad.detach(), exact, atol=1e-5, rtol=0)
    with torch.no_grad():
        assert not torch.allclose(tiny_fresh(ids, lengths), exact, atol=1e-4)


def test_component_precision(tiny_dir: Path) -> None:
    with pytest.raises(ValueError, match="elmo component 'elmo': unknown precision 'int4'"):
        make_elmo_nlp(tiny_dir, precision="int4")
    words = tiny_sentences(tiny_dir)[0]
    exact = make_elmo_nlp(tiny_dir)(" ".join(words))._.elmo
    nlp = make_elmo_nlp(tiny_dir, precision="int8")
    assert nlp.get_pipe("elmo").bilm.precision == "int8"
    doc = nlp(" ".join(words))
    assert doc._.elmo.shape == exact.shape
    assert token_cosines(exact[1:], doc._.elmo[1:]).min() > 0.99
    assert not np.allclose(exact, doc._.elmo, atol=1e-4)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_needs_cuda(tiny_fresh: ElmoBiLM, tiny_dir: Path, precision: str) -> None:
    tiny_fresh.precision = precision  # allowed: the biLM may move to a GPU later
    with pytest.raises(ValueError, match=f"precision '{precision}' is for CUDA GPUs, but the biLM is on cpu"):
        tiny_fresh.embed_sentences(tiny_sentences(tiny_dir)[:2])
    with pytest.raises(ValueError, match="is for CUDA GPUs"):
        check_device(precision, torch.device("cpu"))
    check_device(precision, torch.device("cuda"))


def test_component_reduced_precision_on_cpu_is_an_error(tiny_dir: Path) -> None:
    nlp = make_elmo_nlp(tiny_dir, precision="bf16")
    with pytest.raises(ValueError, match="precision 'bf16' is for CUDA GPUs"):
        nlp("A short text .")


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_on_cuda(tiny_dir: Path, precision: str) -> None:
    bilm = ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5").cuda()
    sents = tiny_sentences(tiny_dir)
    exact = bilm.embed_sentences(sents)
    bilm.precision = precision
    low = bilm.embed_sentences(sents)
    for x, y in zip(exact, low):
        assert y.dtype == np.float32 and y.shape == x.shape
        assert token_cosines(x, y).min() > 0.99
    assert max(float(np.abs(x - y).max()) for x, y in zip(exact, low)) > 1e-4  # really reduced
    bilm.precision = "float32"
    for x, again in zip(exact, bilm.embed_sentences(sents)):
        np.testing.assert_allclose(again, x, atol=5e-5, rtol=0)
