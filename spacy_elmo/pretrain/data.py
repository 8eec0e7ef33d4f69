"""Load training text: a prepared corpus (.npz) as is, raw text is prepared on the fly."""
from pathlib import Path
from typing import Dict, Sequence

from .corpus import Corpus, build_corpus, concat_corpora
from .text import read_paragraphs, tokenize

ZIP_MAGIC = b"PK\x03\x04"  # the start of a .npz (a zip archive)


def prepare_corpus(paths: Sequence[Path], kind: str = "auto", lang: str = "en") -> Corpus:
    """Tokenize (``spacy.blank(lang)``) and sentence-split raw text files into a Corpus;
    prepared corpora (``.npz``) among them are read as they are and joined in order."""
    prepared = [Corpus.load(Path(p)) for p in paths if is_prepared(Path(p))]
    raw = [Path(p) for p in paths if not is_prepared(Path(p))]

    def paragraphs():
        for path in raw:
            yield from read_paragraphs(path, kind)

    return concat_corpora(prepared + ([build_corpus(tokenize(paragraphs(), lang=lang))] if raw else []))


def is_prepared(path: Path) -> bool:
    """Whether ``path`` is a prepared corpus (a .npz: a zip archive, whatever its name)."""
    path = Path(path)
    if path.suffix == ".npz":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZIP_MAGIC
    except OSError:
        return False


def load_corpus(path: Path) -> Corpus:
    """A prepared corpus (.npz, by name or content) as is; raw text prepared on the fly."""
    path = Path(path)
    if is_prepared(path):
        return Corpus.load(path)
    return prepare_corpus([path])


def prepare(texts: Sequence[Path], output: Path, kind: str = "auto", lang: str = "en") -> Dict[str, int]:
    """Tokenize (``spacy.blank(lang)``) and sentence-split raw text files (and join prepared
    ones) once into the prepared corpus file ``output``; returns its sentence, token and
    type counts."""
    if not texts:
        raise ValueError("prepare: no input text files given")
    corpus = prepare_corpus(texts, kind, lang=lang)
    corpus.save(output)
    return {"sentences": corpus.n_sentences, "tokens": corpus.n_tokens, "types": len(corpus.types)}
