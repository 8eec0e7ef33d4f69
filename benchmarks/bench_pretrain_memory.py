"""Pretraining memory: a `pretrain` run with oneDNN's own primitive cache (1,024 entries) against
the same run with the bound that `pretrain` sets (``spacy_elmo/pretrain/memory.py``,
``limit_onednn_cache``).

Not a test: prints figures. Example:

    python benchmarks/bench_pretrain_memory.py --batch-tokens 16384 --steps 40 --amp bf16

Both runs are `python -m spacy_elmo pretrain` in a fresh process, one after the other, on the same
prepared text (the first lines of WikiText-2 train), from the same seed, at the shipped model's
shape (cell 896, projection 512) unless told otherwise. The first sets
``ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024`` (oneDNN's default) in its environment; the second leaves
it unset, so `pretrain` applies its own bound. Printed for each, from the run's own step records
(``metrics.jsonl``, one record a step): resident memory at the first step, its peak (the process's
high-water mark at the last step), the free part of the heap at the last step (glibc), and
training tokens/s over the steps after the first. The growth shows with a 16-bit ``--amp`` on a
CPU whose oneDNN has native 16-bit products; in float32 the products mostly bypass oneDNN's cache.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from text_head import prepare_head  # noqa: E402

from spacy_elmo.pretrain.memory import ONEDNN_CACHE_ENV  # noqa: E402
from spacy_elmo.pretrain.output import METRICS_NAME  # noqa: E402

RUNS = [("oneDNN default (1024)", "1024"), ("pretrain's bound", "")]  # label, cache capacity ("": unset)


def run_one(label: str, capacity: str, corpus: Path, out: Path, args: argparse.Namespace) -> Dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != ONEDNN_CACHE_ENV}
    if capacity:
        env[ONEDNN_CACHE_ENV] = capacity
    cmd = [sys.executable, "-m", "spacy_elmo", "pretrain", str(REPO / "configs" / "pretrain" / "en_cpu.cfg"),
           "--output", str(out), "--paths.train", str(corpus), "--paths.dev", "null",
           "--model.lstm.dim", str(args.dim), "--model.lstm.projection_dim", str(args.projection_dim),
           "--training.batch_tokens", str(args.batch_tokens), "--training.max_steps", str(args.steps),
           "--training.log_every", "1", "--training.checkpoint_every", str(args.steps + 1),
           "--training.threads", str(args.threads), "--training.amp", args.amp, "--training.seed", "0"]
    print(f"{label}: {ONEDNN_CACHE_ENV}={capacity or '(unset)'}", file=sys.stderr)
    if subprocess.run(cmd, env=env).returncode != 0:
        raise SystemExit(f"the {label} run failed: {' '.join(cmd)}")
    records = [json.loads(line) for line in (out / METRICS_NAME).read_text().splitlines()]
    steps = [r for r in records if "tokens_per_s" in r]
    if not steps or "resident_gb" not in steps[0]:
        raise SystemExit(f"the {label} run's records carry no resident memory (Linux only)")
    rates = [r["tokens_per_s"] for r in steps[1:]]
    return {"run": label, "first_step_gb": steps[0]["resident_gb"], "peak_gb": steps[-1]["peak_resident_gb"],
            "heap_free_gb": steps[-1].get("heap_free_gb", float("nan")),
            "tokens_per_s": sum(rates) / max(1, len(rates))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wikitext2" / "train.txt.gz")
    parser.add_argument("--lines", type=int, default=20000, help="first lines of the text to train on")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--amp", default="bf16", choices=["none", "bf16", "fp16"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dim", type=int, default=896, help="LSTM cell size")
    parser.add_argument("--projection-dim", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("reads resident memory from /proc: Linux only")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = prepare_head(args.data, args.lines, Path(tmp))
        for label, capacity in RUNS:
            start = time.perf_counter()
            rows.append(run_one(label, capacity, corpus, Path(tmp) / f"run{len(rows)}", args))
            rows[-1]["seconds"] = time.perf_counter() - start
    import torch

    print(f"\n{args.steps} steps of {args.batch_tokens:,} tokens, cell {args.dim} / projection "
          f"{args.projection_dim}, amp {args.amp}, {args.threads} thread(s), torch {torch.__version__}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"{'run':<24}{'resident at step 1':>20}{'peak resident':>16}{'heap free at end':>19}{'tokens/s':>11}")
    for row in rows:
        print(f"{row['run']:<24}{row['first_step_gb']:>17.2f} GB{row['peak_gb']:>13.2f} GB"
              f"{row['heap_free_gb']:>16.2f} GB{row['tokens_per_s']:>11,.0f}")
    base, new = rows
    print(f"peak ratio (default / bound): {base['peak_gb'] / max(new['peak_gb'], 1e-9):.2f}; "
          f"tokens/s ratio (bound / default): {new['tokens_per_s'] / max(base['tokens_per_s'], 1e-9):.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
