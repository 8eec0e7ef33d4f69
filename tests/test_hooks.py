"""Token/Span/Doc vectors and similarity through the component's user hooks."""
import pickle
import warnings

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin

from conftest import make_elmo_nlp
from spacy_elmo import restore_elmo_hooks

RIVER = "We walked along the bank of the river."
MONEY = "The bank raised interest rates again."


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def bank(doc):
    return next(t for t in doc if t.text == "bank")


@pytest.fixture(scope="module")
def nlp(tiny_dir):
    return make_elmo_nlp(tiny_dir)


def test_same_word_in_two_contexts_is_not_identical(nlp):
    a, b = nlp(RIVER), nlp(MONEY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no W007 (no static vectors) nor any other warning
        sim = bank(a).similarity(bank(b))
        span_sim = a[bank(a).i : bank(a).i + 1].similarity(bank(b))
        doc_sim = a.similarity(b)
        span_doc = a[0:3].similarity(b)
    want = cosine(a.tensor[bank(a).i], b.tensor[bank(b).i])
    assert sim == pytest.approx(want, abs=1e-6) and sim < 0.999
    assert span_sim == pytest.approx(want, abs=1e-6)
    assert doc_sim == pytest.approx(cosine(a.tensor.mean(0), b.tensor.mean(0)), abs=1e-6)
    assert span_doc == pytest.approx(cosine(a.tensor[0:3].mean(0), b.tensor.mean(0)), abs=1e-6)
    # The same token in the same context is still 1.0; Token.vector is the doc.tensor row.
    assert bank(a).similarity(bank(nlp(RIVER))) == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_array_equal(bank(a).vector, a.tensor[bank(a).i])
    assert bank(a).has_vector and a.has_vector and a[0:2].has_vector


def test_views_and_tensor_none(tiny_dir):
    top = make_elmo_nlp(tiny_dir, tensor="top")(RIVER)
    np.testing.assert_allclose(bank(top).vector, top._.elmo[-1, bank(top).i], atol=1e-7)
    none = make_elmo_nlp(tiny_dir, tensor="none")(RIVER)
    assert none.tensor.size == 0
    np.testing.assert_allclose(bank(none).vector, none._.elmo[:, bank(none).i].mean(0), atol=1e-6)
    np.testing.assert_allclose(none.vector, none._.elmo.mean(axis=(0, 1)), atol=1e-6)
    bare = make_elmo_nlp(tiny_dir, tensor="none", store_layers=False)(RIVER)
    assert not bare.user_token_hooks and not bare.user_hooks and not bare.user_span_hooks


def test_whitespace_and_empty(nlp):
    doc = nlp(Doc(nlp.vocab, words=["bank", "\n", "bank"], spaces=[True, False, False]))
    assert not doc[1].has_vector and doc[0].has_vector
    with pytest.warns(UserWarning, match="W008"):
        assert doc[1].similarity(doc[0]) == 0.0
    empty = nlp("")
    assert empty.vector.shape == (32,) and not empty.has_vector


def test_hooks_after_round_trips(nlp):
    doc = nlp(RIVER)
    other = nlp(MONEY)
    want = bank(doc).similarity(bank(other))
    # Pickle keeps the hooks (they are module-level functions).
    again = pickle.loads(pickle.dumps(doc))
    assert bank(again).similarity(bank(other)) == pytest.approx(want, abs=1e-6)
    # Doc bytes and DocBin do not keep hooks (spaCy says W109): restore_elmo_hooks puts them back.
    with pytest.warns(UserWarning, match="W109"):
        data = doc.to_bytes()
    read = Doc(nlp.vocab).from_bytes(data)
    assert not read.user_token_hooks
    assert bank(read).similarity(bank(other)) == 1.0  # spaCy's shortcut for equal text
    (read,) = restore_elmo_hooks([read])
    assert bank(read).similarity(bank(other)) == pytest.approx(want, abs=1e-6)
    db = DocBin(store_user_data=True, docs=[doc])
    (read,) = restore_elmo_hooks(DocBin().from_bytes(db.to_bytes()).get_docs(nlp.vocab))
    assert bank(read).similarity(bank(other)) == pytest.approx(want, abs=1e-6)
    # A Doc the component never saw is passed through without hooks.
    (plain,) = restore_elmo_hooks([spacy.blank("en")("bank")])
    assert not plain.user_token_hooks


def test_hooks_with_n_process_two(nlp):
    texts = [RIVER, MONEY, "Hi", ""] * 2
    single = list(nlp.pipe(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # W109 from the workers' Doc.to_bytes
        multi = list(restore_elmo_hooks(nlp.pipe(texts, n_process=2, batch_size=2)))
    assert [d.text for d in multi] == texts
    want = bank(single[0]).similarity(bank(single[1]))
    assert bank(multi[0]).similarity(bank(multi[1])) == pytest.approx(want, abs=1e-5)
    assert multi[0].similarity(multi[2]) == pytest.approx(single[0].similarity(single[2]), abs=1e-5)


def test_width_mismatch_is_a_clear_error(nlp, tiny_dir):
    doc = nlp(RIVER)
    other = spacy.blank("en")("bank")
    other.tensor = np.ones((1, 7), dtype="float32")
    with pytest.raises(ValueError, match="width 32.*width 7"):
        bank(doc).similarity(other[0])


def test_doc_cleaner_drops_layers(tiny_dir):
    """The README's doc_cleaner recipe: layers and tensor gone, no vector left to compare."""
    nlp = make_elmo_nlp(tiny_dir)
    nlp.add_pipe("doc_cleaner", config={"attrs": {"tensor": None, "_.elmo": None}})
    doc = nlp(RIVER)
    assert doc._.elmo is None and (doc.tensor is None or doc.tensor.size == 0)
    assert not bank(doc).has_vector and not doc.has_vector
    with pytest.warns(UserWarning, match="W008"):
        assert bank(doc).similarity(doc[0]) == 0.0
