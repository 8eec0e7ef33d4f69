"""What the biLM layers know about word senses: nearest-sense disambiguation (Peters et al. 2018, 5.3).

    python scripts/probe_wsd.py ../shared/data/semcor/wsd_corpora_semcor3.0_and_allwords_eval.naf.tar.gz

The biLM is frozen. Each sense-annotated word of SemCor 3.0 (the train part) is embedded in its
sentence; the mean of the unit-length vectors of every (lemma, part of speech, WordNet 3.0 synset)
is that sense's representation. A word of the Senseval-2 all-words set (the test part, scored on its WordNet 3.0
synsets) gets the sense of its lemma whose representation is nearest by cosine. This is done for
each layer and for their mean, next to the most-frequent-sense-in-SemCor baseline. Only test words
whose lemma has a SemCor sense can be disambiguated this way; the coverage is printed and the
accuracy is over those words (the paper backs off to WordNet's first sense for the others).
"""
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).parent))
from probe_pos import views_of  # noqa: E402
from report import LAYER_NAMES  # noqa: E402

WORDNET = "WordNet-eng30"
Lemma = Tuple[str, str]  # (lemma, n/v/a/r)


@dataclass
class Instance:
    """A sense-annotated word: the positions of its tokens in the sentence, its lemma and gold synsets."""

    positions: List[int]
    lemma: Lemma
    synsets: Set[str]


@dataclass
class Sentence:
    words: List[str]
    instances: List[Instance] = field(default_factory=list)


def _synset_pos(synset: str) -> str:
    pos = synset.rsplit("-", 1)[-1]
    return "a" if pos == "s" else pos  # adjective satellites are adjectives


def parse_naf(source, name: str = "NAF") -> List[Sentence]:
    """The sentences of one NAF document with their WordNet 3.0 sense annotations. A ``wf`` that
    joins a multiword expression with ``_`` becomes several tokens; an annotated term covers the
    tokens of all its ``wf`` targets."""
    try:
        root = ET.parse(source).getroot()
    except ET.ParseError as err:
        raise ValueError(f"{name}: not valid NAF XML ({err})") from None
    sentences: Dict[str, Sentence] = {}
    where: Dict[str, Tuple[str, List[int]]] = {}  # wf id -> (sentence id, token positions)
    for wf in root.iter("wf"):
        sent = sentences.setdefault(wf.get("sent", ""), Sentence([]))
        parts = [p for p in (wf.text or "").split("_") if p] or [wf.text or "_"]
        where[wf.get("id", "")] = (wf.get("sent", ""), list(range(len(sent.words), len(sent.words) + len(parts))))
        sent.words.extend(parts)
    for term in root.iter("term"):
        synsets = {ref.get("reference", "") for ref in term.iter("externalRef")
                   if ref.get("reftype") == "synset" and ref.get("resource") == WORDNET}
        synsets.discard("")
        if not synsets:
            continue
        targets = [where[t.get("id", "")] for t in term.iter("target") if t.get("id", "") in where]
        if not targets or len({s for s, _ in targets}) != 1:
            raise ValueError(f"{name}: term {term.get('id')} has no word or spans sentences")
        lemma = ((term.get("lemma") or "").lower(), _synset_pos(min(synsets)))
        positions = [p for _, ps in targets for p in ps]
        sentences[targets[0][0]].instances.append(Instance(positions, lemma, synsets))
    return list(sentences.values())


def iter_archive(path: Path, part: str) -> Iterator[Sentence]:
    """The sentences of every ``.naf`` file under ``part`` (e.g. ``semcor3.0``) in the wsd_corpora
    archive, one file parsed at a time (a caller that stops early skips the rest)."""
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if member.isfile() and member.name.endswith(".naf") and part in parts:
                yield from parse_naf(tar.extractfile(member), f"{path.name}:{member.name}")


def read_archive(path: Path, part: str) -> List[Sentence]:
    """All the sentences of ``iter_archive``; an error if none has a sense annotation."""
    sentences = list(iter_archive(path, part))
    if not any(s.instances for s in sentences):
        raise ValueError(f"{path}: no sense-annotated words under '{part}'")
    return sentences


def instance_vectors(bilm, sentences: List[Sentence], chunk: int = 2000) -> Iterator[Tuple[Instance, Dict[str, np.ndarray]]]:
    """Each annotated word with its vector in each view (each layer, the mean of layers): the mean
    over its tokens."""
    wanted = [s for s in sentences if s.instances]
    for start in range(0, len(wanted), chunk):  # bounded memory: a chunk's layers at a time
        batch = wanted[start : start + chunk]
        for sent, layers in zip(batch, bilm.embed_sentences([s.words for s in batch])):
            for inst in sent.instances:
                yield inst, views_of(layers[:, inst.positions].mean(axis=1))


def _holding(sentences: Iterable[Sentence], lemmas: Set[Lemma]) -> Iterator[Sentence]:
    """The sentences with an annotated word of ``lemmas``, keeping only those words: only the
    lemmas the test set asks about need sense vectors."""
    for sent in sentences:
        sent.instances = [inst for inst in sent.instances if inst.lemma in lemmas]
        if sent.instances:
            yield sent


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v) + 1e-12)


def main(
    archive: Path = typer.Argument(..., help="wsd_corpora_semcor3.0_and_allwords_eval.naf.tar.gz"),
    train_part: str = typer.Option("semcor3.0", "--train-part", help="folder of the archive to learn senses from"),
    test_part: str = typer.Option("senseval2", "--test-part", help="folder of the archive to disambiguate"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="spacy-elmo model dir (default: the shipped model)"),
    threads: int = typer.Option(0, "--threads", help="torch threads (0: torch's default)"),
    output: Optional[Path] = typer.Option(None, "--output", help="also write the table to this file"),
    max_train_sentences: int = typer.Option(0, "--max-train-sentences", min=0,
                                            help="learn senses from only the first N train sentences that hold a test lemma (0: all; a quicker, rougher probe)"),
) -> None:
    import torch

    from spacy_elmo.bilm import ElmoBiLM
    from spacy_elmo.loaders import DEFAULT_MODEL, MODELS_DIR

    if threads:
        torch.set_num_threads(threads)
    test = read_archive(archive, test_part)
    test_lemmas = {inst.lemma for s in test for inst in s.instances}
    # Read lazily: with --max-train-sentences, only as far as the first N that hold a test lemma.
    train = list(islice(_holding(iter_archive(archive, train_part), test_lemmas), max_train_sentences or None))
    if not train:
        raise ValueError(f"{archive}: no sense-annotated word under '{train_part}' has a lemma of {test_part}")

    model_dir = weights or MODELS_DIR / DEFAULT_MODEL
    bilm = ElmoBiLM.load(model_dir)
    start = time.perf_counter()
    sums: Dict[str, Dict[Lemma, Dict[str, np.ndarray]]] = defaultdict(lambda: defaultdict(dict))
    counts: Dict[Lemma, Counter] = defaultdict(Counter)
    n_train = 0
    for inst, views in instance_vectors(bilm, train):
        n_train += 1
        for synset in inst.synsets:
            counts[inst.lemma][synset] += 1
            for name, v in views.items():
                senses = sums[name][inst.lemma]
                senses[synset] = senses.get(synset, 0) + _unit(v)
    for by_lemma in sums.values():  # sense representations: unit length, so a dot product is a cosine
        for senses in by_lemma.values():
            for synset in senses:
                senses[synset] = _unit(senses[synset])
    correct: Counter = Counter()
    covered = total = 0
    for inst, views in instance_vectors(bilm, test):
        total += 1
        if inst.lemma not in counts:
            continue
        covered += 1
        correct["most frequent sense"] += counts[inst.lemma].most_common(1)[0][0] in inst.synsets
        for name, v in views.items():
            senses = sums[name][inst.lemma]
            best = max(senses, key=lambda s: float(senses[s] @ v))
            correct[name] += best in inst.synsets
    typer.echo(f"{model_dir.name}: embedded {n_train:,} {train_part} and {total:,} {test_part} sense-annotated words "
               f"in {time.perf_counter() - start:.0f} s; {covered:,} test words ({100 * covered / total:.1f}%) "
               f"have a lemma with senses in {train_part}")
    lines = [f"{'features':<30}{'accuracy':>10}"]
    for name in ["most frequent sense", *LAYER_NAMES, "mean of layers"]:
        lines.append(f"{name:<30}{100 * correct[name] / max(covered, 1):>9.2f}%")
    typer.echo("\n".join(lines))
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(f"Nearest-sense WSD with {model_dir.name}: senses from {train_part}, scored on {test_part} "
                          f"({covered:,} of {total:,} words covered)\n" + "\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
