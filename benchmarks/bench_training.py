"""Epoch times of `spacy train`-style training: configs/ner.cfg (frozen ELMo, cached layers)
against configs/ner_baseline.cfg (spaCy's own tok2vec), on the same CoNLL-2003 sentences.

Not a test: prints figures. Example:

    python benchmarks/bench_training.py --sentences 2000 --epochs 3 --shape small

With a frozen biLM the `elmo` component computes each training doc's layers once (first epoch)
and reuses them (later epochs), so later ELMo epochs should cost close to a baseline epoch.
After each epoch both pipelines are evaluated on the first CoNLL-2003 dev sentences, as
`spacy train` does every `eval_frequency` steps: the dev docs' layers are also remembered after
the first evaluation (while the cache has room), so later ELMo evaluations skip the biLM.
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

import torch

REPO = Path(__file__).resolve().parent.parent
SHAPES = {
    "tiny": None,  # the AllenNLP test fixture
    "small": {"lstm": {"dim": 1024, "projection_dim": 128, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                       "use_skip_connections": True},
              "char_cnn": {"embedding": {"dim": 16}, "n_highway": 1, "activation": "relu",
                           "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                           "n_characters": 262, "max_characters_per_token": 50}},
}


def read_conll(path: Path, limit: int) -> List[Tuple[List[str], List[str]]]:
    """(words, tags) of the first sentences, read by the project's converter."""
    import importlib.util
    import itertools

    spec = importlib.util.spec_from_file_location("_bench_convert_ner", REPO / "scripts" / "convert_ner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return [(s.words, s.tags) for s in itertools.islice(module.read_iob(path), limit)]


def epoch_times(cfg: str, sents, dev_sents, epochs: int, overrides) -> Tuple[List[float], List[float]]:
    """Seconds of each training epoch and of the dev evaluation after it."""
    from spacy.tokens import Doc
    from spacy.training import Example
    from spacy.util import load_config, load_model_from_config, minibatch

    nlp = load_model_from_config(load_config(REPO / "configs" / cfg, overrides=overrides), auto_fill=True)
    def to_examples(tagged):
        return [Example(Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, ents=t)) for w, t in tagged]

    examples, dev = to_examples(sents), to_examples(dev_sents)
    optimizer = nlp.initialize(lambda: examples)
    rng = random.Random(0)
    times, eval_times = [], []
    for _ in range(epochs):
        rng.shuffle(examples)
        start = time.perf_counter()
        for batch in minibatch(examples, size=64):
            nlp.update(batch, sgd=optimizer, drop=0.1)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        nlp.evaluate(dev)
        eval_times.append(time.perf_counter() - start)
    return times, eval_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "conll2003" / "train.txt.gz")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--dev", type=Path, default=REPO.parent / "shared" / "data" / "conll2003" / "valid.txt.gz")
    parser.add_argument("--dev-sentences", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--elmo", type=Path, default=None, help="a model dir instead of random weights")
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from spacy_elmo import ElmoBiLM

    sents = read_conll(args.data, args.sentences)
    dev_sents = read_conll(args.dev, args.dev_sentences)
    n_words = sum(len(w) for w, _ in sents)
    with tempfile.TemporaryDirectory() as tmp:
        elmo_dir = args.elmo
        if elmo_dir is None:
            elmo_dir = Path(tmp) / "elmo"
            if SHAPES[args.shape] is None:
                fx = args.fixtures / "tiny"
                ElmoBiLM.from_allennlp(fx / "options.json", fx / "weights.hdf5").save(elmo_dir)
            else:
                torch.manual_seed(0)
                ElmoBiLM(SHAPES[args.shape]).save(elmo_dir)
        elmo, elmo_eval = epoch_times("ner.cfg", sents, dev_sents, args.epochs, {"paths.elmo": str(elmo_dir)})
        base, base_eval = epoch_times("ner_baseline.cfg", sents, dev_sents, args.epochs, {})
    print(f"machine: {os.cpu_count()} CPU cores, torch threads {args.threads}, torch {torch.__version__}")
    print(f"{len(sents)} CoNLL-2003 train sentences, {n_words} words; {len(dev_sents)} dev sentences, "
          f"{sum(len(w) for w, _ in dev_sents)} words; ELMo shape {args.elmo or args.shape}")
    print(f"{'epoch':>5} {'baseline s':>11} {'ELMo s':>9} {'ELMo/baseline':>14} {'dev eval s, baseline / ELMo':>29}")
    for i, (b, e, be, ee) in enumerate(zip(base, elmo, base_eval, elmo_eval), 1):
        print(f"{i:>5} {b:>11.1f} {e:>9.1f} {e / b:>14.2f} {be:>17.2f} / {ee:.2f}")
    json.dump({"baseline": base, "elmo": elmo, "baseline_eval": base_eval, "elmo_eval": elmo_eval}, sys.stderr)
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
