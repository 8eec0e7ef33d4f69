"""Pretraining throughput: the trainer's step against the step of commit 778aaa6
(``reference_pretrain.py``), side by side in one process at one thread count.

Not a test: prints figures. Example:

    python benchmarks/bench_pretrain.py --presets en_cpu,small --steps 12,4 --threads 1

For each preset both implementations start from the same weights and train on the same
batches (the first lines of WikiText-2 train), each in its own process with its own model
and Adam (the trainer's process with the host-memory setting that ``pretrain`` applies,
``spacy_elmo/pretrain/memory.py``; the reference's as 778aaa6 ran); their steps alternate,
one process stepping while the other waits, so a busy machine slows both alike. Printed: training
tokens/s of each (sentence tokens, boundaries not counted) and their ratio, the mean loss
of each (they should track each other), and from a profile of a few more steps of the new
trainer the share of a step spent in matrix products (linear-algebra products and the char
CNN's convolutions), their GFLOP/s, and the machine's float32 rate measured in the same run
with a large ``torch.mm``. Also the cost of building one epoch's batch order at the size of
a real corpus (778aaa6 rebuilt it at every step; the trainer now builds it once an epoch).
And the trainer's LSTM rows a direction against the sentences' steps: rows are shared by
sentences that begin (forward) or end (backward) alike.
``--amp bf16`` runs both implementations under bf16 autocast (the softmax in float32, as 778aaa6
ran ``training.amp bf16``); the float32 default is the yardstick of the speed targets.
"""
import argparse
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_pretrain  # noqa: E402
from text_head import prepare_head  # noqa: E402

PRODUCT_OPS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm",
               "aten::mkldnn_convolution", "aten::convolution_backward")


def gemm_rate(size: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """The machine's matrix-product rate in ``dtype``, GFLOP/s (best of ``repeats``)."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def product_flops(name: str, shapes: List[List[int]]) -> float:
    """Floating-point operations of one call of a product op, from its input shapes."""
    if name == "aten::mm":
        (a, b), (_, c) = shapes[0], shapes[1]
        return 2.0 * a * b * c
    if name in ("aten::addmm", "aten::addmm_"):
        (a, b), (_, c) = shapes[1], shapes[2]
        return 2.0 * a * b * c
    if name == "aten::bmm":
        (n, a, b), (_, _, c) = shapes[0], shapes[1]
        return 2.0 * n * a * b * c
    if name == "aten::baddbmm":
        (n, a, b), (_, _, c) = shapes[1], shapes[2]
        return 2.0 * n * a * b * c
    if name == "aten::mkldnn_convolution":  # input (n, E, 1, L), weight (F, E, 1, w)
        n, e, length = shapes[0][0], shapes[0][1], shapes[0][-1]
        f, w = shapes[1][0], shapes[1][-1]
        return 2.0 * n * f * e * w * (length - w + 1)
    if name == "aten::convolution_backward":  # grad_out (n, F, Lout), input (n, E, L), weight (F, E, w)
        n, f, lout = shapes[0][0], shapes[0][1], shapes[0][-1]
        e, w = shapes[2][1], shapes[2][-1]
        return 2 * 2.0 * n * f * e * w * lout  # input and weight gradients
    return 0.0


def profile_products(step, batches) -> Tuple[float, float, float]:
    """(share of wall time in products, product GFLOP/s, step seconds) over ``batches``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        for batch in batches:
            step(batch)
        wall = time.perf_counter() - start
    seconds, flops = 0.0, 0.0
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key in PRODUCT_OPS:
            seconds += event.self_cpu_time_total / 1e6
            flops += event.count * product_flops(event.key, event.input_shapes)
    return seconds / wall, flops / max(seconds, 1e-9) / 1e9, wall / len(batches)


def next_batch(trainer: Any) -> np.ndarray:
    return trainer._next_batch()


def _worker(role: str, preset: str, data: str, out: str, threads: int, vocab: int, keep_memory: bool,
            amp: str, conn: Any) -> None:
    """One implementation in its own process, stepping when the parent says so. ``role``:
    "new" (the trainer, with the host-memory setting that ``pretrain`` applies) or "reference"
    (778aaa6's step on a trainer built from the same config, hence the same weights and data)."""
    torch.set_num_threads(threads)
    from spacy_elmo.pretrain.config import load_pretrain_config
    from spacy_elmo.pretrain.memory import keep_freed_memory
    from spacy_elmo.pretrain.trainer import Trainer

    cfg = load_pretrain_config(REPO / "configs" / "pretrain" / f"{preset}.cfg", {
        "paths.train": data, "paths.dev": None, "paths.init": None, "vocab.size": vocab,
        "training.threads": threads, "training.device": "cpu", "training.amp": amp})
    trainer = Trainer(cfg, Path(out) / preset / role, log=lambda s: None)
    if role == "new":
        if keep_memory:
            keep_freed_memory()
        draw, step = (lambda: next_batch(trainer)), (lambda b: trainer.train_step(b)[0])
    else:
        ref = reference_pretrain.ReferenceStep(
            trainer.bilm, cfg["training"], trainer.train.ids, trainer.offsets, trainer.lengths,
            trainer.char_table, trainer.train_targets, amp=amp)
        draw, step = ref.next_batch, ref
    while True:
        command = conn.recv()
        if command == "step":
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            batch = draw()
            nll = step(batch)
            seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
            conn.send((batch, float(nll), seconds, int(trainer.lengths[batch].sum()),
                       after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime))
        elif command == "profile":
            conn.send(profile_products(step, [draw() for _ in range(conn.recv())]))
        elif command == "rows":  # the trainer's LSTM rows a direction against the sentences' steps
            from spacy_elmo.pretrain.batches import make_batch
            from spacy_elmo.pretrain.lm_forward import training_plan

            rows = steps_total = 0
            for sentences in conn.recv():
                b = make_batch(trainer.train, trainer.offsets, sentences, trainer.char_table, trainer.train_targets)
                rows += sum(training_plan(np.asarray(b.lengths), b.token_types, b.type_char_ids.shape[0]).batch_sizes)
                steps_total += sum(b.lengths) + len(b.lengths)
            conn.send((rows, steps_total))
        else:
            conn.close()
            return


def bench_preset(preset: str, steps: int, data: Path, out: Path, args: argparse.Namespace) -> Dict[str, Any]:
    """Both implementations, each in its own process (so that a process-wide setting of one, such
    as the trainer's host-memory setting, leaves the other as it ran), their steps alternating."""
    ctx = mp.get_context("spawn")
    conns, procs = {}, []
    for role in ("reference", "new"):
        parent, child = ctx.Pipe()
        worker_args = (role, preset, str(data), str(out), args.threads, args.vocab, not args.default_malloc, args.amp,
                       child)
        proc = ctx.Process(target=_worker, args=worker_args)
        proc.start()
        conns[role] = parent
        procs.append(proc)
    seconds = {"reference": 0.0, "new": 0.0}
    faults = {"reference": 0, "new": 0}  # minor page faults and kernel seconds of the timed steps
    kernel = {"reference": 0.0, "new": 0.0}
    losses: Dict[str, List[float]] = {"reference": [], "new": []}
    tokens = 0
    timed_batches = []
    try:
        for i in range(steps + 1):  # step 0 warms up
            done = {}
            for role in ("reference", "new"):  # one at a time: the other process waits
                conns[role].send("step")
                done[role] = conns[role].recv()
            batch, new_batch = done["reference"][0], done["new"][0]
            assert np.array_equal(batch, new_batch), "the two implementations must see the same batches"
            n = done["new"][3]
            for role in ("reference", "new"):
                losses[role].append(done[role][1] / (2 * n))
                if i:
                    seconds[role] += done[role][2]
                    faults[role] += done[role][4]
                    kernel[role] += done[role][5]
            if i:
                tokens += n
                timed_batches.append(new_batch)
        profiled = {}
        for role in ("new", "reference"):
            conns[role].send("profile")
            conns[role].send(args.profile_steps)
            profiled[role] = conns[role].recv()
        conns["new"].send("rows")
        conns["new"].send(timed_batches)
        lstm_rows, sentence_steps = conns["new"].recv()
    finally:
        for role in ("reference", "new"):
            try:
                conns[role].send("stop")
            except OSError:  # that worker has died: its error is the one to see
                pass
        for proc in procs:
            proc.join()
    rates = {k: tokens / v for k, v in seconds.items()}
    return {"preset": preset, "tokens": tokens, "steps": steps, "tokens_per_s": rates,
            "ratio": rates["new"] / rates["reference"],
            "mean_loss": {k: float(np.mean(v[1:])) for k, v in losses.items()},
            "page_faults_per_step": {k: v / steps for k, v in faults.items()},
            "kernel_share": {k: kernel[k] / seconds[k] for k in kernel},
            "product_share": {k: profiled[k][0] for k in profiled},
            "product_gflops": {k: profiled[k][1] for k in profiled},
            "lstm_rows": lstm_rows, "sentence_steps": sentence_steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wikitext2" / "train.txt.gz")
    parser.add_argument("--lines", type=int, default=6000, help="first lines of the text to train on")
    parser.add_argument("--presets", default="en_cpu,small")
    parser.add_argument("--steps", default="12,4", help="timed steps of each implementation, per preset "
                        "(a comma list in the order of --presets, or one number for all)")
    parser.add_argument("--profile-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=20000)
    parser.add_argument("--order-sentences", type=int, default=694_427,
                        help="corpus size (sentences) at which to time building an epoch's batch order "
                             "(default: the English en_cpu corpus)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="run the trainer without the host-memory setting that pretrain applies")
    parser.add_argument("--amp", choices=("none", "bf16"), default="none",
                        help="training.amp of both implementations (bf16: autocast, which pays only on "
                             "CPUs with fast bf16 products; the default float32 is the yardstick)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    results: Dict[str, Any] = {"threads": args.threads, "torch": torch.__version__, "amp": args.amp, "presets": []}
    results["gemm_gflops_start"] = gemm_rate()
    if args.amp == "bf16":
        results["bf16_gemm_gflops_start"] = gemm_rate(dtype=torch.bfloat16)
    with tempfile.TemporaryDirectory() as tmp:
        train = prepare_head(args.data, args.lines, Path(tmp))
        presets = args.presets.split(",")
        steps = [int(n) for n in args.steps.split(",")]
        if len(steps) not in (1, len(presets)):
            parser.error("--steps: one number, or one per preset")
        for preset, n in zip(presets, steps * len(presets) if len(steps) == 1 else steps):
            results["presets"].append(bench_preset(preset, n, train, Path(tmp), args))
            r = results["presets"][-1]
            print(f"{preset}: {r['tokens_per_s']['reference']:,.0f} -> {r['tokens_per_s']['new']:,.0f} tokens/s "
                  f"({r['ratio']:.2f}x)", file=sys.stderr, flush=True)
    results["gemm_gflops_end"] = gemm_rate()
    gemm = max(results["gemm_gflops_start"], results["gemm_gflops_end"])
    if args.amp == "bf16":
        results["bf16_gemm_gflops_end"] = gemm_rate(dtype=torch.bfloat16)
    lengths = np.random.default_rng(0).integers(1, 65, size=args.order_sentences)
    start = time.perf_counter()
    reference_pretrain.epoch_batches(lengths, 2048, 0, 0)
    results["epoch_order_ms"] = (time.perf_counter() - start) * 1e3

    print(f"torch {torch.__version__}, {args.threads} thread(s); fp32 GEMM (2048^3) "
          f"{results['gemm_gflops_start']:.1f} / {results['gemm_gflops_end']:.1f} GFLOP/s (start / end of run)")
    if args.amp == "bf16":
        print(f"both implementations under bf16 autocast (softmax in float32); bf16 GEMM (2048^3) "
              f"{results['bf16_gemm_gflops_start']:.1f} / {results['bf16_gemm_gflops_end']:.1f} GFLOP/s; "
              "the products' share and rate below mix bf16 and float32 products, against the fp32 GEMM")
    print(f"{'preset':<8}{'steps':>6}{'778aaa6 tok/s':>15}{'new tok/s':>11}{'ratio':>7}"
          f"{'loss ref/new':>15}{'products share ref/new':>24}{'product GFLOP/s ref/new (of GEMM)':>36}")
    for r in results["presets"]:
        rate, share, gf, loss = r["tokens_per_s"], r["product_share"], r["product_gflops"], r["mean_loss"]
        print(f"{r['preset']:<8}{r['steps']:>6}{rate['reference']:>15,.0f}{rate['new']:>11,.0f}{r['ratio']:>6.2f}x"
              f"{loss['reference']:>8.3f}/{loss['new']:.3f}{share['reference']:>17.0%} / {share['new']:.0%}"
              f"{gf['reference']:>20.1f} / {gf['new']:.1f} ({gf['new'] / gemm:.0%})")
    for r in results["presets"]:
        pf, ks = r["page_faults_per_step"], r["kernel_share"]
        print(f"{r['preset']}: minor page faults per step {pf['reference']:,.0f} / {pf['new']:,.0f}, "
              f"kernel time {ks['reference']:.0%} / {ks['new']:.0%} of a step (778aaa6 / new)")
    for r in results["presets"]:
        print(f"{r['preset']}: the trainer's LSTM rows a direction {r['lstm_rows']:,} for {r['sentence_steps']:,} "
              f"sentence steps ({1 - r['lstm_rows'] / r['sentence_steps']:.1%} shared by sentences that begin or end alike)")
    print(f"building one epoch's batch order for {args.order_sentences:,} sentences: "
          f"{results['epoch_order_ms']:.0f} ms (at every step in 778aaa6, once an epoch now)")
    for r in results["presets"]:  # the reference's step also rebuilds the order of a corpus that size
        per_step = {k: r["tokens"] / r["steps"] / v for k, v in r["tokens_per_s"].items()}
        r["ratio_at_order_size"] = (per_step["reference"] + results["epoch_order_ms"] / 1e3) / per_step["new"]
        print(f"{r['preset']}: ratio with that rebuild in every reference step: {r['ratio_at_order_size']:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
