"""Rebuild raw text from token-per-line NER data (e.g. the WNUT-17 tweets), one sentence a
line, tokens joined by single spaces, for pretraining (``prepare``) and perplexity.

    python scripts/conll_text.py ../shared/data/wnut17/wnut17train.conll.gz corpus/wnut17_train.txt

The file is read by ``convert_ner.read_iob`` (the same reader as the NER conversion).
"""
from pathlib import Path

import typer

from convert_ner import read_iob


def main(
    input_path: Path = typer.Argument(..., help="CoNLL-style file (.gz allowed)"),
    output_path: Path = typer.Argument(..., help="text file to write (one sentence a line)"),
) -> None:
    n_sents = n_tokens = 0
    output_path.parent.mkdir(parents=True, exist_ok=True)
    with output_path.open("w", encoding="utf-8") as f:
        for sentence in read_iob(input_path):
            words = [w for w in sentence.words if w.strip()]
            if words:
                f.write(" ".join(words) + "\n")
                n_sents += 1
                n_tokens += len(words)
    typer.echo(f"Wrote {output_path}: {n_sents:,} sentences, {n_tokens:,} tokens")


if __name__ == "__main__":
    typer.run(main)
