"""The ``elmo`` component: exactness through spaCy, serialization, batching, bad input."""
import json

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin

from conftest import make_elmo_nlp

ATOL = 1e-5
# Same weights, another process or a warm char-CNN cache: equal up to float rounding.
SAME = dict(atol=1e-5, rtol=0)


def fixture_docs(nlp, tiny_dir):
    sents = json.loads((tiny_dir / "sentences.json").read_text(encoding="utf-8"))
    docs = []
    for words in sents:
        doc = Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1))
        docs.append(doc)
    return sents, docs


def test_component_matches_fixture(elmo_nlp, tiny_dir, golden_dir):
    exp = np.load(golden_dir / "expected.npz")
    sents, docs = fixture_docs(elmo_nlp, tiny_dir)
    docs = list(elmo_nlp.pipe(docs, batch_size=5))
    for i, doc in enumerate(docs):
        want = exp[f"activations_{i:02d}"]
        assert doc._.elmo.dtype == np.float32
        assert doc._.elmo.shape == want.shape
        np.testing.assert_allclose(doc._.elmo, want, atol=ATOL, rtol=ATOL)
        np.testing.assert_allclose(doc.tensor, want.mean(axis=0), atol=ATOL, rtol=ATOL)


def test_multi_sentence_doc_matches_fixture(elmo_nlp, tiny_dir, golden_dir):
    """Several fixture sentences in one Doc with explicit sentence starts."""
    exp = np.load(golden_dir / "expected.npz")
    sents, _ = fixture_docs(elmo_nlp, tiny_dir)
    words = [w for s in sents for w in s]
    starts = [j == 0 for s in sents for j in range(len(s))]
    doc = elmo_nlp(Doc(elmo_nlp.vocab, words=words, sent_starts=starts))
    got = doc._.elmo
    offset = 0
    for i, s in enumerate(sents):
        np.testing.assert_allclose(got[:, offset : offset + len(s)], exp[f"activations_{i:02d}"], atol=ATOL, rtol=ATOL)
        offset += len(s)


def test_tensor_views(tiny_dir):
    nlp_top = make_elmo_nlp(tiny_dir, tensor="top")
    doc = nlp_top("A river bank.")
    np.testing.assert_array_equal(doc.tensor, doc._.elmo[-1])
    nlp_none = make_elmo_nlp(tiny_dir, tensor="none", store_layers=False)
    doc = nlp_none("A river bank.")
    assert doc.tensor.size == 0 and doc._.elmo is None
    with pytest.raises(ValueError, match="unknown tensor"):
        spacy.blank("en").add_pipe("elmo", config={"tensor": "max"})


def test_batch_independence(elmo_nlp):
    texts = ["The bank raised interest rates.", "We walked along the bank of the stream and the river.", "Hi"]
    alone = [elmo_nlp(t)._.elmo for t in texts]
    together = [d._.elmo for d in elmo_nlp.pipe(texts * 3, batch_size=4)]
    for i, arr in enumerate(together):
        np.testing.assert_allclose(arr, alone[i % 3], atol=ATOL)


def test_n_process_two(elmo_nlp):
    texts = [f"Sentence number {i} talks about the bank. Another one follows!" for i in range(6)]
    single = [d._.elmo for d in elmo_nlp.pipe(texts)]
    multi = [d._.elmo for d in elmo_nlp.pipe(texts, n_process=2, batch_size=2)]
    for a, b in zip(single, multi):
        assert b is not None
        np.testing.assert_allclose(a, b, atol=ATOL)


def test_serialization_round_trips(elmo_nlp, tmp_path):
    text = "Naïve café owners in Zürich 😀 said: «Grüezi»!"
    doc = elmo_nlp(text)
    # Pipeline to disk and back, without the original weight files.
    elmo_nlp.to_disk(tmp_path / "pipe")
    nlp2 = spacy.load(tmp_path / "pipe")
    np.testing.assert_allclose(nlp2(text)._.elmo, doc._.elmo, **SAME)
    assert "bilm_config" not in nlp2.get_pipe("elmo").cfg
    assert nlp2.get_pipe("elmo").bilm.config.projection_dim == 16
    # Pipeline bytes.
    nlp3 = spacy.blank("en")
    nlp3.add_pipe("elmo")
    nlp3.from_bytes(elmo_nlp.to_bytes())
    np.testing.assert_allclose(nlp3(text)._.elmo, doc._.elmo, **SAME)
    # Doc bytes and DocBin keep doc._.elmo.
    doc2 = Doc(elmo_nlp.vocab).from_bytes(doc.to_bytes())
    np.testing.assert_array_equal(doc2._.elmo, doc._.elmo)
    db = DocBin(store_user_data=True, docs=[doc])
    (doc3,) = DocBin().from_bytes(db.to_bytes()).get_docs(elmo_nlp.vocab)
    np.testing.assert_array_equal(doc3._.elmo, doc._.elmo)


def test_uninitialized_and_missing_loader_errors(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    with pytest.raises(ValueError, match="no weights yet"):
        nlp("Hello world")
    nlp.config["initialize"]["components"]["elmo"] = {
        "loader": {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(tmp_path / "missing")}
    }
    with pytest.raises(ValueError, match="not an ELMo model directory"):
        nlp.initialize()


def test_bad_input(elmo_nlp):
    width = 32
    empty = elmo_nlp("")
    assert empty._.elmo.shape == (3, 0, width)
    assert list(elmo_nlp.pipe([])) == []
    ws = elmo_nlp.make_doc("Hello   world \n\n again")
    ws = elmo_nlp(ws)
    space_rows = [t.i for t in ws if not t.text.strip()]
    assert space_rows and ws._.elmo.shape == (3, len(ws), width)
    assert not ws._.elmo[:, space_rows].any()
    assert all(ws._.elmo[:, t.i].any() for t in ws if t.text.strip())
    only_ws = elmo_nlp(Doc(elmo_nlp.vocab, words=[" ", "\n"], spaces=[False, False]))
    assert only_ws._.elmo.shape == (3, 2, width) and not only_ws._.elmo.any()
    long_tok = elmo_nlp("x" * 300 + " Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch 👩‍💻 東京は日本の首都です。")
    assert np.isfinite(long_tok._.elmo).all() and long_tok._.elmo.shape == (3, len(long_tok), width)
    words = ["word"] * 20000
    big = elmo_nlp(Doc(elmo_nlp.vocab, words=words))
    assert big._.elmo.shape == (3, 20000, width) and np.isfinite(big._.elmo).all()


def test_long_doc_is_cut_at_max_length(tiny_dir, tiny_bilm):
    nlp = make_elmo_nlp(tiny_dir, max_length=7)
    words = [f"w{i}" for i in range(20)]
    doc = nlp(Doc(nlp.vocab, words=words))
    pieces = tiny_bilm.embed_sentences([words[0:7], words[7:14], words[14:20]])
    np.testing.assert_allclose(doc._.elmo, np.concatenate(pieces, axis=1), atol=ATOL)


def test_sentencizer_rule_segments(elmo_nlp, tiny_bilm):
    doc = elmo_nlp("The river bank was flooded. We walked home!")
    assert not doc.has_annotation("SENT_START")
    words = [t.text for t in doc]
    expected = np.concatenate(tiny_bilm.embed_sentences([words[:6], words[6:]]), axis=1)
    np.testing.assert_allclose(doc._.elmo, expected, atol=ATOL)
