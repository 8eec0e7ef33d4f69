"""Pretraining memory: a `pretrain` run with oneDNN's own primitive cache (1,024 entries) against
the same run with the bound that `pretrain` sets (``spacy_elmo/pretrain/memory.py``,
``limit_onednn_cache``).

Not a test: prints figures. Example:

    python benchmarks/bench_pretrain_memory.py --batch-tokens 16384 --steps 40 --amp bf16

Both runs are `python -m spacy_elmo pretrain` in a fresh process, one after the other, on the same
prepared text (the first lines of WikiText-2 train), from the same seed, at the shipped model's
shape (cell 896, projection 512) unless told otherwise. The first sets
``ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024`` (oneDNN's default) in its environment; the second leaves
it unset, so `pretrain` applies its own bound. Printed for each: resident memory at the first
logged step and its peak (the process's high-water mark), and training tokens/s over the logged
steps after the first. The growth shows with a 16-bit ``--amp`` on a CPU whose oneDNN has native
16-bit products; in float32 the products mostly bypass oneDNN's cache.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from text_head import prepare_head  # noqa: E402

STEP_LINE = re.compile(r"step (\d+)/\d+ .* ([\d,]+) tokens/s")


def vm_kb(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of a live process, in kB (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_one(label: str, env_capacity: str, corpus: Path, out: Path, args: argparse.Namespace) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # its step lines as they come
    env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
    if env_capacity:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = env_capacity
    cmd = [sys.executable, "-m", "spacy_elmo", "pretrain", str(REPO / "configs" / "pretrain" / "en_cpu.cfg"),
           "--output", str(out), "--paths.train", str(corpus), "--paths.dev", "null",
           "--model.lstm.dim", str(args.dim), "--model.lstm.projection_dim", str(args.projection_dim),
           "--training.batch_tokens", str(args.batch_tokens), "--training.max_steps", str(args.steps),
           "--training.log_every", "1", "--training.checkpoint_every", str(args.steps + 1),
           "--training.threads", str(args.threads), "--training.amp", args.amp, "--training.seed", "0"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    rates: List[float] = []
    first_rss = peak = 0
    for line in proc.stdout:  # type: ignore[union-attr]
        match = STEP_LINE.search(line)
        if match:
            step = int(match.group(1))
            peak = max(peak, vm_kb(proc.pid, "VmHWM"))
            if step == 1:
                first_rss = vm_kb(proc.pid, "VmRSS")
            else:
                rates.append(float(match.group(2).replace(",", "")))
            print(f"  {label}: step {step}  resident {vm_kb(proc.pid, 'VmRSS') / 2**20:.2f} GB", file=sys.stderr)
    if proc.wait() != 0:
        raise SystemExit(f"the {label} run failed (exit {proc.returncode}): {' '.join(cmd)}")
    return {"run": label, "first_step_gb": first_rss / 2**20, "peak_gb": peak / 2**20,
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
        for label, capacity in (("oneDNN default (1024)", "1024"), ("pretrain's bound", "")):
            start = time.perf_counter()
            rows.append(run_one(label, capacity, corpus, Path(tmp) / f"run{len(rows)}", args))
            rows[-1]["seconds"] = time.perf_counter() - start
    import torch

    print(f"\n{args.steps} steps of {args.batch_tokens:,} tokens, cell {args.dim} / projection "
          f"{args.projection_dim}, amp {args.amp}, {args.threads} thread(s), torch {torch.__version__}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"{'run':<24}{'resident at step 1':>20}{'peak resident':>16}{'tokens/s':>11}")
    for row in rows:
        print(f"{row['run']:<24}{row['first_step_gb']:>17.2f} GB{row['peak_gb']:>13.2f} GB{row['tokens_per_s']:>11,.0f}")
    base, new = rows
    print(f"peak ratio (default / bound): {base['peak_gb'] / max(new['peak_gb'], 1e-9):.2f}; "
          f"tokens/s ratio (bound / default): {new['tokens_per_s'] / max(base['tokens_per_s'], 1e-9):.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
