"""The GPU paths of the biLM and the glue. The CUDA tests run with ``pytest --gpu`` on a
machine with CUDA (the golden outputs need the shared fixtures); the device tests of the
other modules run there too (``pytest --gpu -m gpu``)."""

import numpy as np
import pytest
import torch

from spacy_elmo.bilm.tf32 import no_tf32

CUDA = pytest.mark.cuda


@pytest.fixture(scope="module")
def expected(golden_dir):
    return np.load(golden_dir / "expected.npz")


def _tf32_state():
    return (
        torch.backends.cuda.matmul.fp32_precision if hasattr(torch.backends.cuda.matmul, "fp32_precision") else None,
        torch.backends.cudnn.conv.fp32_precision if hasattr(torch.backends.cudnn, "conv") else None,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )


def test_no_tf32_is_scoped() -> None:
    before = _tf32_state()
    with no_tf32():
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # the new API (the legacy getters raise here)
            assert torch.backends.cuda.matmul.fp32_precision == "ieee"
            assert torch.backends.cudnn.conv.fp32_precision == "ieee"
        else:
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert _tf32_state() == before
    with pytest.raises(RuntimeError):
        with no_tf32():
            raise RuntimeError("inside")
    assert _tf32_state() == before


@CUDA
def test_golden_outputs_on_cuda(tiny_dir, sentences, expected) -> None:
    from spacy_elmo import ElmoBiLM

    bilm = ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5").cuda().eval()
    before = _tf32_state()
    with torch.no_grad():
        out = bilm(bilm.char_ids(sentences), [len(s) for s in sentences]).cpu().numpy()
    assert _tf32_state() == before  # the model's TF32 switch is scoped
    start = 0
    for i, sent in enumerate(sentences):
        got = out[:, start : start + len(sent)]
        np.testing.assert_allclose(got, expected[f"activations_{i:02d}"], atol=5e-5, rtol=0)
        start += len(sent)


@CUDA
def test_token_cache_on_cuda_is_exact(tiny_dir, sentences) -> None:
    from spacy_elmo import ElmoBiLM

    bilm = ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5").cuda().eval()
    ids, lengths = bilm.char_ids(sentences), [len(s) for s in sentences]
    with torch.no_grad():
        bilm.set_token_cache(0)
        plain = bilm(ids, lengths)
        bilm.set_token_cache(1000)
        cold, warm = bilm(ids, lengths), bilm(ids, lengths)
    assert bilm.token_cache is not None and bilm.token_cache.hits > 0
    torch.testing.assert_close(cold, plain, rtol=0, atol=0)
    torch.testing.assert_close(warm, plain, rtol=0, atol=0)


@CUDA
def test_component_on_gpu_gives_float32_numpy(tiny_dir) -> None:
    pytest.importorskip("cupy")
    from thinc.api import require_gpu, use_ops

    from conftest import make_elmo_nlp

    require_gpu(0)
    try:
        nlp = make_elmo_nlp(tiny_dir)
        docs = list(nlp.pipe(["The bank closed.", "", "A river bank, wide and slow."]))
    finally:
        use_ops("numpy")
    for doc in docs:
        assert isinstance(doc._.elmo, np.ndarray) and doc._.elmo.dtype == np.float32
        assert doc._.elmo.shape[1] == len(doc)
    cpu = make_elmo_nlp(tiny_dir)("A river bank, wide and slow.")
    np.testing.assert_allclose(docs[2]._.elmo, cpu._.elmo, atol=5e-5, rtol=0)
