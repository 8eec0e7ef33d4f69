"""The pretraining loop: Adam with linear warm-up and decay, gradient clipping,
progress lines, periodic held-out perplexity, checkpoints, exact resume,
save-on-signal, an optional moving average of the weights, and
DistributedDataParallel under torchrun.

Output directory layout: the model in the project's own format (config.json,
model.safetensors, vocab.txt: ``ElmoBiLM.load(output_dir)`` works, rewritten at
every checkpoint; with ``ema_decay`` the moving average of the weights),
``checkpoint.pt`` (everything a resume needs) and ``metrics.jsonl`` (one line per
log or evaluation).

The parts live beside it: the loss and evaluation (``loss``), checkpoints
(``checkpoint``), signals (``signals``), agreement between ranks (``distributed``)
and the batch stream (``stream``).
"""
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..bilm import ElmoBiLM
from .batches import cut_sentences, make_batch
from .checkpoint import CHECKPOINT, load_checkpoint, rng_states, save_checkpoint, set_rng_states
from .config import resume_changes
from .corpus import build_vocab, target_map
from .data import load_corpus
from .distributed import any_rank, rank_world, sum_over_ranks
from .init import init_is_gone, load_init_weights, read_init, settle_config, settle_from_checkpoint
from .loss import BiLMLoss, batch_to, evaluate
from .memory import host_memory
from .output import METRICS_NAME, truncate_metrics
from .signals import StopSignals
from .stream import BatchStream

__all__ = ["CHECKPOINT", "BiLMLoss", "Trainer", "TrainingDiverged", "evaluate", "learning_rate"]


class TrainingDiverged(ValueError):
    """The loss, gradient or weights stopped being finite; nothing more is saved."""


def learning_rate(step: int, training: Dict[str, Any]) -> float:
    """Linear warm-up from 0 over warmup_steps, then linear decay to lr * final_lr_ratio at max_steps."""
    lr, warmup, total = float(training["lr"]), int(training["warmup_steps"]), int(training["max_steps"])
    scale = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    decay = 1.0 - (1.0 - float(training["final_lr_ratio"])) * min(1.0, step / max(1, total))
    return lr * scale * decay


def cpu_has_native(amp: str) -> bool:
    """Whether oneDNN, which runs torch's CPU autocast products, supports the dtype ``amp`` ("bf16"
    or "fp16") on this CPU; without it (an AVX2-only x86 CPU, say) they are emulated, far slower."""
    check = torch.ops.mkldnn._is_mkldnn_bf16_supported if amp == "bf16" else torch.ops.mkldnn._is_mkldnn_fp16_supported
    return bool(check())


def _adam(params: List[nn.Parameter], lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam over ``params``: torch's fused kernel (one pass over each parameter; at the `small`
    shape the single-tensor Adam took about 95 ms a step on one CPU thread, the fused one 14) on
    CUDA, and on the CPU from torch 2.4; the single-tensor one elsewhere."""
    if device.type in ("cpu", "cuda"):
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except RuntimeError:  # torch before 2.4 has no fused Adam on the CPU
            pass
    return torch.optim.Adam(params, lr=lr)


class Trainer:
    """Runs (or resumes) a pretraining run described by a validated config."""

    def __init__(self, config: Dict[str, Any], output_dir: Path, log=print) -> None:
        self.config = config
        self.training = config["training"]
        self.output_dir = Path(output_dir)
        self.log = log
        self.rank, self.world = rank_world()
        self.stop_requested = False  # all ranks agreed to stop
        self.signal_received = False  # set by the SIGINT/SIGTERM handler only
        if int(self.training["threads"]) > 0:
            torch.set_num_threads(int(self.training["threads"]))
        device = self.training["device"]
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("training.device is 'cuda' but torch finds no CUDA device here; use 'auto' or 'cpu'")
        if device == "cuda":  # torchrun's LOCAL_RANK: this process's GPU on its machine
            local_rank = int(os.environ.get("LOCAL_RANK", self.rank % max(1, torch.cuda.device_count())))
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        amp = self.training["amp"]
        if self.device.type == "cpu" and amp != "none" and not cpu_has_native(amp):
            self.log(f"Warning: training.amp {amp!r} on a CPU where oneDNN has no {amp} support (torch reports "
                     f"{torch.backends.cpu.get_cpu_capability()}): the products are emulated and can be many times "
                     "slower than float32; use training.amp 'none' on this machine")
        self.log(f"Loading the training text {config['paths']['train']}")
        self.train = load_corpus(Path(config["paths"]["train"]), progress=self.rank == 0)
        if config["paths"].get("dev"):
            self.log(f"Loading the held-out text {config['paths']['dev']}")
        self.dev = load_corpus(Path(config["paths"]["dev"]), progress=self.rank == 0) if config["paths"].get("dev") else None
        # continued pretraining (paths.init): shapes from the init model; its vocabulary and
        # softmax kept unless it has none or [vocab] from_init = false (see pretrain/init.py).
        # A resumed run takes them from its checkpoint, which holds everything the init model
        # gave it, without reading (or downloading) the init model again.
        init_path, checkpoint = config["paths"].get("init"), self.output_dir / CHECKPOINT
        init, keep_softmax, vocab = None, False, None
        saved = load_checkpoint(checkpoint, mmap=True) if init_path and checkpoint.exists() else None
        gone = saved is not None and init_is_gone(init_path)
        # the same init as the checkpoint's run; older checkpoints do not say whether its softmax was kept
        same = saved is not None and "init_softmax_kept" in saved and saved["config"]["paths"].get("init") == init_path
        if gone or same:
            # checkpoints written before the flag existed: the softmax was kept unless from_init = false
            keep_softmax = bool(saved.get("init_softmax_kept", saved["config"]["vocab"].get("from_init", True)))
            settle_from_checkpoint(config, saved["config"], f"paths.init {init_path}", keep_softmax)
            vocab = list(saved["vocab"]) if keep_softmax else None
            kept = "shapes" + (", softmax and vocabulary" if keep_softmax else "")
            log(f"paths.init {init_path} is gone; the run resumes from {checkpoint}, which holds its weights and {kept}"
                if gone else f"Resuming: the {kept} that paths.init {init_path} gave the run come from {checkpoint}")
        elif init_path:
            init = read_init(init_path)
            keep_softmax = settle_config(config, init, log)
            vocab = list(init.vocab) if keep_softmax else None
        del saved
        self.init_softmax_kept = keep_softmax  # saved with the checkpoint, for a resume without the init files
        self.vocab = vocab if vocab is not None else build_vocab(self.train, int(config["vocab"]["size"]))
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
        n_params = sum(p.numel() for p in self.bilm.parameters())
        self.log(f"{self.train.n_tokens:,} training tokens, {len(self.vocab):,} output words, "
                 f"{n_params / 1e6:.1f}M parameters on {self.device}")
        self.loss = BiLMLoss(self.bilm, float(self.training["dropout"]))
        self.module: nn.Module = self.loss
        if self.world > 1:
            self.module = nn.parallel.DistributedDataParallel(self.loss, find_unused_parameters=True)
        self.optimizer = _adam(list(self.bilm.parameters()), float(self.training["lr"]), self.device)
        # [training] ema_decay: a moving average of the weights (torch's AveragedModel), updated
        # after every step; the optimizer trains the raw weights, the model files hold the average
        decay = float(self.training["ema_decay"])
        self.ema = AveragedModel(self.bilm, multi_avg_fn=get_ema_multi_avg_fn(decay)) if decay > 0 else None
        if self.ema is not None:
            self.log(f"Keeping a moving average of the weights (decay {decay}): the model files and the "
                     "held-out perplexity use it")
        # fp16 autocast needs loss scaling (gradients underflow otherwise); a no-op elsewhere.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.training["amp"] == "fp16")
        self.step = 0
        self.stream = BatchStream(self.lengths, int(self.training["batch_tokens"]), int(self.training["seed"]))
        self.tokens_seen = 0

    # State -----------------------------------------------------------------------

    def state(self) -> Dict[str, Any]:
        return {
            "model": self.bilm.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "step": self.step, "epoch": self.epoch, "batch_index": self.batch_index,
            "tokens_seen": self.tokens_seen,
            "rng": rng_states(),
            "config": self.config, "vocab": self.vocab, "init_softmax_kept": self.init_softmax_kept,
        }

    def resume(self) -> bool:
        path = self.output_dir / CHECKPOINT
        if not path.exists():
            return False
        state = load_checkpoint(path)
        changed = resume_changes(state["config"], self.config)
        if state["vocab"] != self.vocab and not any(c.startswith("vocab.") for c in changed):
            changed.append("the vocabulary (built from paths.train)")
        if changed:
            raise ValueError(f"{path}: this run's config differs from the checkpoint's in {', '.join(changed)}; "
                             "a resumed run must keep them (max_steps, intervals, lr may change): restore them, "
                             "or use another --output")
        try:
            self.bilm.load_state_dict(state["model"])
            # the Adam implementation stays this run's (``_adam``), not the one the checkpoint records
            chosen = [(group["fused"], group["foreach"]) for group in self.optimizer.param_groups]
            self.optimizer.load_state_dict(state["optimizer"])
            for group, (fused, foreach) in zip(self.optimizer.param_groups, chosen):
                group["fused"], group["foreach"] = fused, foreach
        except (RuntimeError, ValueError, KeyError) as err:
            raise ValueError(f"{path}: the checkpoint does not fit this model: {str(err).splitlines()[0]}") from None
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if self.ema is not None and state.get("ema") is not None:
            try:
                self.ema.load_state_dict(state["ema"])
            except (RuntimeError, ValueError, KeyError) as err:
                raise ValueError(f"{path}: the checkpoint's moving average of the weights does not fit this model: "
                                 f"{str(err).splitlines()[0]}") from None
        elif self.ema is not None:
            self.log("The checkpoint has no moving average of the weights: it starts from the resumed weights")
        elif state.get("ema") is not None:
            self.log("training.ema_decay is 0: the checkpoint's moving average of the weights is dropped, "
                     "the model files now hold the trained weights")
        self.step = state["step"]
        self.stream.seek(state["epoch"], state["batch_index"])
        self.tokens_seen = state["tokens_seen"]
        set_rng_states(state["rng"])
        if self.rank == 0:
            # the model files and metrics as of the checkpoint (a killed run may have got past it)
            self.output_model.write_files(self.output_dir, vocab=self.vocab)
            truncate_metrics(self.output_dir, self.step)
        self.log(f"Resumed from {path} at step {self.step}")
        return True

    def save(self) -> None:
        if self.rank != 0:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if not all(bool(torch.isfinite(p).all()) for p in self.bilm.parameters()):
            raise TrainingDiverged(f"the weights are not finite at step {self.step}: the run diverged; "
                                   f"{self._kept()} (lower training.lr or raise warmup_steps)")
        # model files first, then the checkpoint: a resume rewrites the model files from it
        self.output_model.write_files(self.output_dir, vocab=self.vocab)
        save_checkpoint(self.state(), self.output_dir / CHECKPOINT)

    @property
    def output_model(self) -> ElmoBiLM:
        """The weights that the model files hold and the held-out perplexity measures: the
        moving average once it has one step (``ema_decay`` > 0), else the trained weights."""
        if self.ema is not None and int(self.ema.n_averaged) > 0:
            return self.ema.module
        return self.bilm

    def _kept(self) -> str:
        path = self.output_dir / CHECKPOINT
        if path.exists():
            return f"the last good checkpoint is kept in {path}"
        return "no checkpoint was written"

    def _metrics(self, record: Dict[str, Any]) -> None:
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            with (self.output_dir / METRICS_NAME).open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def _should_stop(self) -> bool:
        """True once any rank got SIGINT/SIGTERM; all ranks agree, so that none is left
        waiting alone in a collective."""
        # The signal handler may run between any two bytecodes, also while the collective
        # below runs: it sets only ``signal_received``, which nothing overwrites, so a signal
        # that arrives after this step's vote is counted at the next one.
        self.stop_requested = any_rank(self.stop_requested or self.signal_received, self.device)
        return self.stop_requested

    # Loop ------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.stream.epoch

    @property
    def batch_index(self) -> int:
        return self.stream.batch_index

    def _next_batch(self) -> np.ndarray:
        return next(self.stream)

    def train_step(self, sentences: np.ndarray) -> Tuple[float, int]:
        """One optimizer step on a global batch; returns (summed NLL on this rank, global targets)."""
        n_global = 2 * int((self.lengths[sentences] + 1).sum())
        mine = sentences[self.rank :: self.world]
        batch = batch_to(make_batch(self.train, self.offsets, mine, self.char_table, self.train_targets), self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.training)
        self.module.train()
        amp = self.training["amp"]
        with torch.autocast(self.device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                            enabled=amp != "none"):
            nll_f, nll_b = self.module(batch)
        total = nll_f + nll_b
        if any_rank(not bool(torch.isfinite(total.detach())), self.device):
            raise TrainingDiverged(f"the training loss is not finite at step {self.step + 1}: the run diverged; "
                                   f"{self._kept()} (lower training.lr or raise warmup_steps)")
        # DDP averages gradients over ranks: scale so the result is the global-batch mean.
        self.scaler.scale(total * (self.world / n_global)).backward()
        self.scaler.unscale_(self.optimizer)  # clip the true gradient
        norm = torch.nn.utils.clip_grad_norm_(self.bilm.parameters(), float(self.training["grad_clip"]))
        if not self.scaler.is_enabled() and not bool(torch.isfinite(norm)):
            raise TrainingDiverged(f"the gradient is not finite at step {self.step + 1}: the run diverged; "
                                   f"{self._kept()} (lower training.lr or raise warmup_steps)")
        self.scaler.step(self.optimizer)  # skipped when an fp16 gradient overflowed
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update_parameters(self.bilm)
        self.step += 1
        return float(total.detach()), n_global

    def run(self) -> Dict[str, Any]:
        """Resume if there is a checkpoint, train to max_steps (or a signal), save."""
        self.resume()
        with StopSignals(self._request_stop):
            return self._train()

    def _request_stop(self) -> None:
        self.signal_received = True

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
            if self.step % int(self.training["log_every"]) == 0 or self.step in (max_steps, start_step + 1):
                elapsed = time.perf_counter() - t0
                rate = window_tokens / max(elapsed, 1e-9)
                per_step = (time.perf_counter() - run_start) / max(1, self.step - start_step)
                loss = sum_over_ranks(window_loss, self.device) / max(1, window_count)  # the global batches' mean
                record = {"step": self.step, "tokens_seen": self.tokens_seen, "loss": loss,
                          "ppl": math.exp(min(loss, 50.0)), "tokens_per_s": rate, "lr": learning_rate(self.step - 1, self.training),
                          **host_memory()}
                self._metrics(record)
                if self.rank == 0:
                    eta = per_step * (max_steps - self.step)
                    resident = f"  {record['resident_gb']:.1f} GB resident" if "resident_gb" in record else ""
                    self.log(f"step {self.step}/{max_steps}  loss {loss:.3f}  ppl {record['ppl']:.1f}  "
                             f"{rate:,.0f} tokens/s  lr {record['lr']:.2e}  ETA {eta / 60:.1f} min{resident}")
                window_loss, window_count, window_tokens, t0 = 0.0, 0, 0, time.perf_counter()
            if self.dev is not None and (self.step % int(self.training["eval_every"]) == 0 or self.step == max_steps):
                n_eval, model = int(self.training["eval_sentences"]), self.output_model
                dev_ppl = evaluate(model, self.dev, dev_targets, n_eval, device=self.device)
                record, note = {"step": self.step, "dev_ppl": dev_ppl}, ""
                if model is not self.bilm:  # also the trained weights, to see what the average gives
                    record["dev_ppl_trained"] = evaluate(self.bilm, self.dev, dev_targets, n_eval, device=self.device)
                    note = f" (moving average of the weights; {record['dev_ppl_trained']:.1f} without)"
                self._metrics(record)
                if self.rank == 0:
                    self.log(f"step {self.step}: held-out perplexity {dev_ppl:.1f}{note}")
            if self.step % int(self.training["checkpoint_every"]) == 0:
                self.save()
        self.save()
        if self.stop_requested and self.rank == 0:
            self.log(f"Stopped by signal at step {self.step}; checkpoint saved, run again to resume.")
        return {"step": self.step, "dev_ppl": dev_ppl, "tokens_seen": self.tokens_seen, "stopped": self.stop_requested}
