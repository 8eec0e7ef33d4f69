"""Inference speed of ELMo: the step-by-step reference vs ``ElmoBiLM`` vs the ``elmo``
component, in one process on the same CoNLL-2003 dev sentences.

    python benchmarks/bench_inference.py --shapes small,original --threads 2

Prints one table row per shape: tokens/s of (a) the reference, (b) ``ElmoBiLM.
embed_sentences`` with a cold and a warm character-CNN cache, (c) the ``elmo``
component in ``nlp.pipe``; the ratios (b)/(a); the peak memory each added; the max
abs difference from (a). Weights are random, in the published shapes (``tiny`` is
the test fixture's). The reference runs on the first sentences of the file up to
``--ref-tokens`` tokens; (b) and (c) are timed on the same sentences and, for
tokens/s at scale, on up to ``--max-sentences``.
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
    """Random weights in a published shape, or the tiny test fixture."""
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


def lstm_flops_per_token(model: ElmoBiLM) -> float:
    """Multiply-adds x 2 of the LSTM layers per token (both directions)."""
    lstm = model.options["lstm"]
    C, P, L = lstm["dim"], lstm["projection_dim"], lstm["n_layers"]
    return 2.0 * L * 2 * (P * 4 * C * 2 + C * P)


def gemm_flops() -> float:
    """Measured float32 matrix-product FLOP/s (2048^3, best of 5)."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    best = min(_timed(lambda: a @ b)[1] for _ in range(5))
    return 2 * 2048**3 / best


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


def _timed(fn: Callable[[], Any]) -> Tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def max_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b) if x.size)


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


def bench_shape(shape: str, sentences: List[List[str]], ref_tokens: int, bf16: bool) -> Dict[str, Any]:
    model = make_model(shape)
    row: Dict[str, Any] = {"shape": shape}
    subset: List[List[str]] = []
    for sent in sentences:
        if subset and sum(map(len, subset)) + len(sent) > ref_tokens:
            break
        subset.append(sent)
    n_sub = sum(map(len, subset))
    n_all = sum(map(len, sentences))
    row["ref_tokens"], row["all_tokens"] = n_sub, n_all

    reference = ReferenceElmo(model.options, model.state_dict())
    with PeakRss() as mem:
        expected, seconds = _timed(lambda: reference.embed_sentences(subset, batch_size=32))
    row["a_tok_s"], row["a_mb"] = n_sub / seconds, mem.mb
    del reference

    model.set_token_cache(50_000)
    with PeakRss() as mem:
        ours, seconds = _timed(lambda: model.embed_sentences(subset))
    row["b_cold_tok_s"], row["b_mb"] = n_sub / seconds, mem.mb
    ours, seconds = _timed(lambda: model.embed_sentences(subset))
    row["b_warm_tok_s"] = n_sub / seconds
    row["b_diff"] = max_diff(expected, ours)
    row["ratio_cold"] = row["b_cold_tok_s"] / row["a_tok_s"]
    row["ratio_warm"] = row["b_warm_tok_s"] / row["a_tok_s"]

    model.set_token_cache(50_000)
    with PeakRss() as mem:
        _, seconds = _timed(lambda: model.embed_sentences(sentences))
    row["b_all_cold_tok_s"], row["b_all_mb"] = n_all / seconds, mem.mb
    _, seconds = _timed(lambda: model.embed_sentences(sentences))
    row["b_all_warm_tok_s"] = n_all / seconds
    row["lstm_gflop_s"] = lstm_flops_per_token(model) * row["b_all_warm_tok_s"] / 1e9

    if bf16:
        half = make_model(shape).to(torch.bfloat16)
        half.embed_sentences(subset)
        out, seconds = _timed(lambda: half.embed_sentences(subset))
        row["bf16_warm_tok_s"], row["bf16_diff"] = n_sub / seconds, max_diff(expected, out)

    piped = run_pipe(model, subset)
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
    parser.add_argument("--bf16", action="store_true", help="also time ElmoBiLM in bfloat16 and report its error")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    sentences = read_conll(args.data)
    if args.max_sentences:
        sentences = sentences[: args.max_sentences]
    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} tokens; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    peak = gemm_flops()
    print(f"float32 GEMM 2048^3: {peak / 1e9:.0f} GFLOP/s")
    default_ref = {"tiny": 4000, "small": 4000, "medium": 2000, "original": 1000}
    rows = []
    for shape in args.shapes.split(","):
        row = bench_shape(shape, sentences, args.ref_tokens or default_ref.get(shape, 1000), args.bf16)
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
        f"(b) whole file [{row['all_tokens']} tokens] cold {row['b_all_cold_tok_s']:.0f} warm {row['b_all_warm_tok_s']:.0f} "
        f"tok/s [+{row['b_all_mb']:.0f} MB]; LSTM at {row['lstm_gflop_s']:.0f} GFLOP/s of {row['gemm_gflop_s']:.0f} GEMM",
    ]
    if "bf16_warm_tok_s" in row:
        parts.append(f"(b) bf16 warm {row['bf16_warm_tok_s']:.0f} tok/s, max|a-b| {row['bf16_diff']:.1e}")
    if "c_tok_s" in row:
        parts.append(f"(c) elmo in nlp.pipe {row['c_tok_s']:.0f} tok/s, max|a-c| {row['c_diff']:.1e}")
    else:
        parts.append("(c) elmo component: not available")
    return "\n          ".join(parts)


if __name__ == "__main__":
    main()
