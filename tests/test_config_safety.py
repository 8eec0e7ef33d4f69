"""Hostile but realistic configs and inputs: clear errors, never silent garbage."""
import json

import numpy as np
import pytest
import spacy
from spacy.training import Example

from spacy_elmo import ElmoBiLM
from spacy_elmo.bilm.errors import OptionsError


@pytest.mark.parametrize(
    "cfg,message",
    [({"max_length": 0}, "max_length must be at least 1"), ({"tensor": "foo"}, "unknown tensor = 'foo'"),
     ({"cache_mb": -1}, "cache_mb must be >= 0")],
)
def test_component_config(cfg, message):
    with pytest.raises(ValueError, match=message):
        spacy.blank("en").add_pipe("elmo", config=cfg)


def ner_pipeline(tiny_dir, **listener):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    tok2vec = {"@architectures": "spacy-elmo.ElmoListener.v1", "width": 8, **listener}
    nlp.add_pipe("ner", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
        "hidden_width": 8, "maxout_pieces": 2, "use_upper": True, "tok2vec": tok2vec}})
    nlp.config["initialize"]["components"]["elmo"] = {"loader": {
        "@misc": "spacy-elmo.AllenNLPLoader.v1", "options_path": str(tiny_dir / "options.json"),
        "weights_path": str(tiny_dir / "weights.hdf5")}}
    doc = nlp.make_doc("Alice went to Paris .")
    eg = Example.from_dict(doc, {"entities": ["U-PER", "O", "O", "U-LOC", "O"]})
    return nlp, eg


@pytest.mark.parametrize(
    "listener,message",
    [({"n_layers": 5}, "listener mixes n_layers = 5, but the biLM has 3 layers"),
     ({"upstream": "nope"}, "component 'ner' has an ElmoListener with upstream = 'nope'.*\\['elmo'\\]")],
)
def test_listener_config(tiny_dir, listener, message):
    nlp, eg = ner_pipeline(tiny_dir, **listener)
    with pytest.raises(ValueError, match=message):
        nlp.initialize(lambda: [eg])


def test_load_directory_of_another_kind(tmp_path, tiny_dir):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    with pytest.raises(OptionsError, match="config.json: missing option 'lstm'"):
        ElmoBiLM.load(tmp_path)
    with pytest.raises(OptionsError, match="not an ELMo model directory"):
        ElmoBiLM.load(tiny_dir)  # the published layout, not the own format


def test_odd_text(elmo_nlp):
    doc = elmo_nlp("y" * 10_000 + " 🦜🦜 ok\u200b \t  ")
    assert doc._.elmo.shape == (3, len(doc), 32) and np.isfinite(doc._.elmo).all()
    assert doc[0].has_vector and doc[0].similarity(doc[1]) == pytest.approx(
        float(doc.tensor[0] @ doc.tensor[1] / np.linalg.norm(doc.tensor[0]) / np.linalg.norm(doc.tensor[1])), abs=1e-6)
    spaces = elmo_nlp("   \n\t ")
    assert not spaces._.elmo.any() and not spaces.has_vector
