"""Training NER and textcat through the ELMo listener, with the shipped configs."""
import gzip
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.util import load_config, load_model_from_config

from conftest import REPO, SHARED, load_script, read_conll
from tiny_data import ner_sentences, sst_items
from spacy_elmo.frozen_cache import MB, CacheFullWarning, FrozenLayerCache

CONFIGS = REPO / "configs"


@pytest.fixture(scope="module")
def conll():
    """40 CoNLL-2003 training sentences, or generated NER sentences without the shared folder."""
    path = SHARED / "data" / "conll2003" / "train.txt.gz"
    return read_conll(path, 40) if path.is_file() else ner_sentences(40)


@pytest.fixture(scope="module")
def sst():
    """30 SST training items, or generated sentiment items without the shared folder."""
    path = SHARED / "data" / "sst" / "train.txt.gz"
    if not path.is_file():
        return sst_items(30)
    items = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            words = re.findall(r"\(\d ([^()\s]+)\)", line)
            items.append((words, line[1]))
            if len(items) >= 30:
                break
    return items


def ner_examples(nlp, sents):
    return [Example(nlp.make_doc(" ".join(w)), Doc(nlp.vocab, words=w, ents=t)) for w, t in sents]


def textcat_examples(nlp, items):
    out = []
    for words, label in items:
        ref = Doc(nlp.vocab, words=words)
        ref.cats = {str(k): float(str(k) == label) for k in range(5)}
        out.append(Example(Doc(nlp.vocab, words=words), ref))
    return out


def nlp_from(cfg_name, model_dir, **overrides):
    config = load_config(CONFIGS / cfg_name, overrides={"paths.elmo": str(model_dir), **overrides})
    return load_model_from_config(config, auto_fill=True, validate=True)


def train(nlp, examples, steps, task):
    optimizer = nlp.initialize(lambda: examples)
    losses_seen = []
    for _ in range(steps):
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses)
        losses_seen.append(losses[task])
    return optimizer, losses_seen


def assert_same_predictions(nlp, nlp2, texts, task):
    for d1, d2 in zip(nlp.pipe(texts), nlp2.pipe(texts)):
        np.testing.assert_allclose(d1._.elmo, d2._.elmo, atol=1e-5, rtol=0)
        if task == "ner":
            assert [(e.start, e.end, e.label_) for e in d1.ents] == [(e.start, e.end, e.label_) for e in d2.ents]
        else:
            assert d1.cats == pytest.approx(d2.cats, abs=1e-6)


@pytest.mark.parametrize("frozen", [True, False])
def test_ner_trains_saves_reloads(conll, tiny_model_dir, tmp_path, frozen):
    nlp = nlp_from("ner.cfg", tiny_model_dir, **{"components.elmo.frozen": frozen})
    # Fine-tuning back-propagates through the biLM: fewer sentences and steps keep it quick.
    examples = ner_examples(nlp, conll if frozen else conll[:16])
    optimizer, losses = train(nlp, examples, 30 if frozen else 15, "ner")
    assert losses[-1] < losses[0] * 0.5, losses
    bilm_names = set(dict(nlp.get_pipe("elmo").bilm.named_parameters()))
    bilm_params = {k for k in optimizer.mom1 if k[1] in bilm_names}
    assert (not bilm_params) if frozen else bilm_params
    nlp.to_disk(tmp_path / "ner")
    nlp2 = spacy.load(tmp_path / "ner")
    texts = [" ".join(w) for w, _ in conll[:10]]
    assert_same_predictions(nlp, nlp2, texts, "ner")
    if frozen:
        assert any(d.ents for d in nlp2.pipe(texts))


def test_textcat_trains_saves_reloads(sst, tiny_model_dir, tmp_path):
    nlp = nlp_from("textcat.cfg", tiny_model_dir)
    examples = textcat_examples(nlp, sst)
    _, losses = train(nlp, examples, 12, "textcat")
    assert losses[-1] < losses[0], losses
    nlp.to_disk(tmp_path / "tc")
    nlp2 = spacy.load(tmp_path / "tc")
    assert_same_predictions(nlp, nlp2, [" ".join(w) for w, _ in sst[:8]], "textcat")


def test_replace_listeners_round_trip(conll, tiny_model_dir, tmp_path):
    nlp = nlp_from("ner.cfg", tiny_model_dir)
    examples = ner_examples(nlp, conll)
    train(nlp, examples, 3, "ner")
    texts = [" ".join(w) for w, _ in conll[:6]]
    before = [[(e.start, e.end, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    assert nlp.get_pipe("elmo").listening_components == []
    nlp.remove_pipe("elmo")
    after = [[(e.start, e.end, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    assert after == before
    nlp.to_disk(tmp_path / "replaced")
    nlp2 = spacy.load(tmp_path / "replaced")
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in nlp2.pipe(texts)] == before


def test_frozen_components_and_annotating(conll, tiny_model_dir, tmp_path):
    """An elmo sourced from a saved pipeline, frozen by spaCy's own setting."""
    base = spacy.blank("en")
    base.add_pipe("elmo")
    base.config["initialize"]["components"]["elmo"] = {
        "loader": {"@misc": "spacy-elmo.ElmoLoader.v1", "path": str(tiny_model_dir)}
    }
    base.initialize()
    base.to_disk(tmp_path / "base")
    src = spacy.load(tmp_path / "base")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", source=src)
    nlp.add_pipe("ner", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "hidden_width": 32,
        "maxout_pieces": 2, "use_upper": True, "nO": None,
        "tok2vec": {"@architectures": "spacy-elmo.ElmoListener.v1", "width": 32},
    }})
    examples = ner_examples(nlp, conll[:10])
    with nlp.select_pipes(enable=["ner"]):
        optimizer = nlp.initialize(lambda: examples)
    # Frozen and not annotating: the listener has nothing to read.
    with pytest.raises(ValueError, match="annotating_components"):
        nlp.update(examples, sgd=optimizer, exclude=["elmo"])
    losses = {}
    for _ in range(3):
        nlp.update(examples, sgd=optimizer, exclude=["elmo"], annotates=["elmo"], losses=losses)
    assert losses["ner"] > 0
    doc = nlp(" ".join(conll[0][0]))
    assert doc._.elmo is not None


def test_frozen_training_cache_is_exact_and_bounded(conll, tiny_model_dir):
    nlp = nlp_from("ner.cfg", tiny_model_dir)
    examples = ner_examples(nlp, conll[:8])
    nlp.initialize(lambda: examples)
    elmo = nlp.get_pipe("elmo")
    docs = [eg.predicted for eg in examples]
    expected = elmo.predict(docs)  # computed without the cache
    first = elmo._frozen_layers(docs)  # misses: computed and stored
    assert len(elmo.frozen_cache) == len(docs)
    second = elmo._frozen_layers(docs[::-1])  # hits, in another order
    for a, b, want in zip(first, second[::-1], expected):
        np.testing.assert_array_equal(a, want)
        np.testing.assert_array_equal(b, want)
    elmo.frozen_cache = FrozenLayerCache(0)
    elmo._frozen_layers(docs)
    assert not len(elmo.frozen_cache)
    elmo.frozen_cache = FrozenLayerCache(sum(a.nbytes for a in first[:4]) / MB)  # half the docs fit
    with pytest.warns(CacheFullWarning, match=r"\[components.elmo\] cache_mb"):
        elmo._frozen_layers(docs)  # training docs that do not fit would be computed again each epoch


def test_frozen_predictions_are_remembered_after_an_update(conll, tiny_model_dir):
    """The dev docs that training evaluates again and again: computed once after the first
    update, the same arrays as without the cache; before any update nothing is kept."""
    nlp = nlp_from("ner.cfg", tiny_model_dir)
    examples = ner_examples(nlp, conll[:12])
    optimizer = nlp.initialize(lambda: examples[:8])
    elmo = nlp.get_pipe("elmo")
    dev = [nlp.make_doc(eg.reference.text) for eg in examples[8:]]
    expected = elmo.predict(dev)
    assert not len(elmo.frozen_cache)  # inference outside training keeps nothing
    nlp.update(examples[:8], sgd=optimizer)
    assert len(elmo.frozen_cache) == 8
    first = elmo.predict(dev)
    assert len(elmo.frozen_cache) == 12
    second = elmo.predict(dev)
    for a, b, want in zip(first, second, expected):
        np.testing.assert_array_equal(a, want)
        assert b is a or np.shares_memory(a, b)  # looked up, not computed again
    elmo.cfg["tensor"] = "top"
    (doc,) = elmo.pipe([nlp.make_doc(dev[0].text)])  # a hit: doc._.elmo is the remembered array
    assert not doc._.elmo.flags.writeable and doc.tensor.flags.writeable  # doc.tensor is the Doc's own
    np.testing.assert_array_equal(doc.tensor, expected[0][-1])
    elmo.cfg["tensor"] = "none"
    scores = nlp.evaluate(examples[8:])  # from the remembered layers
    elmo.frozen_cache.clear()
    again = nlp.evaluate(examples[8:])  # computed afresh
    assert {k: v for k, v in again.items() if k != "speed"} == {k: v for k, v in scores.items() if k != "speed"}
    nlp.initialize(lambda: examples[:8])
    assert not len(elmo.frozen_cache)
    elmo.predict(dev)
    assert not len(elmo.frozen_cache)


def cli_paths(cfg, tiny_model_dir, conll, sst, tmp_path):
    """``--paths`` overrides of a ``spacy train`` run on the fixture sentences of the task."""
    nlp = spacy.blank("en")
    if cfg == "ner.cfg":
        docs = [ex.reference for ex in ner_examples(nlp, conll)]
    else:
        docs = [ex.reference for ex in textcat_examples(nlp, sst)]
    DocBin(docs=docs).to_disk(tmp_path / "train.spacy")
    return ["--paths.train", str(tmp_path / "train.spacy"), "--paths.dev", str(tmp_path / "train.spacy"),
            "--paths.elmo", str(tiny_model_dir)]


def spacy_train(cfg, paths, out_dir, *extra):
    out = subprocess.run(
        [sys.executable, "-m", "spacy", "train", str(CONFIGS / cfg), "--output", str(out_dir), *paths,
         "--training.max_steps", "4", "--training.eval_frequency", "2", *extra],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


@pytest.mark.parametrize("cfg", ["ner.cfg", "textcat.cfg"])
def test_spacy_cli_debug_and_train(cfg, tiny_model_dir, conll, sst, tmp_path):
    paths = cli_paths(cfg, tiny_model_dir, conll, sst, tmp_path)
    subprocess.run([sys.executable, "-m", "spacy", "debug", "config", str(CONFIGS / cfg), *paths],
                   check=True, capture_output=True)
    spacy_train(cfg, paths, tmp_path / "out")
    nlp2 = spacy.load(tmp_path / "out" / "model-last")
    assert nlp2.pipe_names[0] == "elmo"


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", ["ner.cfg", "textcat.cfg"])
def test_spacy_train_on_gpu(cfg, tiny_model_dir, conll, sst, tmp_path):
    """The README's ``spacy train ... --gpu-id 0``: it trains on the GPU (thinc's CupyOps, the
    biLM on CUDA), and the pipeline it saves loads and runs on the CPU."""
    pytest.importorskip("cupy")
    out = spacy_train(cfg, cli_paths(cfg, tiny_model_dir, conll, sst, tmp_path), tmp_path / "out", "--gpu-id", "0")
    assert "Using GPU: 0" in out.stdout + out.stderr
    nlp2 = spacy.load(tmp_path / "out" / "model-last")
    doc = nlp2("Paris is a city in France. It rained.")
    assert isinstance(doc._.elmo, np.ndarray) and doc._.elmo.dtype == np.float32
    assert doc._.elmo.shape[1] == len(doc) and np.isfinite(doc._.elmo).all()


def test_spacy_package(tiny_model_dir, tmp_path):
    """A pipeline with an initialised elmo packages with spacy-elmo as a requirement."""
    from spacy_elmo.cli.init_pipeline import init_pipeline

    init_pipeline(tiny_model_dir, tmp_path / "pipe")
    (tmp_path / "pkg").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "spacy", "package", str(tmp_path / "pipe"), str(tmp_path / "pkg"),
         "--name", "elmo_tiny", "--version", "0.0.1"],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    meta = next((tmp_path / "pkg").glob("*/meta.json")).read_text()
    assert "spacy-elmo" in meta
    assert list((tmp_path / "pkg").glob("*/dist/*.tar.gz"))


@pytest.mark.parametrize("frozen", [True, False])
def test_update_with_empty_docs(tiny_model_dir, frozen):
    nlp = nlp_from("ner.cfg", tiny_model_dir, **{"components.elmo.frozen": frozen})
    examples = [Example(nlp.make_doc("Hello Paris"), Doc(nlp.vocab, words=["Hello", "Paris"], ents=["O", "B-LOC"]))]
    optimizer = nlp.initialize(lambda: examples)
    empty = [Example(nlp.make_doc(""), Doc(nlp.vocab, words=[]))]
    assert nlp.update(empty, sgd=optimizer)["ner"] == 0.0
    assert nlp.update(examples + empty, sgd=optimizer)["ner"] > 0.0


def test_gate_arguments(tmp_path):
    gate = load_script("gate")
    assert gate.parse_against(["textcat=42.42", "ner=90.09"]) == {"textcat": 42.42, "ner": 90.09}
    for bad in (["pos=90"], ["ner"], ["ner=high"], []):
        with pytest.raises(ValueError):
            gate.parse_against(bad)
    (tmp_path / "run" / "model-best").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="model-best"):
        gate.best_score(tmp_path / "missing", gate.TASKS["ner"])
    (tmp_path / "run" / "model-best" / "meta.json").write_text('{"performance": {"ents_f": 0.91234}}')
    assert gate.best_score(tmp_path / "run", gate.TASKS["ner"]) == 91.23
    with pytest.raises(KeyError, match="cats_micro_f"):
        gate.best_score(tmp_path / "run", gate.TASKS["textcat"])
    # the budget of project.yml (as the recorded seeds ran), less what the extra arguments set
    budget = gate.project_budget()
    assert budget[:2] == ["--training.max_steps", "2000"] and "--training.eval_frequency" in budget
    assert gate.with_budget([]) == budget
    args = gate.with_budget(["--training.max_steps", "4", "--components.elmo.cache_mb", "4096"])
    assert args.count("--training.max_steps") == 1 and args[-4:] == ["--training.max_steps", "4", "--components.elmo.cache_mb", "4096"]


def test_gate_runs_spacy_train_and_resumes(tiny_model_dir, conll, sst, tmp_path):
    """scripts/gate.py with real ``spacy train`` runs: a task under its figure stops the gate;
    run again, finished seeds are read back rather than trained again."""
    nlp = spacy.blank("en")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    ner_docs = [ex.reference for ex in ner_examples(nlp, conll)]
    sst_docs = [ex.reference for ex in textcat_examples(nlp, sst)]
    for name, docs in (("conll2003", ner_docs), ("sst5", sst_docs)):
        for split in ("train", "dev"):
            DocBin(docs=docs).to_disk(corpus / f"{name}_{split}.spacy")
    out = tmp_path / "gate"
    base = [sys.executable, str(REPO / "scripts" / "gate.py"), str(tiny_model_dir), "--output", str(out),
            "--corpus", str(corpus), "--seeds", "0,1"]
    extra = ["--", "--training.max_steps", "4", "--training.eval_frequency", "2"]
    first = subprocess.run([*base, "--against", "ner=100.5", "--against", "textcat=0", *extra],
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    verdict = json.loads((out / "gate.json").read_text())
    assert verdict["ships"] is False and verdict["not_run"] == ["textcat"] and verdict["unfinished"] == {}
    ner = verdict["tasks"]["ner"]
    assert not ner["passed"] and len(ner["scores"]) == 2
    for seed, score in zip((0, 1), ner["scores"]):
        meta = json.loads((out / f"ner{seed}" / "model-best" / "meta.json").read_text())
        assert score == round(100 * meta["performance"]["ents_f"], 2)
    assert ner["mean"] == round(sum(ner["scores"]) / 2, 2)
    assert not (out / "textcat0").exists()
    stamp = (out / "ner0" / "score.json").stat().st_mtime_ns
    # two runs at once (--jobs 2): the textcat seeds train side by side, each logging to its folder
    second = subprocess.run([*base, "--against", "ner=-1", "--against", "textcat=-1", "--jobs", "2", *extra],
                            capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "ner seed 0: spacy train" not in second.stdout and "textcat seed 1: spacy train" in second.stdout
    assert (out / "ner0" / "score.json").stat().st_mtime_ns == stamp
    assert not (out / "ner0" / "train.log").exists()
    for seed in (0, 1):
        assert "Training pipeline" in (out / f"textcat{seed}" / "train.log").read_text()
    verdict = json.loads((out / "gate.json").read_text())
    assert verdict["ships"] is True and verdict["not_run"] == []
    assert verdict["tasks"]["ner"]["scores"] == ner["scores"] and len(verdict["tasks"]["textcat"]["scores"]) == 2
    bad = subprocess.run([*base, "--against", "pos=1"], capture_output=True, text=True)
    assert bad.returncode == 1 and "expected TASK=MEAN" in bad.stderr
    # three seeds two at a time, into a fresh folder: seeds 0 and 1 score as they did one at a time;
    # textcat's seed 0 starts before NER's seed 2 has finished, so when NER fails its score is kept as unfinished
    parallel = subprocess.run([*base[:4], str(tmp_path / "gate_parallel"), *base[5:8], "0,1,2", "--against", "ner=100.5",
                               "--against", "textcat=0", "--jobs", "2", *extra], capture_output=True, text=True)
    assert parallel.returncode == 0, parallel.stderr[-2000:]
    verdict = json.loads((tmp_path / "gate_parallel" / "gate.json").read_text())
    assert verdict["ships"] is False and verdict["tasks"]["ner"]["scores"][:2] == ner["scores"]
    unfinished = verdict["unfinished"]["textcat"]
    assert verdict["not_run"] == [] and "textcat" not in verdict["tasks"] and unfinished["seeds"][0] == 0
    assert unfinished["scores"] == [json.loads((tmp_path / "gate_parallel" / f"textcat{seed}" / "score.json").read_text())["score"]
                                    for seed in unfinished["seeds"]]
    assert f"textcat unfinished: seed{'s' if len(unfinished['seeds']) > 1 else ''} 0" in parallel.stdout
    failing = subprocess.run([*base[:4], str(tmp_path / "gate_failing"), *base[5:], "--against", "ner=-1", "--jobs", "2",
                              "--", "--training.max_steps", "many"], capture_output=True, text=True)
    assert failing.returncode == 1 and "spacy train for ner seed" in failing.stderr, failing.stderr[-2000:]
    assert "train.log" in failing.stderr and not (tmp_path / "gate_failing" / "gate.json").exists()
    for args, message in ((["--jobs", "0"], "expected at least 1"), (["--seeds", "0,0"], "given twice")):
        bad = subprocess.run([*base, "--against", "ner=-1", *args], capture_output=True, text=True)
        assert bad.returncode == 1 and message in bad.stderr, bad.stderr[-2000:]
    other = subprocess.run([*base, "--against", "ner=-1", "--threads", "2", *extra], capture_output=True, text=True)
    assert other.returncode == 1 and "holds a run with other arguments" in other.stderr
