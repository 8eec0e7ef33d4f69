"""Convert token-per-line NER data (CoNLL-2003, WNUT-17) to a spaCy DocBin.

    python scripts/convert_ner.py ../shared/data/conll2003/valid.txt.gz corpus/conll2003_dev.spacy

Input: one token a line, the token in the first column and its IOB2 tag in the last one
(CoNLL-2003: ``token POS chunk NER`` separated by spaces; WNUT-17: ``token<TAB>tag``); a blank
(or whitespace-only) line ends a sentence; a ``-DOCSTART-`` line starts a document. Files may be
gzipped, and the last line need not end with a newline.

Output: by default one Doc per sentence, built from the words (so spaCy's tokenizer never
touches the gold tokens) with a space after every token but the last. ``--by-document`` puts the
sentences of a document in one Doc with its sentence starts set instead (spaCy's corpus reader with
``gold_preproc = true`` splits them back into sentences, so both give the same training examples).

Repairs, each counted and reported: a token line without a tag (WNUT-17 dev has a lone U+FEFF) is
dropped; an ``I-X`` that does not continue an ``X`` entity starts one, as ``B-X``.
"""
import gzip
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Tuple

import typer
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

DOCSTART = "-DOCSTART-"


@dataclass
class Sentence:
    words: List[str]
    tags: List[str]
    doc_id: int


@dataclass
class ReadStats:
    dropped_lines: int = 0
    repaired_tags: int = 0
    documents: int = 0
    notes: List[str] = field(default_factory=list)


def open_text(path: Path):
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _split_fields(line: str) -> List[str]:
    # Tabs when the file uses them (WNUT), else ASCII spaces (CoNLL); never other
    # Unicode whitespace, which can be part of a token.
    sep = "\t" if "\t" in line else " "
    return [f for f in line.split(sep) if f.strip(" \t")]


def read_iob(path: Path, stats: ReadStats = None) -> Iterator[Sentence]:
    """Yield the sentences of a token-per-line IOB file, with repaired IOB2 tags."""
    stats = stats if stats is not None else ReadStats()
    words: List[str] = []
    tags: List[str] = []
    doc_id = 0
    seen_docstart = False
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            fields = _split_fields(line.rstrip("\r\n"))
            if fields and fields[0] == DOCSTART:
                if words:
                    yield Sentence(words, repair_iob(tags, stats), doc_id)
                    words, tags = [], []
                if seen_docstart:
                    doc_id += 1
                seen_docstart = True
                stats.documents += 1
                continue
            if not fields:
                if words:
                    yield Sentence(words, repair_iob(tags, stats), doc_id)
                    words, tags = [], []
                continue
            if len(fields) < 2:
                stats.dropped_lines += 1
                stats.notes.append(f"{path}:{lineno}: no tag in {line.strip()!r}, line dropped")
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    if words:
        yield Sentence(words, repair_iob(tags, stats), doc_id)


def repair_iob(tags: List[str], stats: ReadStats = None) -> List[str]:
    """Return valid IOB2 tags: an I-X that does not continue an X entity becomes B-X."""
    fixed = []
    prev = "O"
    for tag in tags:
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            tag = "B-" + tag[2:]
            if stats is not None:
                stats.repaired_tags += 1
        elif tag != "O" and not tag.startswith(("B-", "I-")):
            raise ValueError(f"not an IOB tag: {tag!r}")
        fixed.append(tag)
        prev = tag
    return fixed


def sentence_doc(vocab: Vocab, sent: Sentence) -> Doc:
    spaces = [True] * (len(sent.words) - 1) + [False]
    return Doc(vocab, words=sent.words, spaces=spaces, ents=sent.tags)


def document_docs(vocab: Vocab, sentences: List[Sentence]) -> Iterator[Doc]:
    """Group consecutive sentences with the same doc_id into one Doc with sentence starts."""
    group: List[Sentence] = []
    for sent in sentences:
        if group and sent.doc_id != group[-1].doc_id:
            yield _join(vocab, group)
            group = []
        group.append(sent)
    if group:
        yield _join(vocab, group)


def _join(vocab: Vocab, group: List[Sentence]) -> Doc:
    words, tags, starts = [], [], []
    for sent in group:
        words.extend(sent.words)
        tags.extend(sent.tags)
        starts.extend([True] + [False] * (len(sent.words) - 1))
    spaces = [True] * (len(words) - 1) + [False]
    return Doc(vocab, words=words, spaces=spaces, ents=tags, sent_starts=starts)


def convert_iob(input_path: Path, by_document: bool = False) -> Tuple[List[Doc], ReadStats]:
    stats = ReadStats()
    vocab = Vocab()
    sentences = list(read_iob(input_path, stats))
    if by_document:
        docs = list(document_docs(vocab, sentences))
    else:
        docs = [sentence_doc(vocab, s) for s in sentences]
    return docs, stats


def main(
    input_path: Path = typer.Argument(..., exists=True, dir_okay=False, help="IOB file (.gz or plain)"),
    output_path: Path = typer.Argument(..., dir_okay=False, help="the .spacy file to write"),
    by_document: bool = typer.Option(False, "--by-document", help="one Doc per -DOCSTART- document, sentence starts set"),
) -> None:
    """Convert a CoNLL-2003 or WNUT-17 IOB file to a .spacy DocBin."""
    docs, stats = convert_iob(input_path, by_document=by_document)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=False).to_disk(output_path)
    n_tokens = sum(len(d) for d in docs)
    labels = Counter(ent.label_ for d in docs for ent in d.ents)
    for note in stats.notes:
        typer.echo(note, err=True)
    if stats.repaired_tags:
        typer.echo(f"{stats.repaired_tags} I- tags that started an entity read as B-", err=True)
    typer.echo(
        f"{output_path}: {len(docs)} docs, {n_tokens} tokens, "
        + ", ".join(f"{k} {v}" for k, v in sorted(labels.items()))
    )


if __name__ == "__main__":
    typer.run(main)
