"""Continued pretraining (paths.init in both formats, [vocab] from_init) and prepare --lang."""
import copy
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from thinc.api import Config

from conftest import REPO, english_lines
from spacy_elmo import ElmoBiLM
from spacy_elmo.loaders import DEFAULT_MODEL, MODELS_DIR
from spacy_elmo.pretrain.config import validate_pretrain_config
from spacy_elmo.pretrain.corpus import Corpus, build_vocab
from spacy_elmo.pretrain.data import prepare_corpus
from spacy_elmo.pretrain.text import tokenize
from spacy_elmo.pretrain.trainer import Trainer

TINY = REPO / "configs" / "pretrain" / "tiny.cfg"
GERMAN = [
    "Die Straßenbahn fährt heute wegen Bauarbeiten nicht bis zum Hauptbahnhof.",
    "Wir haben z.B. gestern im Biergarten gesessen, obwohl es geregnet hat.",
    "Der Ausschuss vertagte die Entscheidung über den Haushaltsentwurf auf nächste Woche.",
    "Kinder unter sechs Jahren fahren kostenlos mit, Hunde brauchen eine eigene Fahrkarte.",
    "Das Museum öffnet am Sonntag erst um elf Uhr. Der Eintritt ist frei!",
] * 8


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """An English corpus (300 lines of WikiText-2 train, or generated text without the
    shared folder) and a German one, prepared."""
    out = tmp_path_factory.mktemp("continue")
    (out / "wikitext_en.txt").write_text("".join(english_lines("train", 300)), encoding="utf-8")
    prepare_corpus([out / "wikitext_en.txt"]).save(out / "en.npz")
    (out / "de.txt").write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    prepare_corpus([out / "de.txt"], lang="de").save(out / "de.npz")
    return out


def config(train: Path, init=None, model: bool = True, **overrides):
    cfg = Config().from_disk(TINY, interpolate=True)
    cfg["paths"].update({"train": str(train), "dev": None, "init": init})
    cfg["training"].update({"threads": 1, "max_steps": 2, "log_every": 1, "eval_every": 1000})
    if not model:
        cfg["model"] = {}
    for key, value in overrides.items():
        section, name = key.split(".")
        cfg[section][name] = value
    return validate_pretrain_config(dict(cfg))


@pytest.fixture(scope="module")
def own_init(corpora, tmp_path_factory) -> Path:
    """A model in the project's own format, with an English vocabulary and a softmax."""
    cfg = config(corpora / "en.npz")
    vocab = build_vocab(Corpus.load(corpora / "en.npz"), 500)
    torch.manual_seed(1)
    bilm = ElmoBiLM(cfg["model"], vocab_size=len(vocab), softmax_options=cfg["softmax"])
    path = tmp_path_factory.mktemp("own") / "model"
    bilm.save(path, vocab=vocab)
    return path


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


def test_keeps_the_init_vocabulary_and_softmax(corpora, own_init, tmp_path):
    logs = []
    trainer = Trainer(config(corpora / "de.npz", init=str(own_init), model=False), tmp_path / "run", log=logs.append)
    init = ElmoBiLM.load(own_init)
    vocab = (own_init / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert trainer.vocab == vocab and any("vocabulary (500 words) and softmax are kept" in line for line in logs)
    for name, value in init.state_dict().items():  # softmax included
        assert same(trainer.bilm.state_dict()[name], value), name
    types = trainer.train.types
    targets = dict(zip(types, trainer.train_targets.tolist()))
    assert "Straßenbahn" not in vocab and targets["Straßenbahn"] == vocab.index("<unk>")
    assert targets["."] == vocab.index(".") and targets[","] == vocab.index(",")
    result = trainer.run()
    assert result["step"] == 2
    assert (tmp_path / "run" / "vocab.txt").read_text(encoding="utf-8").splitlines() == vocab
    # a non-empty [model] that agrees with the init model is accepted too
    Trainer(config(corpora / "de.npz", init=str(own_init)), tmp_path / "run2", log=lambda s: None)


def test_from_init_false_trains_a_fresh_softmax_over_the_corpus(corpora, own_init, tmp_path):
    with pytest.raises(ValueError, match=r"no cutoff in \[200, 1000\] is below the vocabulary size \(62\)"):
        Trainer(config(corpora / "de.npz", init=str(own_init), **{"vocab.from_init": False}), tmp_path / "x")
    cfg = config(corpora / "de.npz", init=str(own_init), **{"vocab.from_init": False, "vocab.size": 100,
                                                            "softmax.type": "full"})
    trainer = Trainer(cfg, tmp_path / "run", log=lambda s: None)
    assert trainer.vocab == build_vocab(Corpus.load(corpora / "de.npz"), 100)
    init = ElmoBiLM.load(own_init).state_dict()
    state = trainer.bilm.state_dict()
    for name, value in init.items():
        if not name.startswith("softmax."):
            assert same(state[name], value), name
    assert trainer.bilm.vocab_size == len(trainer.vocab) <= 100


@pytest.mark.parametrize("form", ["dir", "hdf5", "list", "allennlp-names"])
def test_allennlp_weights_as_init(form, corpora, tiny_dir, tiny_bilm, tmp_path):
    folder = tmp_path / "published"
    folder.mkdir()
    if form == "allennlp-names":
        options, weights = folder / "elmo_tiny_options.json", folder / "elmo_tiny_weights.hdf5"
    else:
        options, weights = folder / "options.json", folder / "weights.hdf5"
    shutil.copy(tiny_dir / "options.json", options)
    shutil.copy(tiny_dir / "weights.hdf5", weights)
    init = {"dir": str(folder), "hdf5": str(weights), "list": [str(weights), str(options)],
            "allennlp-names": str(weights)}[form]
    logs = []
    cfg = config(corpora / "en.npz", init=init, model=False, **{"vocab.size": 300})
    trainer = Trainer(cfg, tmp_path / "run", log=logs.append)
    assert any("it has no softmax" in line and "fresh softmax" in line for line in logs)
    assert trainer.bilm.options["lstm"]["dim"] == 64  # the shapes come from the weights
    assert trainer.vocab == build_vocab(Corpus.load(corpora / "en.npz"), 300)
    state = trainer.bilm.state_dict()
    for name, value in tiny_bilm.state_dict().items():
        assert same(state[name], value), name
    assert trainer.run()["step"] == 2
    assert ElmoBiLM.load(tmp_path / "run").vocab_size == len(trainer.vocab)


def test_model_that_disagrees_with_init_is_an_error(corpora, tiny_dir, tmp_path):
    with pytest.raises(ValueError, match=r"differs from the init model in .*lstm\.dim \(128 vs 64\)"):
        Trainer(config(corpora / "en.npz", init=str(tiny_dir / "weights.hdf5")), tmp_path / "x", log=lambda s: None)


def test_resume_after_the_init_files_are_gone(corpora, own_init, tmp_path):
    """A continued run resumes from its checkpoint when its paths.init was removed meanwhile,
    and reaches the weights a resume with the init files present reaches."""
    init = tmp_path / "init"
    shutil.copytree(own_init, init)
    for run in ("kept", "gone"):
        assert Trainer(config(corpora / "de.npz", init=str(init), model=False), tmp_path / run, log=lambda s: None).run()["step"] == 2
    shutil.rmtree(init)
    logs = []
    gone = Trainer(config(corpora / "de.npz", init=str(init), model=False, **{"training.max_steps": 3}), tmp_path / "gone",
                   log=logs.append)
    assert any("is gone; the run resumes from" in line for line in logs)
    assert gone.run()["step"] == 3 and any(line.startswith("Resumed from") for line in logs)
    shutil.copytree(own_init, init)
    kept = Trainer(config(corpora / "de.npz", init=str(init), model=False, **{"training.max_steps": 3}), tmp_path / "kept",
                   log=lambda s: None)
    assert kept.run()["step"] == 3
    a, b = ElmoBiLM.load(tmp_path / "gone").state_dict(), ElmoBiLM.load(tmp_path / "kept").state_dict()
    assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    assert (tmp_path / "gone" / "vocab.txt").read_bytes() == (own_init / "vocab.txt").read_bytes()
    shutil.rmtree(init)
    wider = config(corpora / "de.npz", init=str(init), **{"training.max_steps": 4})
    wider["model"]["lstm"]["dim"] = 192
    with pytest.raises(ValueError, match=r"differs from the checkpoint's in .*lstm\.dim \(192 vs 128\)"):
        Trainer(validate_pretrain_config(wider), tmp_path / "gone", log=lambda s: None)
    with pytest.raises(ValueError, match="no such file or directory"):  # no checkpoint: still an error
        Trainer(config(corpora / "de.npz", init=str(init), model=False), tmp_path / "new", log=lambda s: None)


def test_resume_after_published_init_is_gone(corpora, tiny_dir, tmp_path):
    """Published weights carry no softmax, so the run trained a fresh one over its corpus: a
    resume after the weights were removed keeps comparing [vocab] size with the checkpoint's."""
    folder = tmp_path / "published"
    shutil.copytree(tiny_dir, folder)
    init = str(folder / "weights.hdf5")
    assert Trainer(config(corpora / "en.npz", init=init, model=False, **{"vocab.size": 300}), tmp_path / "run",
                   log=lambda s: None).run()["step"] == 2
    shutil.rmtree(folder)
    with pytest.raises(ValueError, match=r"differs from the checkpoint's in vocab\.size"):
        Trainer(config(corpora / "en.npz", init=init, model=False, **{"vocab.size": 250, "training.max_steps": 3}),
                tmp_path / "run", log=lambda s: None).run()
    logs = []
    trainer = Trainer(config(corpora / "en.npz", init=init, model=False, **{"vocab.size": 300, "training.max_steps": 3}),
                      tmp_path / "run", log=logs.append)
    assert any("is gone; the run resumes from" in line and "softmax" not in line for line in logs)
    assert trainer.vocab == build_vocab(Corpus.load(corpora / "en.npz"), 300)
    assert trainer.run()["step"] == 3


def test_init_errors(corpora, tmp_path):
    with pytest.raises(ValueError, match="no such file or directory, and not a published model name"):
        Trainer(config(corpora / "en.npz", init=str(tmp_path / "missing"), model=False), tmp_path / "x", log=print)
    (tmp_path / "lone.hdf5").write_bytes(b"")
    with pytest.raises(ValueError, match="no options file beside it"):
        Trainer(config(corpora / "en.npz", init=str(tmp_path / "lone.hdf5"), model=False), tmp_path / "x", log=print)
    with pytest.raises(ValueError, match="a list must name two files"):
        Trainer(config(corpora / "en.npz", init=[str(tmp_path / "lone.hdf5")], model=False), tmp_path / "x", log=print)


def test_published_name_as_init(corpora, tiny_dir, tiny_bilm, tmp_path, monkeypatch):
    from test_published import Server

    from spacy_elmo.published import PUBLISHED, PublishedModel

    weights = (tiny_dir / "weights.hdf5").read_bytes()
    monkeypatch.setitem(PUBLISHED, "tiny-test", PublishedModel(
        "tiny-test", "the tiny fixture", "http://127.0.0.1:9", "t/options.json", "t/weights.hdf5",
        weights_size=len(weights), weights_sha256=hashlib.sha256(weights).hexdigest()))
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    with Server() as server:
        server.files.update({"/t/options.json": (tiny_dir / "options.json").read_bytes(), "/t/weights.hdf5": weights})
        monkeypatch.setenv("SPACY_ELMO_MIRROR", server.url)
        trainer = Trainer(config(corpora / "en.npz", init="tiny-test", model=False), tmp_path / "run", log=lambda s: None)
    for name, value in tiny_bilm.state_dict().items():
        assert same(trainer.bilm.state_dict()[name], value), name
    assert trainer.run()["step"] == 2
    # the resume reads neither the cache nor the server: the checkpoint holds what the init gave
    shutil.rmtree(tmp_path / "cache")
    logs = []
    resumed = Trainer(config(corpora / "en.npz", init="tiny-test", model=False, **{"training.max_steps": 3}),
                      tmp_path / "run", log=logs.append)
    assert any(line.startswith("Resuming: the shapes that paths.init tiny-test gave the run") for line in logs)
    assert resumed.run()["step"] == 3 and not (tmp_path / "cache").exists()


def test_config_validation_of_vocab_and_model(corpora):
    with pytest.raises(ValueError, match=r"\[vocab\] from_init: input should be a valid boolean"):
        config(corpora / "en.npz", **{"vocab.from_init": "yes"})
    with pytest.raises(ValueError, match=r"unknown \[vocab\] settings \['cutoff'\]"):
        config(corpora / "en.npz", **{"vocab.cutoff": 3})
    with pytest.raises(ValueError, match=r"\[vocab\] size: input should be greater than 3"):
        config(corpora / "en.npz", **{"vocab.size": 2})
    with pytest.raises(ValueError, match=r"\[model\]"):
        config(corpora / "en.npz", model=False)  # no init: [model] is needed
    cfg = config(corpora / "en.npz", init="somewhere", model=False)
    assert cfg["model"] == {} and cfg["vocab"]["from_init"] is True


def test_prepare_lang_tokenizes_with_that_language(corpora, tmp_path):
    german = "Wir gehen z.B. ins Kino."
    assert list(tokenize([german], lang="de")) == [["Wir", "gehen", "z.B.", "ins", "Kino", "."]]
    assert list(tokenize([german], lang="en"))[0][2:4] == ["z.", "B."]  # English rules split it
    french = "L'homme qu'on voit est là. C'est vrai !"
    assert list(tokenize([french], lang="fr")) == [["L'", "homme", "qu'", "on", "voit", "est", "là", "."],
                                                  ["C'", "est", "vrai", "!"]]
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    (tmp_path / "fr.txt").write_text(french + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["prepare", str(tmp_path / "fr.txt"), "--lang", "fr", "-o", str(tmp_path / "fr.npz")])
    assert result.exit_code == 0, result.output
    corpus = Corpus.load(tmp_path / "fr.npz")
    assert corpus.n_sentences == 2 and corpus.n_tokens == 12 and "qu'" in corpus.types
    result = CliRunner().invoke(app, ["prepare", str(tmp_path / "fr.txt"), "--lang", "zz", "-o", str(tmp_path / "x.npz")])
    assert result.exit_code != 0 and "no spaCy tokenizer for language 'zz'" in result.output
    assert not (tmp_path / "x.npz").exists()


def test_perplexity_lang_tokenizes_raw_text_like_prepare(corpora, own_init):
    from spacy_elmo.pretrain.perplexity import perplexity

    raw = perplexity(own_init, corpora / "de.txt", lang="de")
    assert raw == pytest.approx(perplexity(own_init, corpora / "de.npz"), rel=1e-6)
    assert raw != pytest.approx(perplexity(own_init, corpora / "de.txt"), rel=1e-6)  # English rules differ


def grown_config(train: Path, init: Path, dim: int = 192, filters=None, **overrides):
    cfg = config(train, init=str(init), **{"training.grow": True, **overrides})
    cfg["model"]["lstm"]["dim"] = dim
    cfg["model"]["char_cnn"]["filters"] = filters or [[1, 8], [2, 16], [3, 16], [4, 32], [5, 64], [7, 8]]
    return validate_pretrain_config(cfg)


def test_grow_widens_the_init_model_without_changing_what_it_computes(corpora, own_init, tmp_path):
    logs = []
    trainer = Trainer(grown_config(corpora / "en.npz", own_init), tmp_path / "run", log=logs.append)
    init = ElmoBiLM.load(own_init)
    assert any(line.startswith("Growing") and "lstm.dim (192 vs 128)" in line for line in logs)
    grown = trainer.bilm
    assert grown.config.cell_dim == 192 and grown.token_encoder.n_filters == 144
    sentences = [["The", "grown", "model", "reads", "this", "."], ["Émoji", "😀", "x" * 70], ["a"]]
    ids, lengths = init.char_ids(sentences), [len(s) for s in sentences]
    with torch.no_grad():
        expected = init.double()(ids, lengths)
        got = grown.double()(ids, lengths)
    assert got.shape == expected.shape and float((got - expected).abs().max()) < 1e-12
    for name, value in init.softmax.state_dict().items():  # the init vocabulary and softmax are kept
        assert same(grown.softmax.state_dict()[name].double(), value), name
    grown.float()
    before = {k: v.clone() for k, v in grown.state_dict().items()}
    assert not before["lstm.layers.0.weight_proj"][:, 128:].any()
    trainer.run()
    after = trainer.bilm.state_dict()
    # the zero blocks are where the new units are read: after two steps they read them
    assert after["lstm.layers.0.weight_proj"][:, 128:].abs().min(dim=-1).values.gt(0).all()
    assert after["token_encoder.projection.weight"][:, -8:].ne(0).all()
    assert not torch.equal(after["lstm.layers.1.weight_ih"][:, :, 128:192], before["lstm.layers.1.weight_ih"][:, :, 128:192])
    logs.clear()  # the same command with a later max_steps resumes the grown run from its checkpoint
    resumed = Trainer(grown_config(corpora / "en.npz", own_init, **{"training.max_steps": 3}), tmp_path / "run",
                      log=logs.append)
    assert resumed.run()["step"] == 3 and "Resumed from" in "\n".join(logs)
    assert ElmoBiLM.load(tmp_path / "run").config.cell_dim == 192


def test_grow_errors(corpora, own_init, tmp_path):
    with pytest.raises(ValueError, match=r"differs from the init model in .*lstm\.dim \(192 vs 128\).*grow = true"):
        Trainer(grown_config(corpora / "en.npz", own_init, **{"training.grow": False}), tmp_path / "a", log=print)
    with pytest.raises(ValueError, match=r"cannot grow from the init model: lstm\.dim \(96 vs 128: it can only grow\)"):
        Trainer(grown_config(corpora / "en.npz", own_init, dim=96), tmp_path / "b", log=print)
    with pytest.raises(ValueError, match=r"no group of width 5 with at least 64 filters"):
        Trainer(grown_config(corpora / "en.npz", own_init, filters=[[1, 8], [2, 8], [3, 16], [4, 32], [5, 32]]),
                tmp_path / "c", log=print)
    cfg = grown_config(corpora / "en.npz", own_init)
    cfg["model"]["lstm"]["projection_dim"] = 16
    with pytest.raises(ValueError, match=r"cannot grow from the init model: lstm\.projection_dim \(16 vs 32: it can only"):
        Trainer(cfg, tmp_path / "d", log=print)
    cfg = grown_config(corpora / "en.npz", own_init)
    cfg["model"]["char_cnn"]["n_highway"] = 2
    with pytest.raises(ValueError, match=r"cannot grow from the init model: char_cnn\.n_highway \(2 vs 1\)"):
        Trainer(cfg, tmp_path / "e", log=print)


def test_grow_the_projection_keeps_the_layers_in_front_and_zeros_after(corpora, own_init, tmp_path):
    cfg = grown_config(corpora / "en.npz", own_init, dim=128, filters=[[1, 8], [2, 8], [3, 16], [4, 32], [5, 64]])
    cfg["model"]["lstm"]["projection_dim"] = 48
    logs = []
    trainer = Trainer(cfg, tmp_path / "run", log=logs.append)
    assert any(line.startswith("Growing") and "lstm.projection_dim (48 vs 32)" in line for line in logs)
    init, grown = ElmoBiLM.load(own_init).double(), trainer.bilm.double()
    sentences = [["Wider", "layers", "read", "the", "same", "."], ["Émoji", "😀", "x" * 70], ["a"]]
    ids, lengths = init.char_ids(sentences), [len(s) for s in sentences]
    with torch.no_grad():
        expected = init.forward_with_boundaries(ids, lengths)
        got = grown.forward_with_boundaries(ids, lengths)
        assert got.shape == (3, expected.shape[1], 96)
        for direction in (0, 1):  # each direction: the init model's 32 values, then 16 zeros
            assert float((got[..., 48 * direction : 48 * direction + 32]
                          - expected[..., 32 * direction : 32 * direction + 32]).abs().max()) < 1e-12
            assert not got[..., 48 * direction + 32 : 48 * (direction + 1)].any()
        # the kept softmax (adaptive, its tail cluster widened) gives the same word probabilities
        top = expected.shape[0] - 1
        assert float((grown.softmax.log_prob(got[top, :, :48]) - init.softmax.log_prob(expected[top, :, :32]))
                     .abs().max()) < 1e-10
    assert grown.softmax.proj.tail[0][1].weight.shape[1] > init.softmax.proj.tail[0][1].weight.shape[1]
    grown.float()
    trainer.run()
    after = trainer.bilm.state_dict()  # the new dimensions are no longer zero after two steps
    assert after["token_encoder.projection.weight"][32:].abs().sum(dim=1).gt(0).all()
    assert after["lstm.layers.1.weight_proj"][:, :, 32:].abs().sum(dim=1).gt(0).all()


def test_grow_published_weights_with_a_fresh_softmax(corpora, tiny_dir, tiny_bilm, tmp_path):
    cfg = config(corpora / "en.npz", init=str(tiny_dir / "weights.hdf5"), **{"training.grow": True, "vocab.size": 300})
    cfg["model"] = tiny_bilm.options
    cfg["model"]["lstm"]["dim"] += 32
    cfg["model"]["char_cnn"]["filters"] = [*cfg["model"]["char_cnn"]["filters"], [6, 8]]
    logs = []
    trainer = Trainer(validate_pretrain_config(cfg), tmp_path / "run", log=logs.append)
    assert any(line.startswith("Growing") for line in logs) and any("a fresh softmax" in line for line in logs)
    sentences = [["A", "tiny", "published", "model", ",", "grown", "."], ["ünïcode", "🙂"]]
    ids, lengths = tiny_bilm.char_ids(sentences), [len(s) for s in sentences]
    with torch.no_grad():
        expected = copy.deepcopy(tiny_bilm).double()(ids, lengths)
        got = trainer.bilm.double()(ids, lengths)
    assert float((got - expected).abs().max()) < 1e-12
    assert trainer.bilm.vocab_size == len(trainer.vocab) <= 300
    trainer.bilm.float()
    assert trainer.run()["step"] == 2


def test_continue_preset_continues_the_shipped_model(corpora, tmp_path):
    """configs/pretrain/continue.cfg, through the real CLI: shapes, vocabulary and softmax come
    from the shipped model, whatever its shape, and the run saves a model of that shape."""
    shipped = MODELS_DIR / DEFAULT_MODEL
    run = subprocess.run([sys.executable, "-m", "spacy_elmo", "pretrain", str(REPO / "configs/pretrain/continue.cfg"),
                          "--output", str(tmp_path / "run"), "--paths.train", str(corpora / "en.npz"),
                          "--paths.init", str(shipped), "--training.max_steps", "1", "--training.batch_tokens", "512"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "vocabulary (20,000 words) and softmax are kept" in run.stdout + run.stderr
    saved, init = ElmoBiLM.load(tmp_path / "run"), ElmoBiLM.load(shipped)
    assert saved.options == init.options and saved.output_dim == init.output_dim
    before = init.state_dict()
    assert any(not torch.equal(value.float(), before[name].float()) for name, value in saved.state_dict().items())
    assert (tmp_path / "run" / "vocab.txt").read_text(encoding="utf-8") == (shipped / "vocab.txt").read_text(encoding="utf-8")
