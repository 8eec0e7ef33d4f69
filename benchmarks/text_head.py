"""The pretraining benchmarks' corpus: the first lines of a WikiText text, prepared once."""
import gzip
from pathlib import Path

from spacy_elmo.pretrain.data import prepare


def prepare_head(data: Path, lines: int, folder: Path) -> Path:
    """Prepare the first ``lines`` lines of ``data`` (WikiText's tokenised release, plain or
    .gz) the way ``prepare --kind wikitext`` does, into ``folder``; returns the .npz path."""
    if not data.exists():
        raise SystemExit(f"text not found: {data} (pass --data)")
    text = folder / "head.txt"
    opener = gzip.open if data.suffix == ".gz" else open
    with opener(data, "rt", encoding="utf-8") as src, open(text, "w", encoding="utf-8") as dst:  # type: ignore[operator]
        for _, line in zip(range(lines), src):
            dst.write(line)
    corpus = folder / "head.npz"
    prepare([text], corpus, kind="wikitext")
    return corpus
