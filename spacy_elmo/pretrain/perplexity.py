"""Held-out perplexity of a saved model on a text file, and the unigram baseline on the
same vocabulary and counting."""
from pathlib import Path

from .corpus import Corpus, target_map, unigram_perplexity
from .data import is_prepared, load_corpus, prepare_corpus


def _read_text(text: Path, kind: str, lang: str = "en", progress: bool = False) -> Corpus:
    if is_prepared(Path(text)) or (kind == "auto" and lang == "en"):
        return load_corpus(text, progress)
    return prepare_corpus([text], kind, lang=lang, progress=progress)


def perplexity(model_dir: Path, text: Path, kind: str = "auto", batch_tokens: int = 4096, lang: str = "en",
               progress: bool = False) -> float:
    """Held-out perplexity of a pretrained model (one with its softmax) on a text file,
    tokenized as pretraining does.

    model_dir: a model directory in the own format with its vocab.txt.
    text: raw text (.txt, .gz, an aclImdb .tar.gz) or a prepared corpus (.npz).
    kind: "auto", "plain", "wikitext" or "imdb" (how to read raw text).
    batch_tokens: tokens per evaluation batch.
    lang: the language of spaCy's tokenizer for raw text (as ``prepare --lang``).
    """
    from ..bilm import ElmoBiLM
    from ..bilm.serialize import read_vocab
    from .loss import evaluate

    bilm = ElmoBiLM.load(model_dir)
    if bilm.softmax is None:
        raise ValueError(f"{model_dir}: the model has no softmax (published weights), so no perplexity")
    vocab = read_vocab(model_dir)
    if len(vocab) != bilm.vocab_size:
        raise ValueError(f"{model_dir}: vocab.txt has {len(vocab):,} words but the model's softmax has "
                         f"{bilm.vocab_size:,}: the vocabulary does not belong to these weights")
    corpus = _read_text(text, kind, lang, progress)
    return evaluate(bilm, corpus, target_map(corpus, vocab), batch_tokens=batch_tokens, progress=progress)


def unigram_baseline(model_dir: Path, train: Path, text: Path, kind: str = "auto", lang: str = "en") -> float:
    """Add-one unigram perplexity of ``text`` over the model's output vocabulary, with the
    counts of ``train`` and the same counting as ``perplexity``."""
    from ..bilm.serialize import read_vocab

    return unigram_perplexity(_read_text(train, "auto", lang), _read_text(text, kind, lang), read_vocab(model_dir))
