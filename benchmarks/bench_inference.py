"""Inference speed of ELMo: the step-by-step reference vs ``ElmoBiLM`` vs the ``elmo``
component, in one process on the same CoNLL-2003 dev sentences.

    python benchmarks/bench_inference.py --shapes small,original --threads 2

Prints one table row per shape: tokens/s of (a) the reference, (b) ``ElmoBiLM.
embed_sentences`` with a cold and a warm character-CNN cache, (c) the ``elmo``
component in ``nlp.pipe``; the ratios (b)/(a); the peak memory each added; the max
abs difference from (a). Weights are random, in the published shapes (``tiny`` is
the test fixture's, ``shipped`` the model shipped with spacy-elmo). The reference
runs on the first sentences of the file up to ``--ref-tokens`` tokens; (b) and (c)
are timed on the same sentences and, for tokens/s at scale, on up to
``--max-sentences``. With ``--precision int8`` (CPU) or ``bf16``/``fp16``
(``--device cuda``), (b) is timed again in that precision, with its speed ratio to
float32 and each layer's smallest token cosine to the float32 vectors.
"""
import argparse
import ctypes
import gzip
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import ReferenceElmo  # noqa: E402

from spacy_elmo.bilm import ElmoBiLM  # noqa: E402
from spacy_elmo.bilm.precision import PRECISIONS, check_device  # noqa: E402
from spacy_elmo.bilm.tf32 import no_tf32  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", REPO.parent / "shared"))
PUBLISHED_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
SHAPES = {  # cell C, projection P, highway layers
    "small": (1024, 128, 1),
    "medium": (2048, 256, 1),
    "original": (4096, 512, 2),
}


def read_conll(path: Path) -> List[List[str]]:
    """Sentences (token lists) of a CoNLL-2003 file, in file order."""
    opener = gzip.open if path.suffix == ".gz" else open
    sentences: List[List[str]] = []
    current: List[str] = []
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        for line in f:
            line = line.strip()
            if not line or line.startswith("-DOCSTART-"):
                if current:
                    sentences.append(current)
                    current = []
            else:
                current.append(line.split()[0])
    if current:
        sentences.append(current)
    return sentences


def make_model(shape: str) -> ElmoBiLM:
    """Random weights in a published shape, the tiny test fixture or the shipped model."""
    if shape == "shipped":
        from spacy_elmo.loaders import DEFAULT_MODEL, MODELS_DIR

        return ElmoBiLM.load(MODELS_DIR / DEFAULT_MODEL).eval()
    if shape == "tiny":
        fixture = SHARED / "fixtures" / "tiny"
        return ElmoBiLM.from_allennlp(fixture / "options.json", fixture / "weights.hdf5")
    cell, proj, highway = SHAPES[shape]
    options = {
        "lstm": {"dim": cell, "projection_dim": proj, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": True},
        "char_cnn": {"embedding": {"dim": 16}, "filters": PUBLISHED_FILTERS, "n_highway": highway,
                     "activation": "relu", "n_characters": 262, "max_characters_per_token": 50},
    }
    torch.manual_seed(0)
    return ElmoBiLM(options).eval()


def lstm_flops(model: ElmoBiLM, sentences: Sequence[Sequence[str]]) -> float:
    """Multiply-adds x 2 of the LSTM layers' products (input, recurrent, output; both
    directions) over ``sentences``, each run as ``<S> tokens </S>``."""
    lstm = model.options["lstm"]
    C, P, L = lstm["dim"], lstm["projection_dim"], lstm["n_layers"]
    rows = sum(len(s) + 2 for s in sentences)
    return 2.0 * L * 2 * (P * 4 * C * 2 + C * P) * rows


def gemm_flops(device: str = "cpu") -> float:
    """Measured float32 matrix-product FLOP/s (torch.mm, 2048^3 on the CPU, 8192^3 on a
    GPU with TF32 off; best of 5)."""
    n = 8192 if device == "cuda" else 2048
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    with no_tf32():
        def product() -> None:
            torch.mm(a, b)
            if device == "cuda":
                torch.cuda.synchronize()

        product()
        best = min(_timed(product)[1] for _ in range(5))
    return 2 * n**3 / best


class PeakRss:
    """Peak resident memory above the level at entry, sampled every 2 ms."""

    def __enter__(self) -> "PeakRss":
        _release_free_memory()
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def mb(self) -> float:
        return (self.peak - self.start) / 2**20


def _release_free_memory() -> None:
    """Give freed heap pages back to the OS, so the next peak counts its own use."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


LAST_CPU = [0.0]  # CPU seconds of the calling thread in the last _timed call


def _timed(fn: Callable[[], Any]) -> Tuple[Any, float]:
    """(result, wall seconds); the thread's CPU seconds go to LAST_CPU[0]."""
    cpu, start = time.thread_time(), time.perf_counter()
    result = fn()
    LAST_CPU[0] = time.thread_time() - cpu
    return result, time.perf_counter() - start


def max_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b) if x.size)


def min_cosines(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> List[float]:
    """Per layer, the smallest cosine between a token's vectors in ``a`` and ``b``."""
    x, y = np.concatenate(list(a), axis=1), np.concatenate(list(b), axis=1)
    cos = (x * y).sum(-1) / np.maximum(np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1), 1e-30)
    return [float(c.min()) for c in cos]


def run_pipe(model: ElmoBiLM, sentences: List[List[str]]) -> Optional[Tuple[List[np.ndarray], float]]:
    """(c): ``doc._.elmo`` of each sentence (one Doc each) and the seconds of nlp.pipe."""
    try:
        import spacy
        from spacy.tokens import Doc

        with tempfile.TemporaryDirectory() as tmp:
            model.save(Path(tmp) / "bilm")
            nlp = spacy.blank("en")
            nlp.add_pipe("elmo", config={"tensor": "none"})
            nlp.config["initialize"]["components"]["elmo"] = {
                "loader": {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(Path(tmp) / "bilm")}
            }
            nlp.initialize()
        docs = []
        for words in sentences:
            doc = Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1))
            docs.append(doc)
        out, seconds = _timed(lambda: [d._.elmo for d in nlp.pipe(docs, batch_size=256)])
        return out, seconds
    except Exception as err:  # the component is another engineer's work in progress
        print(f"  (c) elmo component unavailable: {type(err).__name__}: {err}", file=sys.stderr)
        return None


def bench_shape(
    shape: str, sentences: List[List[str]], ref_tokens: int, precision: str, device: str
) -> Dict[str, Any]:
    model = make_model(shape).to(device)
    row: Dict[str, Any] = {"shape": shape, "device": device}
    subset: List[List[str]] = []
    for sent in sentences:
        if subset and sum(map(len, subset)) + len(sent) > ref_tokens:
            break
        subset.append(sent)
    n_sub = sum(map(len, subset))
    n_all = sum(map(len, sentences))
    row["ref_tokens"], row["all_tokens"] = n_sub, n_all

    reference = ReferenceElmo(model.options, {k: v.cpu() for k, v in model.state_dict().items()})
    with PeakRss() as mem:
        expected, seconds = _timed(lambda: reference.embed_sentences(subset, batch_size=32))
    row["a_tok_s"], row["a_mb"], a_cpu = n_sub / seconds, mem.mb, LAST_CPU[0]
    del reference

    model.set_token_cache(50_000)
    with PeakRss() as mem:
        ours, seconds = _timed(lambda: model.embed_sentences(subset))
    row["b_cold_tok_s"], row["b_mb"] = n_sub / seconds, mem.mb
    row["cpu_ratio_cold"] = a_cpu / LAST_CPU[0]
    ours, seconds = _timed(lambda: model.embed_sentences(subset))
    row["b_warm_tok_s"] = n_sub / seconds
    row["cpu_ratio_warm"] = a_cpu / LAST_CPU[0]
    row["lstm_gflop_s_ref_tokens"] = lstm_flops(model, subset) / seconds / 1e9
    row["b_diff"] = max_diff(expected, ours)
    row["ratio_cold"] = row["b_cold_tok_s"] / row["a_tok_s"]
    row["ratio_warm"] = row["b_warm_tok_s"] / row["a_tok_s"]

    model.set_token_cache(50_000)
    with PeakRss() as mem:
        _, seconds = _timed(lambda: model.embed_sentences(sentences))
    row["b_all_cold_tok_s"], row["b_all_mb"] = n_all / seconds, mem.mb
    _, seconds = _timed(lambda: model.embed_sentences(sentences))
    row["b_all_warm_tok_s"] = n_all / seconds
    row["lstm_gflop_s"] = lstm_flops(model, sentences) / seconds / 1e9

    if precision != "float32":
        exact = ours
        model.precision = precision
        model.set_token_cache(50_000)
        _, seconds = _timed(lambda: model.embed_sentences(subset))
        row["p_cold_tok_s"] = n_sub / seconds
        low, seconds = _timed(lambda: model.embed_sentences(subset))
        row["p_warm_tok_s"] = n_sub / seconds
        row["p_ratio"] = row["p_warm_tok_s"] / row["b_warm_tok_s"]
        row["p_diff"], row["p_min_cos"] = max_diff(expected, low), min_cosines(exact, low)
        row["precision"] = precision
        model.embed_sentences(sentences)  # the whole file's tokens into the cache (cleared by the switch)
        _, seconds = _timed(lambda: model.embed_sentences(sentences))
        row["p_all_warm_tok_s"] = n_all / seconds
        row["p_all_ratio"] = row["p_all_warm_tok_s"] / row["b_all_warm_tok_s"]
        model.precision = "float32"

    piped = run_pipe(model, subset) if device == "cpu" else None
    if piped is not None:
        out, seconds = piped
        row["c_tok_s"], row["c_diff"] = n_sub / seconds, max_diff(expected, out)
    return row


def main(argv: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get(
        "SPACY_ELMO_CONLL", SHARED / "data" / "conll2003" / "valid.txt.gz")), help="CoNLL-2003 file")
    parser.add_argument("--shapes", default="tiny,small,medium,original")
    parser.add_argument("--max-sentences", type=int, default=0, help="0: the whole file")
    parser.add_argument("--ref-tokens", type=int, default=0,
                        help="tokens the reference runs on (0: 4000 for tiny/small, 2000 medium, 1000 original)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where (b) runs")
    parser.add_argument("--precision", default="float32", choices=PRECISIONS,
                        help="also time (b) in this precision: int8 (CPU), bf16 or fp16 (--device cuda)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    try:
        check_device(args.precision, torch.device(args.device), "--precision")
    except ValueError as err:
        parser.error(str(err))

    torch.set_num_threads(args.threads)
    sentences = read_conll(args.data)
    if args.max_sentences:
        sentences = sentences[: args.max_sentences]
    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} tokens; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    peak = gemm_flops(args.device)
    print(f"float32 GEMM ({args.device}, torch.mm): {peak / 1e9:.0f} GFLOP/s")
    default_ref = {"tiny": 4000, "shipped": 4000, "small": 4000, "medium": 2000, "original": 1000}
    rows = []
    for shape in args.shapes.split(","):
        row = bench_shape(shape, sentences, args.ref_tokens or default_ref.get(shape, 1000), args.precision, args.device)
        row["gemm_gflop_s"] = peak / 1e9
        rows.append(row)
        print(format_row(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


def format_row(row: Dict[str, Any]) -> str:
    parts = [
        f"{row['shape']:>8}: (a) reference {row['a_tok_s']:8.0f} tok/s [{row['ref_tokens']} tokens, +{row['a_mb']:.0f} MB]",
        f"(b) ElmoBiLM cold {row['b_cold_tok_s']:8.0f} warm {row['b_warm_tok_s']:8.0f} tok/s "
        f"[+{row['b_mb']:.0f} MB]  (b)/(a) cold {row['ratio_cold']:.1f}x warm {row['ratio_warm']:.1f}x  "
        f"max|a-b| {row['b_diff']:.1e}",
        f"(b)/(a) in the main thread's CPU time (load-proof with --threads 1): cold {row['cpu_ratio_cold']:.1f}x "
        f"warm {row['cpu_ratio_warm']:.1f}x",
        f"(b) whole file [{row['all_tokens']} tokens] cold {row['b_all_cold_tok_s']:.0f} warm {row['b_all_warm_tok_s']:.0f} "
        f"tok/s [+{row['b_all_mb']:.0f} MB]; LSTM products at {row['lstm_gflop_s_ref_tokens']:.0f} (reference's "
        f"tokens) / {row['lstm_gflop_s']:.0f} (whole file) GFLOP/s, warm, beside torch.mm at {row['gemm_gflop_s']:.0f}",
    ]
    if "p_warm_tok_s" in row:
        parts.append(
            f"(b) {row['precision']} cold {row['p_cold_tok_s']:.0f} warm {row['p_warm_tok_s']:.0f} tok/s "
            f"({row['p_ratio']:.2f}x float32; whole file warm {row['p_all_warm_tok_s']:.0f}, {row['p_all_ratio']:.2f}x), "
            f"max|a-b| {row['p_diff']:.1e}, min token cosine to float32 by layer "
            + " ".join(f"{c:.5f}" for c in row["p_min_cos"])
        )
    if "c_tok_s" in row:
        parts.append(f"(c) elmo in nlp.pipe {row['c_tok_s']:.0f} tok/s, max|a-c| {row['c_diff']:.1e}")
    else:
        parts.append("(c) elmo component: not run" + (" (CPU only)" if row.get("device") == "cuda" else ""))
    return "\n          ".join(parts)


if __name__ == "__main__":
    main()
