"""Pretraining: learning, exact resume, save on SIGTERM, export round trips (the
multi-process runs are in test_pretrain_ddp.py)."""
import json
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, tiny_config
from spacy_elmo import ElmoBiLM
from spacy_elmo.pretrain.config import load_pretrain_config
from spacy_elmo.pretrain.corpus import Corpus, build_vocab, unigram_perplexity
from spacy_elmo.pretrain.text import read_paragraphs, tokenize
from spacy_elmo.pretrain.trainer import Trainer, cpu_has_native

TINY = REPO / "configs" / "pretrain" / "tiny.cfg"


@pytest.fixture(scope="module")
def trained(wikitext_slice, device, tmp_path_factory):
    """The tiny preset trained for 300 steps on the test device (CUDA with ``pytest --gpu``)."""
    out = tmp_path_factory.mktemp("pretrained") / "run"
    result = Trainer(tiny_config(wikitext_slice, **{"training.device": device.type}), out, log=lambda s: None).run()
    return out, result


def test_wikitext_cleanup(tmp_path):
    path = tmp_path / "wikitext_sample.txt"
    path.write_text(" = Heading = \n The 1 @,@ 000 @-@ strong <unk> army arrived . It won !\n \n", encoding="utf-8")
    paragraphs = list(read_paragraphs(path))
    assert len(paragraphs) == 1 and "1,000-strong" in paragraphs[0]
    sents = list(tokenize(paragraphs))  # spaCy's tokenizer splits the hyphen again, as in use
    assert sents == [["The", "1,000", "-", "strong", "<unk>", "army", "arrived", "."], ["It", "won", "!"]]


def test_imdb_archive_reading(tmp_path):
    import io
    import tarfile

    path = tmp_path / "aclImdb_unsup.tar.gz"
    members = {"aclImdb/train/unsup/7_0.txt": "Great film.<br /><br />I loved it!",
               "aclImdb/train/pos/3_9.txt": "A fine cast.",
               "aclImdb/train/urls_unsup.txt": "http://www.imdb.com/title/tt0018515/usercomments\n",
               "aclImdb/README": "not a review"}
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    paragraphs = list(read_paragraphs(path))  # auto: a .tar.gz is the aclImdb layout
    assert paragraphs == ["Great film.  I loved it!", "A fine cast."]
    assert list(tokenize(paragraphs)) == [["Great", "film", "."], ["I", "loved", "it", "!"], ["A", "fine", "cast", "."]]


def test_tiny_pretraining_beats_unigram(trained, wikitext_slice):
    out, result = trained
    train, dev = Corpus.load(wikitext_slice / "train.npz"), Corpus.load(wikitext_slice / "valid.npz")
    vocab = build_vocab(train, 2000)
    unigram = unigram_perplexity(train, dev, vocab)
    assert result["step"] == 300
    assert result["dev_ppl"] < 0.85 * unigram, (result["dev_ppl"], unigram)
    bilm = ElmoBiLM.load(out)  # the output directory is a loadable model
    assert bilm.vocab_size == 2000
    from spacy_elmo.pretrain.perplexity import perplexity

    # perplexity and the unigram baseline are checked against independent values in test_perplexity.py
    full_dev = perplexity(out, wikitext_slice / "valid.npz")  # all dev sentences; training used 500
    assert full_dev < 0.85 * unigram
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("dev_ppl" in r for r in lines) and any("tokens_per_s" in r for r in lines)
    if sys.platform.startswith("linux"):  # each step line records the process's memory
        steps = [r for r in lines if "tokens_per_s" in r]
        assert all(0.05 < r["resident_gb"] < 64 and 0.05 < r["peak_resident_gb"] < 64 for r in steps), steps[-1]
        assert all(0 <= r.get("heap_free_gb", 0) <= r.get("heap_gb", 0) < 64 for r in steps), steps[-1]


class StopAt(Trainer):
    """Stops like a signal would, after a given step."""

    stop_at = 10

    def train_step(self, sentences):
        result = super().train_step(sentences)
        if self.step == self.stop_at:
            self._request_stop()  # what the SIGINT/SIGTERM handler calls
        return result


@pytest.mark.parametrize("ema_decay", [0.0, 0.9])
def test_resume_equals_uninterrupted(wikitext_slice, tmp_path, device, ema_decay):
    cfg = tiny_config(wikitext_slice, **{"training.max_steps": 20, "training.checkpoint_every": 1000,
                                         "training.eval_every": 1000, "training.dropout": 0.1,
                                         "training.device": device.type, "training.ema_decay": ema_decay})
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    Trainer(cfg, tmp_path / "straight", log=lambda s: None).run()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # handlers restored
    first = StopAt(cfg, tmp_path / "resumed", log=lambda s: None).run()
    assert first["stopped"] and first["step"] == 10
    second = Trainer(cfg, tmp_path / "resumed", log=lambda s: None).run()
    assert second["step"] == 20
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)["model"]
    # CUDA sums some gradients (the embedding's) with atomic adds, in no fixed order
    atol = 1e-6 if device.type == "cpu" else 1e-5
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol)
    a, b = (torch.load(tmp_path / run / "checkpoint.pt", weights_only=False)["ema"] for run in ("straight", "resumed"))
    assert (a is None) == (b is None) == (ema_decay == 0)
    if a is not None:
        assert int(a["n_averaged"]) == int(b["n_averaged"]) == 20
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol)


def test_resume_keeps_this_runs_adam(wikitext_slice, tmp_path):
    """On the CPU the trainer uses torch's fused Adam; a checkpoint written by the single-tensor
    Adam of earlier versions (``fused`` unset in its groups) resumes with the fused one, on the
    same optimizer state."""
    cfg = tiny_config(wikitext_slice, **{"training.max_steps": 2, "training.checkpoint_every": 1000,
                                         "training.eval_every": 1000, "training.device": "cpu"})
    out = tmp_path / "run"
    Trainer(cfg, out, log=lambda s: None).run()
    path = out / "checkpoint.pt"
    state = torch.load(path, weights_only=False)
    assert all(group["fused"] for group in state["optimizer"]["param_groups"])
    for group in state["optimizer"]["param_groups"]:
        group["fused"] = group["foreach"] = None
    torch.save(state, path)
    cfg["training"]["max_steps"] = 4
    trainer = Trainer(cfg, out, log=lambda s: None)
    assert trainer.resume() and trainer.step == 2
    assert all(group["fused"] for group in trainer.optimizer.param_groups)
    step_before = [int(s["step"]) for s in trainer.optimizer.state.values()]
    assert trainer.run()["step"] == 4
    assert [int(s["step"]) for s in trainer.optimizer.state.values()] == [n + 2 for n in step_before] == [4] * len(step_before)


class Recorded(Trainer):
    """Keeps a float64 copy of the trained weights after every step."""

    def train_step(self, sentences):
        result = super().train_step(sentences)
        self.history.append({k: v.detach().double().clone() for k, v in self.bilm.named_parameters()})
        return result


def test_moving_average_of_the_weights(wikitext_slice, tmp_path):
    """``ema_decay``: after every step e = decay * e + (1 - decay) * w, starting from the weights
    after the first step (here the first after resuming a checkpoint that had no average); the
    model files and the held-out perplexity use e, and the trained weights' perplexity is
    logged beside it."""
    out = tmp_path / "run"
    cfg = {"training.max_steps": 3, "training.eval_every": 4, "training.checkpoint_every": 1000, "training.dropout": 0.1}
    Trainer(tiny_config(wikitext_slice, **cfg), out, log=lambda s: None).run()
    assert torch.load(out / "checkpoint.pt", weights_only=False)["ema"] is None
    lines = []
    trainer = Recorded(tiny_config(wikitext_slice, **{**cfg, "training.max_steps": 8, "training.ema_decay": 0.75}),
                       out, log=lines.append)
    trainer.history = []
    trainer.run()
    assert any("Keeping a moving average of the weights (decay 0.75)" in line for line in lines)
    assert any("no moving average of the weights" in line for line in lines)
    expected = dict(trainer.history[0])
    for weights in trainer.history[1:]:
        expected = {k: 0.75 * expected[k] + 0.25 * weights[k] for k in expected}
    saved = ElmoBiLM.load(out).state_dict()
    trained = dict(trainer.bilm.named_parameters())
    for name, value in expected.items():
        torch.testing.assert_close(saved[name].double(), value, rtol=0, atol=1e-6)
        assert not torch.allclose(trained[name].double(), value, atol=1e-6), name  # the average is not the last step
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "dev_ppl" in line]
    assert [r["step"] for r in evals] == [3, 4, 8]  # the first run's last step, then this run's
    assert "dev_ppl_trained" not in evals[0]
    evals = evals[1:]
    assert evals[0]["dev_ppl"] == evals[0]["dev_ppl_trained"]  # step 4: the average has seen one step
    assert evals[1]["dev_ppl"] != evals[1]["dev_ppl_trained"]
    assert any("moving average of the weights;" in line and "without" in line for line in lines)


def test_sigterm_saves_and_resumes(wikitext_slice, tmp_path, device):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "spacy_elmo", "pretrain", str(TINY), "--output", str(out),
           "--paths.train", str(wikitext_slice / "train.npz"), "--paths.dev", "null", "--training.device", device.type,
           "--training.max_steps", "100000", "--training.log_every", "2", "--training.checkpoint_every", "100000",
           "--training.threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("step 4/"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(lines) + rest
    assert "Stopped by signal" in rest and "Done at step" not in rest  # stopped, not done
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["step"] >= 4
    resumed = subprocess.run(cmd[:-8] + ["--training.max_steps", str(state["step"] + 2), "--training.threads", "1"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resumed from" in resumed.stdout and torch.load(out / "checkpoint.pt", weights_only=False)["step"] == state["step"] + 2
    assert f"Done at step {state['step'] + 2};" in resumed.stdout


def test_export_round_trips(trained, tmp_path):
    out, _ = trained
    bilm = ElmoBiLM.load(out)
    sents = [["The", "river", "bank", "."], ["Naïve", "café", "😀"], []]
    want = bilm.embed_sentences(sents)
    from spacy_elmo.export import export

    export(out, tmp_path / "allennlp", "allennlp")
    loaded = ElmoBiLM.from_allennlp(tmp_path / "allennlp" / "options.json", tmp_path / "allennlp" / "weights.hdf5")
    for a, b in zip(want, loaded.embed_sentences(sents)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    export(out, tmp_path / "half", "elmo", half=True)
    half = ElmoBiLM.load(tmp_path / "half")
    assert (tmp_path / "half" / "vocab.txt").exists() and half.vocab_size == bilm.vocab_size
    for a, b in zip(want, half.embed_sentences(sents)):
        np.testing.assert_allclose(a, b, atol=5e-2)


def test_elmo_component_loads_pretraining_output(trained):
    import spacy

    out, _ = trained
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.config["initialize"]["components"]["elmo"] = {"loader": {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(out)}}
    nlp.initialize()
    assert nlp("The river bank.")._.elmo.shape == (3, 4, 64)


def test_cli_prepare_and_bad_input(wikitext_slice, tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "spacy_elmo", *a], capture_output=True, text=True)
    res = run("prepare", str(wikitext_slice / "wikitext_valid.txt"), "--output", str(tmp_path / "v.npz"))
    assert res.returncode == 0 and "sentences" in res.stdout, res.stderr
    assert Corpus.load(tmp_path / "v.npz").n_tokens > 1000
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    res = run("prepare", str(tmp_path / "empty.txt"), "--output", str(tmp_path / "e.npz"))
    assert res.returncode != 0 and "empty corpus" in res.stderr
    res = run("pretrain", str(TINY), "--output", str(tmp_path / "x"), "--paths.train", str(tmp_path / "v.npz"),
              "--training.flavour", "1")
    assert res.returncode != 0 and "unknown [training] settings" in res.stderr
    res = run("pretrain", str(TINY), "--output", str(tmp_path / "x"), "--paths.train", str(tmp_path / "missing.npz"))
    assert res.returncode == 1 and "Error: prepared corpus not found" in res.stderr and "Traceback" not in res.stderr
    res = run("export", str(tmp_path / "nomodel"), str(tmp_path / "out"), "--format", "allennlp")
    assert res.returncode == 1 and "not an ELMo model directory" in res.stderr


@pytest.mark.parametrize("preset,dim,proj", [("tiny", 128, 32), ("en_cpu", 512, 128), ("small", 1024, 128),
                                              ("medium", 2048, 256), ("original", 4096, 512)])
def test_presets_validate(preset, dim, proj):
    cfg = load_pretrain_config(REPO / "configs" / "pretrain" / f"{preset}.cfg", {"paths.train": "x.npz"})
    assert (cfg["model"]["lstm"]["dim"], cfg["model"]["lstm"]["projection_dim"]) == (dim, proj)


def test_init_from_saved_model(trained, wikitext_slice, tmp_path):
    out, _ = trained
    cfg = tiny_config(wikitext_slice, **{"paths.init": str(out), "training.max_steps": 1})
    trainer = Trainer(cfg, tmp_path / "warm", log=lambda s: None)
    for name, value in ElmoBiLM.load(out).state_dict().items():
        # the trainer may be on CUDA (device auto); the saved model loads on the CPU
        torch.testing.assert_close(trainer.bilm.state_dict()[name].cpu(), value, rtol=0, atol=0)
    bad = tiny_config(wikitext_slice, **{"paths.init": str(out), "model.lstm.dim": 64})
    with pytest.raises(ValueError, match="paths.init.*differs from the init model in lstm.dim"):
        Trainer(bad, tmp_path / "bad", log=lambda s: None)


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_training_steps(wikitext_slice, tmp_path, amp, device):
    """The autocast path (CPU autocast, or CUDA's with ``pytest --gpu``) trains, with the
    softmax in float32 and, for fp16, a loss scale that is saved and resumed."""
    cfg = tiny_config(wikitext_slice, **{"paths.dev": None, "training.max_steps": 3, "training.amp": amp,
                                         "training.device": device.type})
    logs = []
    trainer = Trainer(cfg, tmp_path / amp, log=logs.append)
    # on a CPU that only emulates the dtype the run warns that float32 is faster
    emulated = device.type == "cpu" and not cpu_has_native(amp)
    assert any(f"training.amp '{amp}' on a CPU where oneDNN has no {amp} support" in line for line in logs) == emulated
    trainer.run()
    assert trainer.step == 3
    assert all(torch.isfinite(p).all() for p in trainer.bilm.parameters())
    state = torch.load(tmp_path / amp / "checkpoint.pt", weights_only=False)
    assert bool(state["scaler"]) == (amp == "fp16")
    batch = trainer._next_batch()
    with torch.no_grad():
        ref = trainer.loss.eval()(_batch(trainer, batch))
        with torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16):
            low = trainer.loss(_batch(trainer, batch))
    assert float(sum(low)) == pytest.approx(float(sum(ref)), rel=1e-2)


def _batch(trainer, sentences):
    from spacy_elmo.pretrain.batches import make_batch
    from spacy_elmo.pretrain.loss import batch_to

    batch = make_batch(trainer.train, trainer.offsets, sentences, trainer.char_table, trainer.train_targets)
    return batch_to(batch, trainer.device)
