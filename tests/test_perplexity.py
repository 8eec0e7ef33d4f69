"""Held-out perplexity and the unigram baseline against values computed independently of
the code under test: a uniform softmax (perplexity = V), an explicit per-token loop over
a tiny corpus, and unigram perplexities worked out by hand."""
import math
from pathlib import Path

import pytest
import torch

from spacy_elmo import ElmoBiLM
from spacy_elmo.pretrain.corpus import build_corpus
from spacy_elmo.pretrain.perplexity import perplexity, unigram_baseline

OPTIONS = {
    "lstm": {"dim": 12, "projection_dim": 6, "n_layers": 2, "cell_clip": 3.0, "proj_clip": 3.0,
             "use_skip_connections": True},
    "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 1,
                 "activation": "relu", "n_characters": 262, "max_characters_per_token": 50},
}
# Repeated, out-of-vocabulary, one-token, emoji and accented tokens; sentence lengths 1 to 7.
SENTENCES = [["The", "bank", "of", "the", "river", "."], ["A", "bank", "!"], ["Zebra"],
             ["the", "river", "😀", "naïve", "café", "bank", "."], ["of", "the"]]
VOCAB = ["<S>", "</S>", "<unk>", "the", "bank", "river", ".", "of"]


def save_model(path: Path, softmax: dict, seed: int = 0) -> ElmoBiLM:
    torch.manual_seed(seed)
    bilm = ElmoBiLM(OPTIONS, vocab_size=len(VOCAB), softmax_options=softmax)
    with torch.no_grad():
        for p in bilm.softmax.parameters():
            p.mul_(10.0)  # a peaked distribution: far from uniform, so misaligned targets show
    bilm.save(path, vocab=VOCAB)
    return bilm.eval()


@pytest.fixture()
def corpus_path(tmp_path) -> Path:
    path = tmp_path / "dev.npz"
    build_corpus(SENTENCES).save(path)
    return path


def log_softmax_full(bilm: ElmoBiLM, hidden: torch.Tensor, target: int) -> float:
    """log p(target | hidden) of a full softmax, by a plain-Python log-sum-exp."""
    weight, bias = bilm.softmax.proj.weight.tolist(), bilm.softmax.proj.bias.tolist()
    h = hidden.tolist()
    logits = [sum(w * x for w, x in zip(row, h)) + b for row, b in zip(weight, bias)]
    top = max(logits)
    return logits[target] - top - math.log(sum(math.exp(z - top) for z in logits))


def log_softmax_adaptive(bilm: ElmoBiLM, hidden: torch.Tensor, target: int) -> float:
    """log p(target | hidden) from torch's own AdaptiveLogSoftmaxWithLoss.log_prob."""
    return float(bilm.softmax.proj.log_prob(hidden[None])[0, target])


def loop_perplexity(bilm: ElmoBiLM, sentences, vocab, log_prob) -> float:
    """Each sentence alone as <S> w1..wn </S>: the forward state at row i predicts row
    i + 1, the backward state at row i + 1 predicts row i; exp of the mean NLL."""
    index = {w: i for i, w in enumerate(vocab)}
    total, count = 0.0, 0
    with torch.no_grad():
        for sent in sentences:
            top = bilm.forward_with_boundaries(bilm.char_ids([sent]), [len(sent)])[-1]
            half = top.shape[1] // 2
            ids = [0] + [index.get(w, 2) for w in sent] + [1]
            for i in range(len(sent) + 1):
                total -= log_prob(bilm, top[i, :half], ids[i + 1])
                total -= log_prob(bilm, top[i + 1, half:], ids[i])
                count += 2
    return math.exp(total / count)


def test_uniform_softmax_has_the_vocabulary_size_as_perplexity(tmp_path, corpus_path):
    torch.manual_seed(0)
    bilm = ElmoBiLM(OPTIONS, vocab_size=len(VOCAB), softmax_options={"type": "full"})
    with torch.no_grad():
        bilm.softmax.proj.weight.zero_()
        bilm.softmax.proj.bias.zero_()
    bilm.save(tmp_path / "uniform", vocab=VOCAB)
    assert perplexity(tmp_path / "uniform", corpus_path, batch_tokens=8) == pytest.approx(len(VOCAB), rel=1e-6)


@pytest.mark.parametrize("softmax,log_prob", [({"type": "full"}, log_softmax_full),
                                              ({"type": "adaptive", "cutoffs": [4], "div_value": 2.0},
                                               log_softmax_adaptive)])
@pytest.mark.parametrize("batch_tokens", [8, 4096])
def test_perplexity_equals_a_plain_loop_over_the_tokens(tmp_path, corpus_path, softmax, log_prob, batch_tokens):
    bilm = save_model(tmp_path / "model", softmax)
    want = loop_perplexity(bilm, SENTENCES, VOCAB, log_prob)
    assert not 0.8 * len(VOCAB) < want < 1.25 * len(VOCAB)  # far from uniform
    # Reading a target one place off (e.g. the forward state predicting its own token) differs.
    shifted = [[*s[1:], s[0]] for s in SENTENCES]
    assert abs(loop_perplexity(bilm, shifted, VOCAB, log_prob) / want - 1) > 1e-3
    assert perplexity(tmp_path / "model", corpus_path, batch_tokens=batch_tokens) == pytest.approx(want, rel=1e-5)


def save_vocab_dir(path: Path, vocab) -> Path:
    path.mkdir()
    (path / "vocab.txt").write_text("".join(w + "\n" for w in vocab), encoding="utf-8")
    return path


def test_unigram_baseline_by_hand(tmp_path):
    """Train "a b a" / "b c"; vocabulary <S> </S> <unk> a b (c and d are <unk>).
    Counts: a 2, b 2, <unk> 1, </S> 2 (one per sentence), <S> 0: 7 in all; add-one over
    V = 5 gives p = (count + 1) / 12: a 3/12, b 3/12, <unk> 2/12, </S> 3/12, <S> 1/12.
    Dev "a c d" / "b": a, <unk>, <unk>, b and </S> twice, six predictions:
    ppl = (12^6 / (3 * 2 * 2 * 3 * 3 * 3)) ** (1/6) = 9216 ** (1/6) = 96 ** (1/3)."""
    train = build_corpus([["a", "b", "a"], ["b", "c"]])
    dev = build_corpus([["a", "c", "d"], ["b"]])
    train.save(tmp_path / "train.npz")
    dev.save(tmp_path / "dev.npz")
    model = save_vocab_dir(tmp_path / "model", ["<S>", "</S>", "<unk>", "a", "b"])
    assert unigram_baseline(model, tmp_path / "train.npz", tmp_path / "dev.npz") == pytest.approx(96 ** (1 / 3), rel=1e-12)
    # Vocabulary order does not matter; a vocabulary with c: a 3/13, b 3/13, c 2/13, </S> 3/13, d <unk> 1/13.
    model2 = save_vocab_dir(tmp_path / "model2", ["<S>", "</S>", "<unk>", "c", "b", "a"])
    want = (13 ** 6 / (3 * 2 * 1 * 3 * 3 * 3)) ** (1 / 6)
    assert unigram_baseline(model2, tmp_path / "train.npz", tmp_path / "dev.npz") == pytest.approx(want, rel=1e-12)


def test_unigram_baseline_of_raw_text_counts_like_prepare(tmp_path):
    """The same hand count from raw text, tokenized as prepare does ("." is a token)."""
    (tmp_path / "train.txt").write_text("red blue red.\n\nblue green.\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("red green pink.\n", encoding="utf-8")
    model = save_vocab_dir(tmp_path / "model", ["<S>", "</S>", "<unk>", "red", "blue", "."])
    # counts: red 2, blue 2, . 2, <unk> (green) 1, </S> 2 = 9; V = 6: denominators 15.
    # dev: red 3/15, green <unk> 2/15, pink <unk> 2/15, . 3/15, </S> 3/15: five predictions.
    want = (15 ** 5 / (3 * 2 * 2 * 3 * 3)) ** (1 / 5)
    assert unigram_baseline(model, tmp_path / "train.txt", tmp_path / "dev.txt", kind="plain") == pytest.approx(want, rel=1e-12)
