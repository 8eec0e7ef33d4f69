"""Does each layer keep the senses of one word apart? A many-sentence version of the ``demo`` words.

    python scripts/probe_senses.py ../shared/data/semcor/wsd_corpora_semcor3.0_and_allwords_eval.naf.tar.gz \
        --word bank:n --word play:n

The biLM is frozen. Every occurrence of the word (lemma and part of speech) with a single WordNet
3.0 sense in the chosen part of the archive is embedded in its sentence; senses seen fewer than
``--min-count`` times are left out. For each layer and the mean of layers the table gives the mean
cosine between occurrences of the same sense and of different senses, and the leave-one-out
accuracy of the nearest sense centroid (each occurrence against centroids built without it), next
to always answering the most frequent sense. ``demo`` judges three hand-written sentences per
word; this judges every annotated occurrence.
"""
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).parent))
from probe_pos import views_of  # noqa: E402
from probe_wsd import Lemma, read_archive  # noqa: E402
from report import LAYER_NAMES  # noqa: E402


def parse_word(text: str) -> Lemma:
    lemma, _, pos = text.partition(":")
    if not lemma or pos not in {"n", "v", "a", "r"}:
        raise typer.BadParameter(f"'{text}': expected LEMMA:POS with POS one of n, v, a, r (e.g. bank:n)")
    return lemma.lower(), pos


def separation(vectors: np.ndarray, senses: List[str]) -> Dict[str, float]:
    """Mean same-sense and other-sense cosine, and leave-one-out nearest-centroid accuracy, of
    (n, dim) vectors labelled with ``senses`` (at least two senses, each at least twice)."""
    unit = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12)
    labels = np.array(senses)
    same = labels[:, None] == labels[None, :]
    off_diagonal = ~np.eye(len(labels), dtype=bool)
    sims = unit @ unit.T
    by_count = [s for s, _ in Counter(senses).most_common()]  # a tie goes to the more frequent sense
    sums = {s: unit[labels == s].sum(axis=0) for s in by_count}
    correct = 0
    for i, own in enumerate(senses):
        centroids = [sums[s] - unit[i] if s == own else sums[s] for s in by_count]  # without itself
        cos = np.array([unit[i] @ c / (np.linalg.norm(c) + 1e-12) for c in centroids])
        correct += by_count[int(np.flatnonzero(cos >= cos.max() - 1e-6)[0])] == own
    return {"same": float(sims[same & off_diagonal].mean()), "other": float(sims[~same].mean()),
            "accuracy": correct / len(senses)}


def main(
    archive: Path = typer.Argument(..., exists=True, dir_okay=False, help="the wsd_corpora NAF archive (.tar.gz)"),
    words: List[str] = typer.Option(["bank:n", "play:n", "bat:n"], "--word", help="LEMMA:POS, repeatable"),
    part: str = typer.Option("semcor3.0", "--part", help="folder of the archive to read"),
    min_count: int = typer.Option(2, "--min-count", min=2, help="leave out senses with fewer occurrences"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="spacy-elmo model dir (default: the shipped model)"),
    threads: int = typer.Option(0, "--threads", help="torch threads (0: torch's default)"),
    output: Optional[Path] = typer.Option(None, "--output", help="also write the tables to this file"),
) -> None:
    import torch

    from spacy_elmo.bilm import ElmoBiLM
    from spacy_elmo.loaders import DEFAULT_MODEL, MODELS_DIR

    if threads:
        torch.set_num_threads(threads)
    lemmas = [parse_word(w) for w in words]
    sentences = read_archive(archive, part)
    model_dir = weights or MODELS_DIR / DEFAULT_MODEL
    bilm = ElmoBiLM.load(model_dir)
    lines: List[str] = []
    for lemma in lemmas:
        hits = [(s, inst, next(iter(inst.synsets))) for s in sentences for inst in s.instances
                if inst.lemma == lemma and len(inst.synsets) == 1]
        counts = Counter(sense for _, _, sense in hits)
        kept = [hit for hit in hits if counts[hit[2]] >= min_count]
        senses = [sense for _, _, sense in kept]
        name = ":".join(lemma)
        if len(set(senses)) < 2:
            lines += [f"{name}: fewer than two senses with {min_count}+ occurrences in {part}; skipped", ""]
            continue
        views: Dict[str, List[np.ndarray]] = {}
        for (_, inst, _), layers in zip(kept, bilm.embed_sentences([s.words for s, _, _ in kept])):
            for view, v in views_of(layers[:, inst.positions].mean(axis=1)).items():
                views.setdefault(view, []).append(v)
        top = Counter(senses).most_common()
        lines.append(f"{name} in {part}: {len(kept)} occurrences of {len(top)} senses "
                     f"({', '.join(f'{s} x{n}' for s, n in top)}); most frequent sense {100 * top[0][1] / len(kept):.1f}%")
        lines.append(f"{'features':<18}{'same sense':>12}{'other sense':>13}{'nearest sense':>15}")
        for view in [*LAYER_NAMES, "mean of layers"]:
            r = separation(np.stack(views[view]), senses)
            lines.append(f"{view:<18}{r['same']:>12.3f}{r['other']:>13.3f}{100 * r['accuracy']:>14.1f}%")
        lines.append("")
    typer.echo("\n".join(lines))
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(f"Sense separation with {model_dir.name}\n" + "\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
