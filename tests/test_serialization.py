"""Serialization matrix of the ``elmo`` component: bytes and disk; the component alone and
the whole pipeline; a frozen and a fine-tuned biLM; before ``initialize`` (the pipe
round-trips without weights: calling it is a clear error, initializing it afterwards works),
after it (with NER and textcat listening and trained a little), and after
``nlp.replace_listeners`` for the NER. Every reloaded pipeline gives the same
``doc.tensor``, ``doc._.elmo``, listener features, entities and text categories on texts
with accents, emoji, two sentences, one token and an empty text."""
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import spacy
import torch
from spacy.training import Example
from spacy.util import load_model_from_config

from conftest import make_elmo_nlp

TEXTS = ["The river bank was flooded in Zürich.", "Naïve café owners 😀 said: «Grüezi»! Then they left.", "",
         "😀", "Bank"]
TRAIN = [("Anna lives in Berlin.", [(0, 4, "PER"), (14, 20, "LOC")], "POS"),
         ("The bank in Paris closed.", [(12, 17, "LOC")], "NEG"),
         ("Bob likes 😀 emoji.", [(0, 3, "PER")], "POS"),
         ("Nothing here.", [], "NEG")]
# Same weights through another path (a reloaded pipeline, a cold or warm token cache):
# equal up to float32 rounding, as in test_pipe (the random tiny model of
# tests/make_tiny.py differs by up to 2.4e-6 here).
SAME = dict(atol=1e-5, rtol=0)


def listener(**extra: Any) -> Dict[str, Any]:
    return {"@architectures": "spacy-elmo.ElmoListener.v1", "width": 16, "upstream": "elmo", "n_layers": 3,
            "layer_norm": True, "dropout": 0.0, **extra}


def loader_cfg(tiny_dir: Path) -> Dict[str, Any]:
    return {"loader": {"@misc": "spacy-elmo.AllenNLPLoader.v1", "options_path": str(tiny_dir / "options.json"),
                       "weights_path": str(tiny_dir / "weights.hdf5")}}


def build(tiny_dir: Path, frozen: bool, state: str) -> spacy.Language:
    """A pipeline in the given state: "uninitialized" (elmo alone, no weights),
    "initialized" (elmo, NER and textcat listening, a few updates) or "replaced" (that,
    then the NER's listener replaced by its own copy of the biLM)."""
    torch.manual_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"frozen": frozen})
    nlp.config["initialize"]["components"]["elmo"] = loader_cfg(tiny_dir)
    if state == "uninitialized":
        return nlp
    nlp.add_pipe("ner", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
        "hidden_width": 16, "maxout_pieces": 2, "use_upper": True, "nO": None, "tok2vec": listener()}})
    nlp.add_pipe("textcat", config={"model": {
        "@architectures": "spacy.TextCatReduce.v1", "exclusive_classes": True, "use_reduce_first": False,
        "use_reduce_last": False, "use_reduce_max": False, "use_reduce_mean": True, "nO": None,
        "tok2vec": listener(embed={"@architectures": "spacy.MultiHashEmbed.v2", "width": 16,
                                   "attrs": ["NORM", "SHAPE"], "rows": [500, 50],
                                   "include_static_vectors": False})}})
    examples = [Example.from_dict(nlp.make_doc(text), {"entities": ents, "cats": {"POS": cat == "POS", "NEG": cat == "NEG"}})
                for text, ents, cat in TRAIN]
    optimizer = nlp.initialize(lambda: examples)
    before = {k: v.clone() for k, v in nlp.get_pipe("elmo").bilm.state_dict().items()}
    for _ in range(3):
        nlp.update(examples, sgd=optimizer, drop=0.0)
    changed = any(not torch.equal(before[k], v) for k, v in nlp.get_pipe("elmo").bilm.state_dict().items())
    assert changed == (not frozen)  # fine-tuning moved the biLM away from the fixture weights
    if state == "replaced":
        nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
        assert nlp.get_pipe("elmo").listening_components == ["textcat"]
    return nlp


def outputs(nlp: spacy.Language, texts: List[str] = TEXTS) -> List[Dict[str, Any]]:
    docs = list(nlp.pipe(texts))
    found = [{"tensor": doc.tensor, "elmo": doc._.elmo} for doc in docs]
    if "textcat" in nlp.pipe_names:
        for doc, out in zip(docs, found):
            out["cats"] = doc.cats
    if "ner" in nlp.pipe_names:
        features = nlp.get_pipe("ner").model.get_ref("tok2vec").predict(docs)
        for doc, out, feats in zip(docs, found, features):
            out["ents"] = [(e.start, e.end, e.label_) for e in doc.ents]
            out["ner_features"] = feats
    return found


def assert_same(got: List[Dict[str, Any]], want: List[Dict[str, Any]]) -> None:
    assert len(got) == len(want)
    for text, g, w in zip(TEXTS, got, want):
        assert set(g) == set(w), text
        for key in ("tensor", "elmo", "ner_features"):
            if key in w:
                assert g[key].shape == w[key].shape, (text, key)
                np.testing.assert_allclose(g[key], w[key], **SAME, err_msg=f"{key} of {text!r}")
        if "cats" in w:
            assert g["cats"] == pytest.approx(w["cats"], abs=1e-6), text
        if "ents" in w:
            assert g["ents"] == w["ents"], text


@pytest.fixture(scope="module")
def pipelines(tiny_dir):
    """Each (frozen, state) pipeline once, with its outputs before serialization."""
    built: Dict[Any, Any] = {}

    def get(frozen: bool, state: str):
        if (frozen, state) not in built:
            nlp = build(tiny_dir, frozen, state)
            built[frozen, state] = (nlp, None if state == "uninitialized" else outputs(nlp))
        return built[frozen, state]

    return get


def round_trip(nlp: spacy.Language, medium: str, scope: str, path: Path) -> spacy.Language:
    if scope == "pipeline":
        if medium == "disk":
            nlp.to_disk(path)
            return spacy.load(path)
        new = load_model_from_config(nlp.config, auto_fill=True, validate=True)
        return new.from_bytes(nlp.to_bytes())
    elmo = nlp.get_pipe("elmo")
    new = spacy.blank("en")
    new.config["initialize"]["components"]["elmo"] = nlp.config["initialize"]["components"]["elmo"]
    component = new.add_pipe("elmo", config={"frozen": elmo.frozen})
    if medium == "disk":
        elmo.to_disk(path)
        component.from_disk(path)
    else:
        component.from_bytes(elmo.to_bytes())
    return new


CASES = [(medium, scope, frozen, state)
         for medium in ("bytes", "disk") for scope in ("component", "pipeline") for frozen in (True, False)
         for state in ("uninitialized", "initialized", "replaced") if not (scope == "component" and state == "replaced")]


@pytest.mark.parametrize("medium,scope,frozen,state", CASES,
                         ids=[f"{m}-{s}-{'frozen' if f else 'tuned'}-{st}" for m, s, f, st in CASES])
def test_round_trip(pipelines, tiny_dir, tmp_path, medium, scope, frozen, state):
    nlp, want = pipelines(frozen, state)
    new = round_trip(nlp, medium, scope, tmp_path / "saved")
    elmo = new.get_pipe("elmo")
    assert elmo.frozen == frozen
    if state == "uninitialized":
        assert elmo.bilm is None
        with pytest.raises(ValueError, match="no weights yet"):
            new("The river bank.")
        new.initialize()  # the loader of [initialize.components.elmo], as before saving
        want = outputs(make_elmo_nlp(tiny_dir, frozen=frozen))
    if scope == "component":
        want = [{"tensor": w["tensor"], "elmo": w["elmo"]} for w in want]
    else:
        assert new.pipe_names == nlp.pipe_names
    assert all(p.requires_grad == (not frozen) for p in elmo.bilm.parameters())
    assert_same(outputs(new), want)
    if state == "replaced" and scope == "pipeline":
        assert elmo.listening_components == ["textcat"]
        assert new.get_pipe("ner").model.get_ref("tok2vec").name != "elmo-listener"
