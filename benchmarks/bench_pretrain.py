"""Pretraining throughput (training tokens/s) of the presets on this machine.

Not a test: prints figures. Example:

    python benchmarks/bench_pretrain.py --presets tiny,small --steps 20 --threads 2

Trains each preset for a few steps on the first lines of WikiText-2 train (after a warm-up
step) and reports tokens per second (sentence tokens, boundaries not counted).
"""
import argparse
import gzip
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wikitext2" / "train.txt.gz")
    parser.add_argument("--presets", default="tiny,en_cpu,small")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--vocab", type=int, default=20000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from spacy_elmo.pretrain.config import load_pretrain_config
    from spacy_elmo.pretrain.data import prepare_corpus
    from spacy_elmo.pretrain.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        with gzip.open(args.data, "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(6000)]
        (Path(tmp) / "wikitext_train.txt").write_text("".join(lines), encoding="utf-8")
        prepare_corpus([Path(tmp) / "wikitext_train.txt"]).save(Path(tmp) / "train.npz")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        print(f"device {device}, torch threads {args.threads}, torch {torch.__version__}")
        print(f"{'preset':<10}{'cell/proj':>11}{'batch tokens':>14}{'tokens/s':>10}")
        for preset in args.presets.split(","):
            cfg = load_pretrain_config(REPO / "configs" / "pretrain" / f"{preset}.cfg", {
                "paths.train": str(Path(tmp) / "train.npz"), "paths.dev": None,
                "vocab.size": min(args.vocab, 20000), "training.threads": args.threads, "training.device": device})
            trainer = Trainer(cfg, Path(tmp) / preset, log=lambda s: None)
            trainer.train_step(trainer._next_batch())  # warm-up
            tokens, start = 0, time.perf_counter()
            for _ in range(args.steps):
                batch = trainer._next_batch()
                tokens += int(trainer.lengths[batch].sum())
                trainer.train_step(batch)
            if device == "cuda":
                torch.cuda.synchronize()
            rate = tokens / (time.perf_counter() - start)
            lstm = cfg["model"]["lstm"]
            print(f"{preset:<10}{lstm['dim']:>6}/{lstm['projection_dim']:<4}{cfg['training']['batch_tokens']:>14}{rate:>10,.0f}")


if __name__ == "__main__":
    main()
