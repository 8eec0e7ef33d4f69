"""The trainer's parts on their own: batch stream, checkpoint RNG states, signals, loader choice."""
import json
import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO
from spacy_elmo.pretrain.batches import epoch_batches
from spacy_elmo.pretrain.checkpoint import load_checkpoint, rng_states, save_checkpoint, set_rng_states
from spacy_elmo.pretrain.signals import StopSignals
from spacy_elmo.pretrain.stream import BatchStream

EMPTY = {"model": {}, "optimizer": {}, "step": 0, "config": {}, "vocab": []}  # the keys a checkpoint must have


def test_batch_stream_builds_each_epoch_once(monkeypatch):
    lengths = np.random.default_rng(0).integers(1, 30, size=200)
    calls = []
    import spacy_elmo.pretrain.stream as stream_module

    def counting(*args):
        calls.append(args[-1])
        return epoch_batches(*args)

    monkeypatch.setattr(stream_module, "epoch_batches", counting)
    stream = BatchStream(lengths, 256, seed=3)
    n0 = len(epoch_batches(lengths, 256, 3, 0))
    got = [next(stream) for _ in range(n0 + 2)]
    assert calls == [0, 1]  # once per epoch, not once per batch
    assert stream.epoch == 1 and stream.batch_index == 2
    # every sentence once per epoch
    assert sorted(np.concatenate(got[:n0]).tolist()) == list(range(len(lengths)))
    resumed = BatchStream(lengths, 256, seed=3)
    resumed.seek(1, 1)
    np.testing.assert_array_equal(next(resumed), got[n0 + 1])


def test_checkpoint_rng_states_restore_on_cpu(tmp_path):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = {**EMPTY, "rng": rng_states()}
    want = (random.random(), np.random.rand(), torch.rand(3))
    save_checkpoint(state, tmp_path / "checkpoint.pt")
    loaded = load_checkpoint(tmp_path / "checkpoint.pt")
    assert loaded["rng"]["torch"].device.type == "cpu"
    set_rng_states(loaded["rng"])
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[:2] == want[:2] and torch.equal(got[2], want[2])
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left


@pytest.mark.cuda
def test_checkpoint_rng_states_restore_with_cuda(tmp_path):
    torch.cuda.manual_seed_all(2)
    save_checkpoint({**EMPTY, "rng": rng_states()}, tmp_path / "checkpoint.pt")
    want = torch.rand(3, device="cuda")
    set_rng_states(load_checkpoint(tmp_path / "checkpoint.pt")["rng"])
    assert torch.equal(torch.rand(3, device="cuda"), want)


def test_stop_signals_request_then_restore():
    before = signal.getsignal(signal.SIGTERM)
    stops = []
    with StopSignals(lambda: stops.append(1)):
        signal.raise_signal(signal.SIGTERM)
        assert stops == [1]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_during_the_stop_vote_is_not_lost(monkeypatch):
    """The SIGTERM handler runs between bytecodes, also while the ranks' stop vote (a
    collective) is under way: a signal arriving then must count at the next vote, not be
    overwritten by the vote's result (which lost it: torchrun then killed the workers)."""
    from types import SimpleNamespace

    from spacy_elmo.pretrain import trainer as trainer_module

    state = SimpleNamespace(stop_requested=False, signal_received=False, device=torch.device("cpu"))

    def vote_during_which_the_signal_arrives(flag, device):
        trainer_module.Trainer._request_stop(state)  # the handler, mid-collective
        return flag  # the vote was cast before it ran

    monkeypatch.setattr(trainer_module, "any_rank", vote_during_which_the_signal_arrives)
    assert trainer_module.Trainer._should_stop(state) is False
    monkeypatch.setattr(trainer_module, "any_rank", lambda flag, device: flag)
    assert trainer_module.Trainer._should_stop(state) is True


_FAULTS_CHILD = """
import json, resource, sys
import torch
from spacy_elmo.pretrain.memory import keep_freed_memory
applied = keep_freed_memory() and keep_freed_memory() if sys.argv[1] == "keep" else False
faults = []
for _ in range(6):  # 64 MB, above glibc's largest mmap threshold, freed at once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(1 << 24).fill_(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_host_memory_is_reused_without_page_faults():
    """In a fresh process (as ``pretrain`` runs), after ``keep_freed_memory`` a large freed
    buffer's pages serve the next one of that size; glibc's default unmaps it and faults in all
    16,384 pages again."""
    runs = {}
    for mode in ("keep", "default"):
        out = subprocess.run([sys.executable, "-c", _FAULTS_CHILD, mode], capture_output=True, text=True, check=True)
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    if not runs["keep"]["applied"]:
        pytest.skip("not glibc")
    assert min(runs["default"]["faults"][-3:]) > 10_000, runs
    assert max(runs["keep"]["faults"][-3:]) < 1_000, runs  # the first may land where the heap cannot keep it


_HEAP_CHILD = """
import json, torch
from spacy_elmo.pretrain.memory import host_memory, keep_freed_memory
applied = keep_freed_memory()
start = host_memory()
block = torch.ones(1 << 26)  # 256 MB, on the heap once mmap is off
held = host_memory()
del block
print(json.dumps({"applied": applied, "start": start, "held": held, "freed": host_memory()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc's mallinfo2")
def test_host_memory_sees_a_block_held_then_freed_on_the_heap():
    """``host_memory`` reads the resident size, its peak and glibc's heap: a 256 MB block raises
    the resident memory, its peak and the heap; freed, it stays in the heap (never trimmed) as
    free space, and stays resident."""
    out = subprocess.run([sys.executable, "-c", _HEAP_CHILD], capture_output=True, text=True, check=True)
    run = json.loads(out.stdout.strip().splitlines()[-1])
    start, held, freed = run["start"], run["held"], run["freed"]
    assert held["resident_gb"] - start["resident_gb"] > 0.25, run
    assert freed["peak_resident_gb"] - start["resident_gb"] > 0.25, run
    if not run["applied"] or "heap_gb" not in start:
        pytest.skip("not glibc 2.33 or later")
    assert held["heap_gb"] - start["heap_gb"] > 0.25 and held["heap_free_gb"] < 0.1, run
    assert freed["heap_free_gb"] - held["heap_free_gb"] > 0.25 and freed["heap_gb"] == held["heap_gb"], run
    assert freed["resident_gb"] > start["resident_gb"] + 0.25, run


def test_onednn_cache_bound_yields_to_the_users_value(monkeypatch):
    from spacy_elmo.pretrain.memory import ONEDNN_CACHE_ENV, limit_onednn_cache

    monkeypatch.delenv(ONEDNN_CACHE_ENV, raising=False)
    assert limit_onednn_cache() == "64" and os.environ[ONEDNN_CACHE_ENV] == "64"
    monkeypatch.setenv(ONEDNN_CACHE_ENV, "512")
    assert limit_onednn_cache(8) == "512" and os.environ[ONEDNN_CACHE_ENV] == "512"
    with pytest.raises(ValueError, match="0 or more"):
        limit_onednn_cache(-1)


def test_pretrain_bounds_the_onednn_cache_before_training(monkeypatch, tmp_path):
    """The command sets the bound in its own process (before any product), so a run started
    without the variable gets 64 and one started with it keeps the user's value."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app
    from spacy_elmo.pretrain.memory import ONEDNN_CACHE_ENV

    words = "the river bank was flooded after rain and we walked along the bank of a stream".split()
    (tmp_path / "train.txt").write_text("\n".join(" ".join(words[i % 5:i % 5 + 9]) for i in range(60)) + "\n")
    runner = CliRunner()
    result = runner.invoke(app, ["prepare", str(tmp_path / "train.txt"), "--output", str(tmp_path / "train.npz")])
    assert result.exit_code == 0, result.output
    for preset, expected in ((None, "64"), ("256", "256")):
        if preset is None:
            monkeypatch.delenv(ONEDNN_CACHE_ENV, raising=False)
        else:
            monkeypatch.setenv(ONEDNN_CACHE_ENV, preset)
        out = tmp_path / f"run_{expected}"
        result = runner.invoke(app, ["pretrain", str(REPO / "configs" / "pretrain" / "tiny.cfg"), "--output", str(out),
                                     "--paths.train", str(tmp_path / "train.npz"), "--paths.dev", "null",
                                     "--vocab.size", "20", "--softmax.cutoffs", "[10]", "--training.max_steps", "1",
                                     "--training.threads", "1"])
        assert result.exit_code == 0, result.output
        assert os.environ[ONEDNN_CACHE_ENV] == expected
