"""The English model shipped inside the package is the default and gives contextual vectors."""
import numpy as np
import pytest
import spacy

from spacy_elmo.cli.demo import SENSES, layer_similarities, sense_similarities, sense_tokens
from spacy_elmo.loaders import DEFAULT_MODEL, MODELS_DIR


@pytest.fixture(scope="module")
def default_nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.initialize()  # no loader: the shipped model
    return nlp


def test_shipped_model_is_small_and_complete():
    path = MODELS_DIR / DEFAULT_MODEL
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 40 * 2**20
    assert {"config.json", "model.safetensors", "vocab.txt", "README.md"} <= {f.name for f in path.iterdir()}


def test_default_initialize_uses_shipped_model(default_nlp):
    doc = default_nlp("The river bank was flooded.")
    assert doc._.elmo.shape == (3, 6, 1024)
    assert doc.tensor.shape == (6, 1024)
    assert np.isfinite(doc._.elmo).all()
    # Contextual: the same word in two contexts gets different top-layer vectors, same layer 0.
    other = default_nlp("The bank raised interest rates.")
    np.testing.assert_array_equal(doc._.elmo[0, 2], other._.elmo[0, 1])
    assert not np.allclose(doc._.elmo[2, 2], other._.elmo[2, 1], atol=1e-3)


# The shipped model is small (see its README.md): "bank" (river vs finance) does not separate.
# strict: once a better model separates it, this test fails until the mark is removed.
NOT_YET = pytest.mark.xfail(reason="small shipped model: bank senses not separated", strict=True)


@pytest.mark.parametrize("word", [pytest.param("bank", marks=NOT_YET), "play", "bat"])
def test_same_sense_is_closer(default_nlp, word):
    rows = {w: (same, other) for w, same, other in sense_similarities(sense_tokens(default_nlp))}
    same, other = rows[word]
    assert same > other, (word, same, other)


def test_similarities_by_layer_and_direction(default_nlp):
    """Layer 0 is context-free (cosine 1 for the same word anywhere); the LSTM layers are not."""
    rows = dict(layer_similarities(sense_tokens(default_nlp)))
    assert set(rows) == {w for w, *_ in SENSES}
    for word, parts in rows.items():
        names = [name for name, _, _ in parts]
        assert names == ["layer 0", "layer 1 fwd", "layer 1 bwd", "layer 2 fwd", "layer 2 bwd"]
        assert parts[0][1:] == pytest.approx((1.0, 1.0), abs=1e-6)
        assert all(-1 <= s < 0.999 and -1 <= o < 0.999 for _, s, o in parts[1:]), (word, parts)


def test_demo_by_layer_prints_each_part():
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["demo", "--by-layer"])
    assert result.exit_code == 0, result.output
    table = result.output.split("on each layer")[1].splitlines()[1:]
    assert table[0].split() == ["word", "layer", "0", "layer", "1", "fwd", "layer", "1", "bwd", "layer", "2", "fwd", "layer", "2", "bwd"]
    assert [line.split()[0] for line in table[1:4]] == ["bank", "play", "bat"]
    assert all(line.split()[1:4] == ["1.000", "/", "1.000"] for line in table[1:4])
