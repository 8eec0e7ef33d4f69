"""What the biLM layers know: a linear part-of-speech probe on CoNLL-2003 (Peters et al. 2018, 5.3).

    python scripts/probe_pos.py ../shared/data/conll2003/train.txt.gz ../shared/data/conll2003/valid.txt.gz

The biLM is frozen. For each layer (0 = char CNN, 1 and 2 = the LSTM layers) and for their mean,
a softmax classifier (one linear layer) is trained on the token vectors of the train sentences
to predict the Penn Treebank tag (column 2 of CoNLL-2003) and scored on the dev sentences. A
most-frequent-tag-per-word baseline on the same data is printed beside it.
"""
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import typer

sys.path.insert(0, str(Path(__file__).parent))
from convert_ner import _split_fields, open_text  # noqa: E402
from report import LAYER_NAMES  # noqa: E402

Sentences = List[Tuple[List[str], List[str]]]


def read_pos(path: Path, limit: int = 0) -> Sentences:
    """(words, POS tags) per sentence of a CoNLL-2003 file; -DOCSTART- lines are skipped."""
    sentences: Sentences = []
    words: List[str] = []
    tags: List[str] = []
    with open_text(path) as f:
        for line in f:
            fields = _split_fields(line.rstrip("\r\n"))
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                continue
            if len(fields) < 4:
                raise ValueError(f"{path}: expected 'token POS chunk NER', got {line.strip()!r}")
            words.append(fields[0])
            tags.append(fields[1])
    if words:
        sentences.append((words, tags))
    if not sentences:
        raise ValueError(f"{path}: no sentences")
    return sentences[:limit] if limit else sentences


def views_of(layers: np.ndarray) -> Dict[str, np.ndarray]:
    """The probed features of (n_layers, ..., dim) ELMo layers: each layer and their mean."""
    views = {name: layers[i] for i, name in enumerate(LAYER_NAMES)}
    views["mean of layers"] = layers.mean(axis=0)
    return views


def layer_views(bilm, sentences: Sentences) -> Dict[str, np.ndarray]:
    """The probed features of every token, sentence after sentence."""
    return views_of(np.concatenate(bilm.embed_sentences([words for words, _ in sentences]), axis=1))


def train_probe(X: np.ndarray, y: np.ndarray, n_classes: int, epochs: int, seed: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    probe = torch.nn.Linear(X.shape[1], n_classes)
    opt = torch.optim.Adam(probe.parameters(), lr=0.01)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(epochs):
        for idx in torch.randperm(len(yt)).split(1024):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(probe(Xt[idx]), yt[idx]).backward()
            opt.step()
    return probe


def most_frequent_tag(train: Sentences, dev: Sentences) -> float:
    counts: Dict[str, Counter] = defaultdict(Counter)
    for words, tags in train:
        for w, t in zip(words, tags):
            counts[w][t] += 1
    overall = Counter(t for _, tags in train for t in tags).most_common(1)[0][0]
    gold = [(w, t) for words, tags in dev for w, t in zip(words, tags)]
    return sum((counts[w].most_common(1)[0][0] if w in counts else overall) == t for w, t in gold) / len(gold)


def main(
    train_path: Path = typer.Argument(..., help="CoNLL-2003 train file (.txt or .gz)"),
    dev_path: Path = typer.Argument(..., help="CoNLL-2003 dev file"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="spacy-elmo model dir (default: the shipped model)"),
    max_train: int = typer.Option(0, "--max-train", help="use the first N train sentences (0: all)"),
    max_dev: int = typer.Option(0, "--max-dev", help="score only the first N dev sentences (0: all; a quicker, rougher probe)"),
    epochs: int = typer.Option(5, "--epochs", help="passes of the probe over the train tokens"),
    threads: int = typer.Option(0, "--threads", help="torch threads (0: torch's default)"),
    seed: int = typer.Option(0, "--seed"),
    precision: str = typer.Option("float32", "--precision", help="biLM inference precision: float32 or int8"),
    output: Optional[Path] = typer.Option(None, "--output", help="also write the table to this file"),
) -> None:
    from spacy_elmo.bilm import ElmoBiLM
    from spacy_elmo.loaders import DEFAULT_MODEL, MODELS_DIR

    if threads:
        torch.set_num_threads(threads)
    train, dev = read_pos(train_path, max_train), read_pos(dev_path, max_dev)
    tagset = sorted({t for _, tags in train for t in tags})
    index = {t: i for i, t in enumerate(tagset)}
    y_train = np.array([index[t] for _, tags in train for t in tags], dtype=np.int64)
    dev_tags = [t for _, tags in dev for t in tags]
    y_dev = np.array([index.get(t, -1) for t in dev_tags], dtype=np.int64)  # unseen tag: always wrong

    model_dir = weights or MODELS_DIR / DEFAULT_MODEL
    bilm = ElmoBiLM.load(model_dir)
    bilm.precision = precision
    start = time.perf_counter()
    views, dev_views = layer_views(bilm, train), layer_views(bilm, dev)
    typer.echo(f"{model_dir.name}: embedded {len(y_train):,} train and {len(y_dev):,} dev tokens "
               f"in {time.perf_counter() - start:.0f} s ({precision}); {len(tagset)} tags")
    lines = [f"{'features':<22}{'dev accuracy':>14}", f"{'most frequent tag':<22}{100 * most_frequent_tag(train, dev):>13.2f}%"]
    typer.echo("\n".join(lines))
    for name, X in views.items():
        probe = train_probe(X, y_train, len(tagset), epochs, seed)
        with torch.no_grad():
            pred = probe(torch.from_numpy(dev_views[name])).argmax(-1).numpy()
        lines.append(f"{name:<22}{100 * float((pred == y_dev).mean()):>13.2f}%")
        typer.echo(lines[-1])
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(f"POS probe of {model_dir.name}, {precision} (train {train_path.name}, dev {dev_path.name})\n"
                          + "\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
