"""The matrix products of the inference LSTM (``bilm.products``): the oneDNN form is
exact against the golden fixture and the plain products, in any batch, and its
reordered weights follow the parameters."""
import gc
import weakref
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch

from spacy_elmo.bilm import ElmoBiLM, products
from spacy_elmo.bilm.lstm import ProjectedLstmLayer

from conftest import tiny_sentences

pytestmark = pytest.mark.skipif(not products.onednn_available(), reason="torch without oneDNN")


@pytest.fixture
def force_onednn(monkeypatch):
    """Use the oneDNN products for every float32 CPU layer, the tiny fixture's too."""
    monkeypatch.setattr(products, "ONEDNN_MIN_WEIGHTS", 0)


def test_default_kind_by_size(tiny_bilm: ElmoBiLM) -> None:
    layer = tiny_bilm.lstm.layers[0]
    x = torch.zeros(2, 1, 1)
    assert products.default_kind(layer, x) == "dense"  # tiny weights: plain products
    big = ProjectedLstmLayer(input_dim=8, cell_dim=2048, projection_dim=256, cell_clip=3, proj_clip=3)
    assert products.default_kind(big, x) == "onednn"
    assert products.default_kind(big, x.double()) == "dense"


def test_onednn_matches_golden_fixture(tiny_bilm: ElmoBiLM, golden_dir: Path, tiny_dir: Path, force_onednn) -> None:
    expected = np.load(golden_dir / "expected.npz")
    tiny_bilm.set_token_cache(0)
    try:
        for i, acts in enumerate(tiny_bilm.embed_sentences(tiny_sentences(tiny_dir))):
            np.testing.assert_allclose(acts, expected[f"activations_{i:02d}"], atol=1e-5, rtol=1e-5)
    finally:
        tiny_bilm.set_token_cache(1000)


def test_onednn_same_sentence_in_any_batch(tiny_bilm: ElmoBiLM, tiny_dir: Path, force_onednn) -> None:
    sents = tiny_sentences(tiny_dir)
    target = sents[3]
    alone = tiny_bilm.embed_sentences([target])[0]
    for company in ([sents[0], target], sents[::-1], [sents[4] * 3, target, sents[4] * 3], [target] * 40):
        for out, sent in zip(tiny_bilm.embed_sentences(company, batch_tokens=512), company):
            if sent is target:
                np.testing.assert_allclose(out, alone, atol=1e-5, rtol=0)


def packed_input(layer: ProjectedLstmLayer, lengths: List[int]):
    batch_sizes = [sum(n > t for n in lengths) for t in range(max(lengths))]
    x = torch.randn(2, sum(lengths), layer.weight_ih.shape[1], generator=torch.Generator().manual_seed(1))
    return x, batch_sizes


def test_onednn_equals_dense_at_a_published_width() -> None:
    """A layer of the 'medium' shape (cell 2048, projection 256), clipping active."""
    torch.manual_seed(0)
    layer = ProjectedLstmLayer(input_dim=256, cell_dim=2048, projection_dim=256, cell_clip=0.5, proj_clip=0.1)
    x, batch_sizes = packed_input(layer, [37, 30, 30, 12, 5, 1])
    with torch.inference_mode():
        dense = layer(x, batch_sizes, "dense")
        fast = layer(x, batch_sizes)  # chosen by default at this size
        assert products.default_kind(layer, x) == "onednn"
    assert (dense.abs() > 0.1 - 1e-6).any() and (dense.abs() < 0.09).any()  # clipped and not
    torch.testing.assert_close(fast, dense, atol=1e-5, rtol=0)
    # The training path (autograd on) computes the same.
    torch.testing.assert_close(layer(x, batch_sizes).detach(), dense, atol=1e-5, rtol=0)


def test_reordered_weights_follow_the_parameters(force_onednn) -> None:
    torch.manual_seed(0)
    layer = ProjectedLstmLayer(input_dim=16, cell_dim=32, projection_dim=8, cell_clip=None, proj_clip=None)
    x, batch_sizes = packed_input(layer, [6, 4, 1])
    with torch.no_grad():
        before = layer(x, batch_sizes)
        layer.weight_hh.mul_(2.0)  # in place: the reordered copy must be rebuilt
        after = layer(x, batch_sizes)
        torch.testing.assert_close(after, layer(x, batch_sizes, "dense"), atol=1e-6, rtol=0)
    assert not torch.allclose(before, after)
    layer.load_state_dict({k: v * 0.5 for k, v in layer.state_dict().items()})
    with torch.no_grad():
        torch.testing.assert_close(layer(x, batch_sizes), layer(x, batch_sizes, "dense"), atol=1e-6, rtol=0)


def test_unknown_products_kind() -> None:
    layer = ProjectedLstmLayer(input_dim=4, cell_dim=4, projection_dim=2, cell_clip=None, proj_clip=None)
    x, batch_sizes = packed_input(layer, [2])
    with torch.no_grad(), pytest.raises(ValueError, match="unknown LSTM products 'fast'"):
        layer(x, batch_sizes, "fast")


@pytest.mark.parametrize("kind", ["onednn", "int8"])
def test_cached_weights_do_not_keep_a_layer_alive(kind: str) -> None:
    layer = ProjectedLstmLayer(input_dim=16, cell_dim=32, projection_dim=8, cell_clip=None, proj_clip=None)
    x, batch_sizes = packed_input(layer, [3, 2])
    with torch.no_grad():
        layer(x, batch_sizes, kind)
    alive = weakref.ref(layer)
    del layer
    gc.collect()
    assert alive() is None
