"""Raw text to sentences of tokens, as the ``elmo`` component will see them.

Tokenization is spaCy's tokenizer for the text's language (``spacy.blank(lang)``, English
by default: any language spaCy has a tokenizer for); sentences are cut by
``spacy_elmo.segmentation`` (the rule the component uses on Docs without boundaries:
spaCy's ``Sentencizer``); whitespace tokens are dropped. Source quirks:

- "wikitext": the tokenised WikiText release: `` = Heading = `` lines are dropped,
  ``@-@``, ``@,@``, ``@.@`` are joined with their neighbours and ``<unk>`` stays one token.
- "imdb": a .tar.gz of review files (aclImdb layout: ``pos/``, ``neg/`` or ``unsup/`` then
  ``<id>_<rating>.txt``; other members such as ``urls_unsup.txt`` are skipped);
  ``<br />`` becomes a space.
- "plain": one sentence or paragraph per line (.txt or .gz).
"""
import gzip
import re
import tarfile
import zlib
from pathlib import Path
from typing import Iterable, Iterator, List

KINDS = ("auto", "plain", "wikitext", "imdb")
_AT_JOIN = re.compile(r" @([-,.])@ ")
_HEADING = re.compile(r"^\s*=+ .* =+\s*$")
UNK_PLACEHOLDER = "UNKPLACEHOLDERXQ"
_IMDB_REVIEW = re.compile(r"(^|/)(pos|neg|unsup)/\d+_\d+\.txt$")


def detect_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "imdb"
    if "wikitext" in str(path).lower() or "wiki." in name:
        return "wikitext"
    return "plain"


def _open_text(path: Path) -> Iterator[str]:
    """Lines of a UTF-8 text file (.gz: gzip-compressed); binary input (NUL bytes, bytes
    that are not UTF-8, a truncated or damaged .gz) is a clear error naming the file."""
    opener = gzip.open if path.suffix == ".gz" else open
    number = 0
    try:
        with opener(path, "rb") as f:  # type: ignore[operator]
            for number, raw in enumerate(f, 1):
                if b"\0" in raw:
                    raise ValueError(f"{path}: line {number} holds NUL bytes: not a text file")
                yield raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: line {number} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(f"{path}: truncated or damaged gzip file ({err})") from None


def read_paragraphs(path: Path, kind: str = "auto") -> Iterator[str]:
    """Paragraphs of cleaned text from one file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"text file not found: {path}")
    if kind not in KINDS:
        raise ValueError(f"unknown text kind {kind!r} (expected one of {KINDS})")
    if kind == "auto":
        kind = detect_kind(path)
    if kind == "imdb":
        try:
            with tarfile.open(path, "r:*") as tar:
                for member in tar:
                    if member.isfile() and _IMDB_REVIEW.search(member.name):
                        data = tar.extractfile(member)
                        if data is not None:
                            yield data.read().decode("utf-8", "replace").replace("<br />", " ")
        except (tarfile.TarError, EOFError, zlib.error) as err:
            detail = str(err).splitlines()[0].rstrip(":") if str(err) else type(err).__name__
            raise ValueError(f"{path}: not a readable .tar.gz archive of aclImdb reviews ({detail}); "
                             "for plain text use --kind plain") from None
        return
    for line in _open_text(path):
        line = line.strip()
        if not line:
            continue
        if kind == "wikitext":
            if _HEADING.match(line):
                continue
            line = _AT_JOIN.sub(r"\1", line).replace("<unk>", UNK_PLACEHOLDER)
        yield line


def tokenize(paragraphs: Iterable[str], batch_size: int = 1000, lang: str = "en") -> Iterator[List[str]]:
    """Sentences (lists of token strings) of the paragraphs, tokenized by
    ``spacy.blank(lang)`` and cut as the ``elmo`` component cuts a Doc without sentence
    boundaries (``segmentation.doc_sentences``)."""
    from ..segmentation import doc_sentences

    nlp = blank_tokenizer(lang)
    for doc in nlp.tokenizer.pipe(paragraphs, batch_size=batch_size):
        for sent in doc_sentences(doc):
            yield ["<unk>" if text == UNK_PLACEHOLDER else text for text in sent]


def blank_tokenizer(lang: str):
    """``spacy.blank(lang)``, with a clear error for a language code spaCy does not know."""
    import spacy
    from spacy.util import get_lang_class

    try:
        get_lang_class(lang)
    except ImportError:
        raise ValueError(f"no spaCy tokenizer for language {lang!r} (use a code such as en, de, fr, xx)") from None
    return spacy.blank(lang)
