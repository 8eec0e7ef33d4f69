"""Load training text: a prepared corpus (.npz) as is, raw text is prepared on the fly."""
from pathlib import Path
import sys
from typing import Dict, Iterable, Iterator, List, Sequence

from .corpus import Corpus, build_corpus, concat_corpora
from .text import read_paragraphs, tokenize

ZIP_MAGIC = b"PK\x03\x04"  # the start of a .npz (a zip archive)


def prepare_corpus(paths: Sequence[Path], kind: str = "auto", lang: str = "en", progress: bool = False) -> Corpus:
    """Tokenize (``spacy.blank(lang)``) and sentence-split raw text files into a Corpus;
    prepared corpora (``.npz``) among them are read as they are and joined in order."""
    prepared = [Corpus.load(Path(p)) for p in paths if is_prepared(Path(p))]
    raw = [Path(p) for p in paths if not is_prepared(Path(p))]

    def paragraphs():
        for path in raw:
            yield from read_paragraphs(path, kind)

    sentences = tokenize(paragraphs(), lang=lang)
    if progress:  # a bar on stderr: sentences and tokens so far, tokens/s
        sentences = _counted(sentences, f"Tokenizing {', '.join(p.name for p in raw)}")
    return concat_corpora(prepared + ([build_corpus(sentences)] if raw else []))


def _counted(sentences: Iterable[List[str]], desc: str) -> Iterator[List[str]]:
    from tqdm import tqdm

    with tqdm(desc=desc, unit=" tokens", unit_scale=True, mininterval=1.0, file=sys.stderr) as bar:
        for n, sent in enumerate(sentences, 1):
            bar.update(len(sent))
            if n % 1000 == 0:
                bar.set_postfix(sentences=f"{n:,}", refresh=False)
            yield sent


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


def load_corpus(path: Path, progress: bool = False) -> Corpus:
    """A prepared corpus (.npz, by name or content) as is; raw text prepared on the fly."""
    path = Path(path)
    if is_prepared(path):
        return Corpus.load(path)
    return prepare_corpus([path], progress=progress)


def prepare(texts: Sequence[Path], output: Path, kind: str = "auto", lang: str = "en", progress: bool = False) -> Dict[str, int]:
    """Tokenize (``spacy.blank(lang)``) and sentence-split raw text files (and join prepared
    ones) once into the prepared corpus file ``output``; returns its sentence, token and
    type counts."""
    if not texts:
        raise ValueError("prepare: no input text files given")
    corpus = prepare_corpus(texts, kind, lang=lang, progress=progress)
    corpus.save(output)
    return {"sentences": corpus.n_sentences, "tokens": corpus.n_tokens, "types": len(corpus.types)}
