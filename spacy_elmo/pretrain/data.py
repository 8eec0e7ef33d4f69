"""Load training text: a prepared corpus (.npz) as is, raw text is prepared on the fly."""
from pathlib import Path
from typing import Sequence

from .corpus import Corpus, build_corpus
from .text import read_paragraphs, tokenize


def prepare_corpus(paths: Sequence[Path], kind: str = "auto") -> Corpus:
    """Tokenize and sentence-split raw text files into a Corpus."""
    def paragraphs():
        for path in paths:
            yield from read_paragraphs(Path(path), kind)

    return build_corpus(tokenize(paragraphs()))


def load_corpus(path: Path) -> Corpus:
    path = Path(path)
    if path.suffix == ".npz":
        return Corpus.load(path)
    return prepare_corpus([path])
