"""Pretraining in several processes over gloo on the CPU: torch.multiprocessing and the
documented torchrun entry point agree with one process, and a SIGTERM to torchrun stops
every rank at one step with a checkpoint that resumes exactly."""
import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from conftest import REPO, TINY_PRETRAIN, tiny_config
from spacy_elmo.pretrain.trainer import Trainer


class OddSteps(Trainer):
    """Every other global batch is a single sentence, so one rank gets no sentence at all
    (as happens with the short last batch of a length bucket)."""

    def _next_batch(self):
        batch = super()._next_batch()
        return batch[:1] if self.step % 2 == 0 else batch


def _ddp_worker(rank: int, world: int, cfg, out: str, init_file: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        trainer = OddSteps(cfg, Path(out) / f"ddp{rank}", log=lambda s: None)
        trainer.run()
        torch.save(trainer.bilm.state_dict(), Path(out) / f"rank{rank}.pt")
        del trainer
    finally:
        gc.collect()  # the trainer and its DDP module before the group (as distributed_from_env does)
        torch.distributed.destroy_process_group()


def test_distributed_gloo_matches_single_process(wikitext_slice, tmp_path):
    cfg = tiny_config(wikitext_slice, **{"training.max_steps": 4, "training.dropout": 0.0,
                                         "training.checkpoint_every": 1000, "training.eval_every": 1000})
    torch.multiprocessing.spawn(_ddp_worker, args=(2, cfg, str(tmp_path), str(tmp_path / "init")), nprocs=2)
    single = OddSteps(cfg, tmp_path / "single", log=lambda s: None)
    single.run()
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    for name, value in single.bilm.state_dict().items():
        torch.testing.assert_close(r0[name], r1[name], rtol=0, atol=0)
        torch.testing.assert_close(r0[name], value, rtol=1e-4, atol=1e-4)


def test_torchrun_cli_matches_single_process(wikitext_slice, tmp_path):
    """The documented multi-process entry point: torchrun + the pretrain command (gloo on CPU),
    with a moving average of the weights (every rank keeps the same one)."""
    steps = 3
    overrides = ["--paths.train", str(wikitext_slice / "train.npz"), "--paths.dev", "null",
                 "--training.max_steps", str(steps), "--training.log_every", "1", "--training.threads", "1",
                 "--training.dropout", "0.0", "--training.ema_decay", "0.5"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "spacy_elmo", "pretrain", str(TINY_PRETRAIN), "--output", str(tmp_path / "ddp"), *overrides]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count(f"Done at step {steps}") == 1  # rank 0 only
    cfg = tiny_config(wikitext_slice, **{"paths.dev": None, "training.max_steps": steps, "training.dropout": 0.0,
                                         "training.ema_decay": 0.5})
    single = Trainer(cfg, tmp_path / "single", log=lambda s: None)
    single.run()
    ddp = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=False)
    assert ddp["step"] == steps
    for name, value in single.bilm.state_dict().items():
        torch.testing.assert_close(ddp["model"][name], value, rtol=1e-4, atol=1e-4)
    for name, value in single.ema.state_dict().items():
        torch.testing.assert_close(ddp["ema"][name], value, rtol=1e-4, atol=1e-4)


def test_torchrun_sigterm_stops_all_ranks_at_one_step(wikitext_slice, tmp_path):
    """SIGTERM to torchrun reaches every rank: both stop cleanly at the same step, rank 0
    saves, and resuming from that checkpoint ends bit for bit where an uninterrupted run
    ends (2 CPU ranks over gloo; a small vocabulary and batch keep it quick). A constant
    learning rate after warm-up (final_lr_ratio 1) lets the runs differ in max_steps: the
    stopped run's is out of reach, however late the signal arrives."""

    def torchrun(out: Path, report: Path, steps: int) -> Tuple[List[str], Dict[str, str]]:
        report.mkdir()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(REPO / "tests" / "torchrun_report.py"), "pretrain", str(TINY_PRETRAIN), "--output", str(out),
               "--paths.train", str(wikitext_slice / "train.npz"), "--paths.dev", "null",
               "--vocab.size", "400", "--softmax.cutoffs", "[100]", "--training.batch_tokens", "256",
               "--training.max_steps", str(steps), "--training.log_every", "1", "--training.threads", "1",
               "--training.checkpoint_every", "100000", "--training.final_lr_ratio", "1.0"]
        return cmd, {**os.environ, "OMP_NUM_THREADS": "1", "SPACY_ELMO_TEST_REPORT": str(report)}

    def ranks(report: Path) -> List[Dict]:
        return [json.loads((report / f"rank{r}.json").read_text()) for r in (0, 1)]

    cmd, env = torchrun(tmp_path / "run", tmp_path / "stopped", 100000)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("step 3/"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    assert rest.count("Stopped by signal") == 1  # rank 0 only
    stopped = ranks(tmp_path / "stopped")
    step = stopped[0]["results"][0]["step"]
    assert step >= 3
    for rank in stopped:  # every rank returned from the trainer, stopped at the same step, and exited 0
        assert rank["exit"] in (0, None) and rank["results"] == stopped[0]["results"]
        assert rank["results"][0]["stopped"] is True
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["step"] == step
    steps = step + 4
    for out, report in ((tmp_path / "run", tmp_path / "resumed"), (tmp_path / "straight", tmp_path / "uninterrupted")):
        cmd, env = torchrun(out, report, steps)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        assert ("Resumed from" in res.stdout) == (out.name == "run")
        assert [r["results"][0]["step"] for r in ranks(report)] == [steps, steps]
    resumed = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    straight = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    assert resumed["step"] == straight["step"] == steps
    for name, value in straight["model"].items():
        torch.testing.assert_close(resumed["model"][name], value, rtol=0, atol=0)
