"""Convert Stanford Sentiment Treebank trees to a spaCy DocBin for 5-class textcat.

    python scripts/convert_sst.py ../shared/data/sst/dev.txt.gz corpus/sst5_dev.spacy

One tree a line, PTB style: ``(3 (2 It) (4 (2 's) ...))``. Each tree becomes one Doc: the words
are the tree's leaves (so the tokens are the treebank's, whatever spaCy's tokenizer would do) and
``doc.cats`` is one-hot over the five classes, from the label of the root (sentence level; the
phrase labels are not used).

Leaves are un-escaped: ``-LRB-`` -> ``(`` (and the -RRB-, -LSB-, -RSB-, -LCB-, -RCB- brackets),
``\\/`` -> ``/``, ``\\*`` -> ``*``; the PTB quotes ```` `` ```` and ``''`` become ``"`` and a lone
```` ` ```` becomes ``'``, as in the raw text the biLM reads. Spaces between tokens follow English
orthography (no space before ``,`` ``'s`` ``n't`` ``)``..., none after ``(``...), which only changes
``doc.text``, never the tokens. Trees are split on ASCII spaces only: two train leaves contain a
U+00A0 no-break space.
"""
import gzip
from collections import Counter
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import typer
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

LABELS = ["very negative", "negative", "neutral", "positive", "very positive"]

PTB_ESCAPES = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "``": '"',
    "''": '"',
    "`": "'",
}

# Tokens written without a space before them, and tokens with none after them.
NO_SPACE_BEFORE = {",", ".", ";", ":", "!", "?", "%", ")", "]", "}", "...", "n't", "'s", "'re", "'ve", "'ll", "'d", "'m"}
NO_SPACE_AFTER = {"(", "[", "{", "$", "#"}


def unescape_ptb(token: str) -> str:
    if token in PTB_ESCAPES:
        return PTB_ESCAPES[token]
    return token.replace("\\/", "/").replace("\\*", "*")


def _tokens(line: str) -> List[str]:
    out = []
    for chunk in line.strip(" \r\n").split(" "):
        i = 0
        # Brackets of the tree are never part of a leaf (leaf brackets are -LRB-/-RRB-).
        while chunk.startswith("(", i):
            out.append("(")
            i += 1
        j = len(chunk)
        while j > i and chunk[j - 1] == ")":
            j -= 1
        if chunk[i:j]:
            out.append(chunk[i:j])
        out.extend(")" * (len(chunk) - j))
    return out


def parse_tree(line: str) -> Tuple[int, List[str]]:
    """Return the root label and the (still escaped) leaves of one PTB-style tree."""
    toks = _tokens(line)
    if len(toks) < 4 or toks[0] != "(":
        raise ValueError(f"not a tree: {line[:60]!r}")
    root = int(toks[1])
    leaves = []
    depth = 0
    for i, tok in enumerate(toks):
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced tree: {line[:60]!r}")
        elif toks[i - 1] != "(":
            # a token that follows a label, not an opening bracket: a leaf
            leaves.append(tok)
    if depth != 0:
        raise ValueError(f"unbalanced tree: {line[:60]!r}")
    return root, leaves


def detok_spaces(words: List[str]) -> List[bool]:
    spaces = []
    open_quote = False
    for i, word in enumerate(words):
        if word == '"':
            open_quote = not open_quote
        nxt = words[i + 1] if i + 1 < len(words) else None
        if nxt is None:
            spaces.append(False)
        elif word in NO_SPACE_AFTER or (word == '"' and open_quote):
            spaces.append(False)
        elif nxt in NO_SPACE_BEFORE or (nxt == '"' and open_quote):
            spaces.append(False)
        else:
            spaces.append(True)
    return spaces


def tree_doc(vocab: Vocab, line: str, labels: List[str] = LABELS) -> Doc:
    root, leaves = parse_tree(line)
    words = [unescape_ptb(w) for w in leaves]
    doc = Doc(vocab, words=words, spaces=detok_spaces(words))
    doc.cats = {label: float(i == root) for i, label in enumerate(labels)}
    return doc


def read_trees(path: Path) -> Iterator[str]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip(" \r\n"):
                yield line


def convert_sst(input_path: Path, labels: List[str] = LABELS) -> List[Doc]:
    vocab = Vocab()
    return [tree_doc(vocab, line, labels) for line in read_trees(input_path)]


def label_counts(docs: List[Doc]) -> Dict[str, int]:
    return dict(Counter(max(d.cats, key=d.cats.get) for d in docs))


def main(
    input_path: Path = typer.Argument(..., exists=True, dir_okay=False, help="SST trees (.gz or plain)"),
    output_path: Path = typer.Argument(..., dir_okay=False, help="the .spacy file to write"),
    digit_labels: bool = typer.Option(False, "--digit-labels", help='labels "0".."4" instead of "very negative".."very positive"'),
) -> None:
    """Convert SST trees to a .spacy DocBin with one-hot 5-class cats (root labels)."""
    labels = [str(i) for i in range(5)] if digit_labels else LABELS
    docs = convert_sst(input_path, labels)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=False).to_disk(output_path)
    counts = label_counts(docs)
    typer.echo(
        f"{output_path}: {len(docs)} docs, {sum(len(d) for d in docs)} tokens, "
        + ", ".join(f"{label} {counts.get(label, 0)}" for label in labels)
    )


if __name__ == "__main__":
    typer.run(main)
