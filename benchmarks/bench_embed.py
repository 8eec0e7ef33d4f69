"""Throughput of ``python -m spacy_elmo embed`` in tokens/s: one process,
``--n-process 2`` and the Ray engine with 2 workers on a local Ray instance, on the
same CoNLL-2003 dev sentences (one per line, AllenNLP's input convention).

    python benchmarks/bench_embed.py --lines 2000

Each run goes through the library functions the command calls (``embed_file``,
``embed_file_ray``), end to end: reading, model loading in every worker, the HDF5
writes, and for Ray its start (timed apart as well). Prints tokens/s and the ratio to
one process. Default model: the shipped ``spacy_elmo/models/en_elmo_cpu``.
"""
import argparse
import importlib.util
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", REPO.parent / "shared"))


def conll_lines(path: Path, limit: int) -> List[str]:
    """The first ``limit`` sentences of a CoNLL-2003 file, through the project's converter."""
    spec = importlib.util.spec_from_file_location("convert_ner", REPO / "scripts" / "convert_ner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return [" ".join(s.words) for s in itertools.islice(module.read_iob(path), limit)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=2000, help="sentences of the dev file to embed")
    parser.add_argument("--data", type=Path, default=SHARED / "data" / "conll2003" / "valid.txt.gz")
    parser.add_argument("--weights", default=str(REPO / "spacy_elmo" / "models" / "en_elmo_cpu"))
    parser.add_argument("--layers", default="all")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shard-size", type=int, default=250, help="lines per Ray shard")
    parser.add_argument("--runs", default="one,two,ray", help="comma list of one, two (--n-process 2), ray")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the one-process run (workers use 1)")
    parser.add_argument("--ray-attempts", type=int, default=5, help="tries at starting the local Ray instance")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from spacy_elmo.embed import EmbedSettings, embed_file

    lines = conll_lines(args.data, args.lines)
    n_tokens = sum(len(line.split()) for line in lines)
    settings = EmbedSettings(weights=args.weights, layers=args.layers)
    results: Dict[str, Dict[str, float]] = {}
    print(f"{len(lines)} sentences, {n_tokens} tokens; weights {Path(args.weights).name}; layers {args.layers}; "
          f"batch {args.batch_size}; {os.cpu_count()} CPUs; torch threads {torch.get_num_threads()} (one process), "
          f"1 per worker (two, ray); load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "input.txt"
        src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        for run in args.runs.split(","):
            out = Path(tmp) / f"{run}.h5"
            start = time.perf_counter()
            extra = 0.0
            if run == "one":
                report = embed_file(src, out, settings, batch_size=args.batch_size, progress=False)
            elif run == "two":
                report = embed_file(src, out, settings, batch_size=args.batch_size, n_process=2, progress=False)
            elif run == "ray":
                import ray

                from spacy_elmo.embed.ray import embed_file_ray

                # Ray (2.60 at least) waits a fixed 30 s for the raylet to register with its GCS
                # (``raylet_start_wait_time_s = 30`` in ray/_private/node.py; no environment
                # variable or _system_config entry changes it): on a loaded machine, try again.
                for attempt in range(1, args.ray_attempts + 1):
                    try:
                        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
                        break
                    except Exception as err:
                        ray.shutdown()
                        print(f"ray: local start {attempt} of {args.ray_attempts} failed: {err}", flush=True)
                        if attempt == args.ray_attempts:
                            raise
                extra = time.perf_counter() - start
                try:
                    report = embed_file_ray(src, out, settings, batch_size=args.batch_size, n_workers=2,
                                   shard_size=args.shard_size, progress=False)
                finally:
                    ray.shutdown()
            else:
                raise SystemExit(f"unknown run {run!r}")
            seconds = time.perf_counter() - start
            steady = report.steady_words_per_second
            first = report.first_seconds + extra
            results[run] = {"seconds": seconds, "tokens_per_s": n_tokens / seconds, "ray_init_s": extra,
                            "first_batch_s": first, "steady_tokens_per_s": steady}
            print(f"{run:>4}: {seconds:7.1f} s  {n_tokens / seconds:8,.0f} tokens/s end to end;  first batch after "
                  f"{first:5.1f} s (start-up{', ray.init %.1f s' % extra if extra else ''}), then {steady:8,.0f} tokens/s  "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    if "one" in results:
        base = results["one"]["tokens_per_s"]
        steady = results["one"]["steady_tokens_per_s"]
        print("ratio to one process, end to end: " + ", ".join(f"{k} {v['tokens_per_s'] / base:.2f}x" for k, v in results.items()))
        print("ratio to one process, after the first batch: "
              + ", ".join(f"{k} {v['steady_tokens_per_s'] / steady:.2f}x" for k, v in results.items()))
    if args.json:
        args.json.write_text(json.dumps({"lines": len(lines), "tokens": n_tokens, "runs": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
