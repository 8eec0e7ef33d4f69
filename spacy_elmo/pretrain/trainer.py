"""The pretraining loop: Adam with linear warm-up and decay, gradient clipping,
progress lines, periodic held-out perplexity, atomic checkpoints, exact resume,
save-on-signal, and DistributedDataParallel under torchrun.

Output directory layout: the model in the project's own format (config.json,
model.safetensors, vocab.txt: ``ElmoBiLM.load(output_dir)`` works, rewritten at
every checkpoint), ``checkpoint.pt`` (everything a resume needs) and
``metrics.jsonl`` (one line per log or evaluation).
"""
import json
import math
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..bilm import ElmoBiLM
from .batches import LMBatch, cut_sentences, epoch_batches, make_batch
from .corpus import Corpus, build_vocab, target_map
from .data import load_corpus
from .init import load_init_weights, read_init, settle_config
from .lm_forward import fast_lm_loss

CHECKPOINT = "checkpoint.pt"


class BiLMLoss(nn.Module):
    """Summed forward and backward negative log-likelihoods of a batch (shared softmax)."""

    def __init__(self, bilm: ElmoBiLM, dropout: float) -> None:
        super().__init__()
        self.bilm = bilm
        self.dropout = dropout

    def forward(self, batch: LMBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        if batch.type_char_ids is not None:
            return fast_lm_loss(self.bilm, batch, self.dropout, self.training)
        top = self.bilm.forward_with_boundaries(batch.char_ids, batch.lengths)[-1]
        P = top.shape[1] // 2
        h_fwd = F.dropout(top[batch.fwd_rows, :P], self.dropout, self.training)
        h_bwd = F.dropout(top[batch.bwd_rows, P:], self.dropout, self.training)
        softmax = self.bilm.softmax
        assert softmax is not None
        # The softmax in float32 also under amp (AdaptiveLogSoftmaxWithLoss mixes dtypes there).
        with torch.autocast(top.device.type, enabled=False):
            return softmax.nll(h_fwd.float(), batch.fwd_targets), softmax.nll(h_bwd.float(), batch.bwd_targets)


def learning_rate(step: int, training: Dict[str, Any]) -> float:
    lr, warmup, total = float(training["lr"]), int(training["warmup_steps"]), int(training["max_steps"])
    scale = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    decay = 1.0 - (1.0 - float(training["final_lr_ratio"])) * min(1.0, step / max(1, total))
    return lr * scale * decay


def _rank_world() -> Tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _atomic_torch_save(obj: Any, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def evaluate(bilm: ElmoBiLM, corpus: Corpus, targets: np.ndarray, max_sentences: int = 0,
             batch_tokens: int = 4096, device: Optional[torch.device] = None) -> float:
    """Held-out perplexity: exp of the mean forward and backward NLL per predicted token
    (full softmax over the output vocabulary; </S> and <S> once per sentence)."""
    offsets = corpus.offsets
    n = corpus.n_sentences if not max_sentences else min(max_sentences, corpus.n_sentences)
    lengths = np.diff(offsets)[:n]
    order = np.argsort(-lengths, kind="stable")
    char_table = corpus.char_table(bilm.max_chars)
    loss = BiLMLoss(bilm, 0.0).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        start = 0
        while start < n:
            cost = np.cumsum(lengths[order[start:]] + 2)
            end = start + max(1, int(np.searchsorted(cost, batch_tokens, side="right")))
            batch = _to(make_batch(corpus, offsets, order[start:end], char_table, targets), device)
            nll_f, nll_b = loss(batch)
            total += float(nll_f) + float(nll_b)
            count += batch.n_targets
            start = end
    return math.exp(total / max(1, count))


def _to(batch: LMBatch, device: Optional[torch.device]) -> LMBatch:
    if device is None or device.type == "cpu":
        return batch
    return LMBatch(batch.char_ids.to(device), batch.lengths, batch.fwd_rows.to(device),
                   batch.fwd_targets.to(device), batch.bwd_rows.to(device), batch.bwd_targets.to(device))


class Trainer:
    """Runs (or resumes) a pretraining run described by a validated config."""

    def __init__(self, config: Dict[str, Any], output_dir: Path, log=print) -> None:
        self.config = config
        self.training = config["training"]
        self.output_dir = Path(output_dir)
        self.log = log
        self.rank, self.world = _rank_world()
        self.stop_requested = False
        if int(self.training["threads"]) > 0:
            torch.set_num_threads(int(self.training["threads"]))
        device = self.training["device"]
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":  # torchrun's LOCAL_RANK: this process's GPU on its machine
            local_rank = int(os.environ.get("LOCAL_RANK", self.rank % max(1, torch.cuda.device_count())))
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.train = load_corpus(Path(config["paths"]["train"]))
        self.dev = load_corpus(Path(config["paths"]["dev"])) if config["paths"].get("dev") else None
        # continued pretraining (paths.init): shapes from the init model; its vocabulary and
        # softmax kept unless it has none or [vocab] from_init = false (see pretrain/init.py)
        init = read_init(config["paths"]["init"]) if config["paths"].get("init") else None
        keep_softmax = settle_config(config, init, log) if init is not None else False
        if keep_softmax:
            self.vocab = list(init.vocab)
        else:
            self.vocab = build_vocab(self.train, int(config["vocab"]["size"]))
        self.train_targets = target_map(self.train, self.vocab)
        self.offsets = cut_sentences(self.train, int(self.training["max_sentence_length"]))
        self.lengths = np.diff(self.offsets)
        torch.manual_seed(int(self.training["seed"]))
        self.bilm = ElmoBiLM(config["model"], vocab_size=len(self.vocab), softmax_options=config["softmax"])
        if init is not None:
            load_init_weights(self.bilm, init, keep_softmax)
            del init
        self.bilm.to(self.device)
        self.char_table = self.train.char_table(self.bilm.max_chars)
        self.loss = BiLMLoss(self.bilm, float(self.training["dropout"]))
        self.module: nn.Module = self.loss
        if self.world > 1:
            self.module = nn.parallel.DistributedDataParallel(self.loss, find_unused_parameters=True)
        self.optimizer = torch.optim.Adam(self.bilm.parameters(), lr=float(self.training["lr"]))
        # fp16 autocast needs loss scaling (gradients underflow otherwise); a no-op elsewhere.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.training["amp"] == "fp16")
        self.step, self.epoch, self.batch_index = 0, 0, 0
        self.tokens_seen = 0

    # State -----------------------------------------------------------------------

    def state(self) -> Dict[str, Any]:
        return {
            "model": self.bilm.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step, "epoch": self.epoch, "batch_index": self.batch_index,
            "tokens_seen": self.tokens_seen,
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
            "config": self.config, "vocab": self.vocab,
        }

    def resume(self) -> bool:
        path = self.output_dir / CHECKPOINT
        if not path.exists():
            return False
        state = torch.load(path, map_location=self.device, weights_only=False)
        if state["vocab"] != self.vocab or state["config"]["model"] != self.config["model"]:
            raise ValueError(f"{path}: the checkpoint's model or vocabulary differs from the config; "
                             "use another --output or delete the checkpoint")
        self.bilm.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.batch_index = state["step"], state["epoch"], state["batch_index"]
        self.tokens_seen = state["tokens_seen"]
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.log(f"Resumed from {path} at step {self.step}")
        return True

    def save(self) -> None:
        if self.rank != 0:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        _atomic_torch_save(self.state(), self.output_dir / CHECKPOINT)
        self.bilm.write_files(self.output_dir, vocab=self.vocab)

    def _metrics(self, record: Dict[str, Any]) -> None:
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            with (self.output_dir / "metrics.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def _sum_over_ranks(self, value: float) -> float:
        if self.world == 1:
            return value
        total = torch.tensor([value], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(total)
        return float(total.item())

    def _should_stop(self) -> bool:
        """True once any rank got SIGINT/SIGTERM; all ranks agree, so that none is left
        waiting alone in a collective."""
        if self.world == 1:
            return self.stop_requested
        flag = torch.tensor([float(self.stop_requested)], device=self.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        self.stop_requested = bool(flag.item())
        return self.stop_requested

    # Loop ------------------------------------------------------------------------

    def _install_signals(self) -> Dict[int, Any]:
        """SIGINT/SIGTERM: finish the step, save, stop. A second one acts as it would
        have without the trainer (e.g. Ctrl-C twice quits at once). Returns the
        previous handlers (none outside the main thread, where Python allows no handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, frame: Any) -> None:
            if self.stop_requested:
                signal.signal(signum, previous[signum])
                signal.raise_signal(signum)
            self.stop_requested = True

        for sig in previous:
            signal.signal(sig, handler)
        return previous

    def _next_batch(self) -> np.ndarray:
        while True:
            batches = epoch_batches(self.lengths, int(self.training["batch_tokens"]), int(self.training["seed"]), self.epoch)
            if self.batch_index < len(batches):
                batch = batches[self.batch_index]
                self.batch_index += 1
                return batch
            self.epoch, self.batch_index = self.epoch + 1, 0

    def train_step(self, sentences: np.ndarray) -> Tuple[float, int]:
        """One optimizer step on a global batch; returns (summed NLL on this rank, global targets)."""
        n_global = 2 * int((self.lengths[sentences] + 1).sum())
        mine = sentences[self.rank :: self.world]
        batch = _to(make_batch(self.train, self.offsets, mine, self.char_table, self.train_targets), self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.training)
        self.module.train()
        amp = self.training["amp"]
        with torch.autocast(self.device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                            enabled=amp != "none"):
            nll_f, nll_b = self.module(batch)
        total = nll_f + nll_b
        # DDP averages gradients over ranks: scale so the result is the global-batch mean.
        self.scaler.scale(total * (self.world / n_global)).backward()
        self.scaler.unscale_(self.optimizer)  # clip the true gradient
        torch.nn.utils.clip_grad_norm_(self.bilm.parameters(), float(self.training["grad_clip"]))
        self.scaler.step(self.optimizer)  # skipped when an fp16 gradient overflowed
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return float(total.detach()), n_global

    def run(self) -> Dict[str, Any]:
        """Resume if there is a checkpoint, train to max_steps (or a signal), save."""
        self.resume()
        previous = self._install_signals()
        try:
            return self._train()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _train(self) -> Dict[str, Any]:
        max_steps = int(self.training["max_steps"])
        dev_targets = target_map(self.dev, self.vocab) if self.dev is not None else None
        window_loss, window_count, window_tokens, t0 = 0.0, 0, 0, time.perf_counter()
        run_start, start_step = time.perf_counter(), self.step
        dev_ppl = None
        while self.step < max_steps and not self._should_stop():
            sentences = self._next_batch()
            nll, n_global = self.train_step(sentences)
            n_tokens = int(self.lengths[sentences].sum())
            self.tokens_seen += n_tokens
            window_loss, window_count, window_tokens = window_loss + nll, window_count + n_global, window_tokens + n_tokens
            if self.step % int(self.training["log_every"]) == 0 or self.step == max_steps:
                elapsed = time.perf_counter() - t0
                rate = window_tokens / max(elapsed, 1e-9)
                per_step = (time.perf_counter() - run_start) / max(1, self.step - start_step)
                loss = self._sum_over_ranks(window_loss) / max(1, window_count)  # the global batches' mean
                record = {"step": self.step, "tokens_seen": self.tokens_seen, "loss": loss,
                          "ppl": math.exp(min(loss, 50.0)), "tokens_per_s": rate, "lr": learning_rate(self.step - 1, self.training)}
                self._metrics(record)
                if self.rank == 0:
                    eta = per_step * (max_steps - self.step)
                    self.log(f"step {self.step}/{max_steps}  loss {loss:.3f}  ppl {record['ppl']:.1f}  "
                             f"{rate:,.0f} tokens/s  lr {record['lr']:.2e}  ETA {eta / 60:.1f} min")
                window_loss, window_count, window_tokens, t0 = 0.0, 0, 0, time.perf_counter()
            if self.dev is not None and (self.step % int(self.training["eval_every"]) == 0 or self.step == max_steps):
                dev_ppl = evaluate(self.bilm, self.dev, dev_targets, int(self.training["eval_sentences"]), device=self.device)
                self._metrics({"step": self.step, "dev_ppl": dev_ppl})
                if self.rank == 0:
                    self.log(f"step {self.step}: held-out perplexity {dev_ppl:.1f}")
            if self.step % int(self.training["checkpoint_every"]) == 0:
                self.save()
        self.save()
        if self.stop_requested and self.rank == 0:
            self.log(f"Stopped by signal at step {self.step}; checkpoint saved, run again to resume.")
        return {"step": self.step, "dev_ppl": dev_ppl, "tokens_seen": self.tokens_seen, "stopped": self.stop_requested}
