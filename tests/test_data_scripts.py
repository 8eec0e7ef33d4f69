"""The project's data converters (scripts/convert_*.py), timing wrapper and report."""
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import spacy
from spacy.tokens import DocBin

from conftest import load_script

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
# The probes on the shipped model run with --threads 1: torch's default of one thread per core
# makes each small step wait for the slower thread whenever another process holds a core (the
# WSD probe took 163 s so on a 2-core machine beside a training run, against 36 s on one thread).


convert_ner = load_script("convert_ner")
convert_sst = load_script("convert_sst")
report = load_script("report")
timed = load_script("timed")


@pytest.fixture(scope="module")
def conll_dev(shared_dir):
    path = shared_dir / "data" / "conll2003" / "valid.txt.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="module")
def sst_dev(shared_dir):
    path = shared_dir / "data" / "sst" / "dev.txt.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    return path


def _roundtrip(docs, tmp_path):
    path = tmp_path / "out.spacy"
    DocBin(docs=docs).to_disk(path)
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


def test_conll_dev_counts(conll_dev, tmp_path):
    docs, stats = convert_ner.convert_iob(conll_dev)
    docs = _roundtrip(docs, tmp_path)
    assert len(docs) == 3250
    assert sum(len(d) for d in docs) == 51362
    labels = Counter(ent.label_ for d in docs for ent in d.ents)
    assert labels == {"PER": 1842, "LOC": 1837, "ORG": 1341, "MISC": 922}
    assert stats.documents == 216 and stats.repaired_tags == 0 and stats.dropped_lines == 0
    assert all(not d[-1].whitespace_ for d in docs)
    assert docs[0].text == "CRICKET - LEICESTERSHIRE TAKE OVER AT TOP AFTER INNINGS VICTORY ."


def test_conll_dev_by_document(conll_dev):
    docs, _ = convert_ner.convert_iob(conll_dev, by_document=True)
    assert len(docs) == 216
    assert sum(len(list(d.sents)) for d in docs) == 3250
    assert sum(len(d.ents) for d in docs) == 1842 + 1837 + 1341 + 922


def test_read_iob_quirks(tmp_path):
    # -DOCSTART-, tabs, a tagless U+FEFF line, an I- tag that starts an entity, no final newline
    text = "-DOCSTART- -X- -X- O\n\nLil\tB-person\nSly-\tI-person\n\ufeff\nTurn\tI-work\nUp\tI-work\n\t\nhi\tO"
    path = tmp_path / "x.conll.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    stats = convert_ner.ReadStats()
    sents = list(convert_ner.read_iob(path, stats))
    assert [s.words for s in sents] == [["Lil", "Sly-", "Turn", "Up"], ["hi"]]
    assert sents[0].tags == ["B-person", "I-person", "B-work", "I-work"]
    assert stats.dropped_lines == 1 and stats.repaired_tags == 1
    doc = convert_ner.sentence_doc(spacy.blank("en").vocab, sents[0])
    assert [(e.text, e.label_) for e in doc.ents] == [("Lil Sly-", "person"), ("Turn Up", "work")]


def test_sst_dev_counts(sst_dev, tmp_path):
    docs = _roundtrip(convert_sst.convert_sst(sst_dev), tmp_path)
    assert len(docs) == 1101
    assert sum(len(d) for d in docs) == 21274
    counts = convert_sst.label_counts(docs)
    assert [counts[label] for label in convert_sst.LABELS] == [139, 289, 229, 279, 165]
    assert all(sorted(d.cats.values()) == [0.0] * 4 + [1.0] for d in docs)
    assert docs[0].text == "It's a lovely film with lovely performances by Buy and Accorsi."
    assert docs[0].cats["positive"] == 1.0


@pytest.mark.parametrize(
    "escaped,plain",
    [("-LRB-", "("), ("-RRB-", ")"), ("-LSB-", "["), ("-RCB-", "}"), ("``", '"'), ("''", '"'),
     ("`", "'"), ("writer\\/director", "writer/director"), ("\\*\\*\\*", "***"), ("film", "film")],
)
def test_unescape_ptb(escaped, plain):
    assert convert_sst.unescape_ptb(escaped) == plain


def test_parse_tree_leaves():
    line = "(1 (2 (2 -LRB-) (2 2\u00a01\\/2)) (1 (2 -RRB-) (0 (2 ``) (0 bad) (2 '') (2 .))))\n"
    root, leaves = convert_sst.parse_tree(line)
    assert root == 1
    assert leaves == ["-LRB-", "2\u00a01\\/2", "-RRB-", "``", "bad", "''", "."]
    doc = convert_sst.tree_doc(spacy.blank("en").vocab, line)
    assert [t.text for t in doc] == ["(", "2\u00a01/2", ")", '"', "bad", '"', "."]
    assert doc.text == '(2\u00a01/2) "bad".'
    assert doc.cats["negative"] == 1.0
    with pytest.raises(ValueError):
        convert_sst.parse_tree("(2 (2 a) (2 b)")


def test_timed(tmp_path):
    out = tmp_path / "t" / "timing.json"
    assert timed.run_timed(out, ["python", "-c", "pass"]) == 0
    record = json.loads(out.read_text())
    assert record["returncode"] == 0 and record["seconds"] >= 0
    assert record["command"][1:] == ["-c", "pass"]


def _write_run(root, name, scores, pipeline, seconds):
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics" / f"{name}.json").write_text(json.dumps(scores))
    model = root / "training" / name / "model-best"
    model.mkdir(parents=True)
    (root / "training" / name / "timing.json").write_text(json.dumps({"seconds": seconds, "returncode": 0}))
    (model / "config.cfg").write_text(
        f"[nlp]\nlang = \"en\"\npipeline = {json.dumps(pipeline)}\n\n[training]\nmax_steps = 4000\n"
    )


def test_report_table(tmp_path):
    _write_run(tmp_path, "ner_baseline", {"ents_f": 0.8512, "speed": 9876.5}, ["tok2vec", "ner"], 3725)
    _write_run(tmp_path, "ner", {"ents_f": 0.9001, "speed": 1234.0}, ["elmo", "ner"], 95.4)
    _write_run(tmp_path, "textcat_baseline", {"cats_micro_f": 0.4, "cats_macro_f": 0.3, "speed": 5000}, ["tok2vec", "textcat"], 61)
    (tmp_path / "metrics" / "notes.json").write_text('{"something": 1}')  # not a run: ignored
    out = tmp_path / "metrics" / "report.md"
    text = report.write_report(tmp_path / "metrics", tmp_path / "training", out, tmp_path / "metrics" / "lw.png")
    assert out.read_text() == text
    rows = [line for line in text.splitlines() if line.startswith("| NER") or line.startswith("| Sentiment")]
    assert rows == [
        "| NER (CoNLL-2003) | spaCy tok2vec (baseline) | `ner_baseline` | 85.12 F1 | 9,876 | 1:02:05 | 4000 |",
        "| NER (CoNLL-2003) | ELMo | `ner` | 90.01 F1 | 1,234 | 1:35 | 4000 |",
        "| Sentiment (SST-5) | spaCy tok2vec (baseline) | `textcat_baseline` | 40.00 accuracy | 5,000 | 1:01 | 4000 |",
    ]
    # The ELMo run has no loadable pipeline here: reported as such, not a crash.
    assert "## Not reported" in text and "`ner`" in text.split("## Not reported")[1]


def _thinc_model_with_mix():
    import torch
    from thinc.api import Linear, chain

    from spacy_elmo.layers.listener import build_scalar_mix, get_scalar_mixes

    model = chain(build_scalar_mix(n_layers=3, layer_norm=False, dropout=0.0), Linear(4, 4))
    (mix,) = get_scalar_mixes(model)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([1.0, 0.0, -1.0]))
        mix.gamma.fill_(2.5)
    return model


def test_find_scalar_mix():
    import math

    mix = report.find_scalar_mix(_thinc_model_with_mix())
    weights, gamma = report.mix_values(mix)
    z = math.e + 1 + 1 / math.e
    assert weights == pytest.approx([math.e / z, 1 / z, 1 / (math.e * z)], rel=1e-6)
    assert gamma == pytest.approx(2.5)


def test_find_scalar_mix_none():
    from thinc.api import Linear

    with pytest.raises(ValueError, match="no ELMo scalar mix"):
        report.find_scalar_mix(Linear(2, 2))


def test_plot_layer_weights(tmp_path):
    pytest.importorskip("matplotlib")
    entries = [
        report.LayerWeights("ner", "NER (CoNLL-2003)", "ner", [0.2, 0.5, 0.3], 1.4),
        report.LayerWeights("textcat", "Sentiment (SST-5)", "textcat", [0.1, 0.3, 0.6], 0.8),
    ]
    path = report.plot_layer_weights(entries, tmp_path / "plots" / "lw.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = report.render_weights_table(entries)
    assert "| NER (CoNLL-2003) | `ner` | ner | 0.200 | 0.500 | 0.300 | 1.400 |" in table


def test_read_pos(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n", encoding="utf-8")
    probe_pos = load_script("probe_pos")
    assert probe_pos.read_pos(path) == [(["EU", "rejects"], ["NNP", "VBZ"]), (["Peter"], ["NNP"])]
    path.write_text("EU NNP\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected 'token POS chunk NER'"):
        probe_pos.read_pos(path)


def test_pos_probe_on_shipped_model(conll_dev):
    """The linear POS probe of the shipped biLM: its LSTM layers beat the most-frequent-tag
    baseline and the context-free char-CNN layer (trained on 500 train sentences, scored on the first
    1,000 dev sentences)."""
    import subprocess

    train = conll_dev.parent / "train.txt.gz"
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "probe_pos.py"), str(train), str(conll_dev), "--max-train", "500",
         "--max-dev", "1000", "--epochs", "3", "--threads", "1"], check=True, capture_output=True, text=True,
    ).stdout
    acc = {line[:22].strip(): float(line[22:].strip().rstrip("%")) for line in out.splitlines() if line.endswith("%")}
    assert set(acc) == {"most frequent tag", "layer 0 (char CNN)", "layer 1 (LSTM 1)", "layer 2 (LSTM 2)", "mean of layers"}
    assert acc["layer 1 (LSTM 1)"] > acc["most frequent tag"] + 3, acc
    assert acc["layer 1 (LSTM 1)"] > acc["layer 0 (char CNN)"] + 2, acc


NAF = """<?xml version='1.0' encoding='UTF-8'?>
<NAF><text>
<wf id="w0" sent="1">We</wf><wf id="w1" sent="1">walked_along</wf><wf id="w2" sent="1">the</wf>
<wf id="w3" sent="1">bank</wf><wf id="w4" sent="2">Good</wf><wf id="w5" sent="2">news</wf>
</text><terms>
<term id="t0" lemma="We"><span><target id="w0"/></span></term>
<term id="t1" lemma="walk_along"><span><target id="w1"/></span><externalReferences>
<externalRef resource="WordNet-eng30" reftype="synset" reference="eng30-01912893-v"/></externalReferences></term>
<term id="t3" lemma="Bank"><span><target id="w3"/></span><externalReferences>
<externalRef resource="WordNet-eng171" reftype="synset" reference="eng171-09091234-n"/>
<externalRef resource="WordNet-eng30" reftype="synset" reference="eng30-09213565-n"/></externalReferences></term>
<term id="t4" lemma="good"><span><target id="w4"/></span><externalReferences>
<externalRef resource="WordNet-eng30" reftype="synset" reference="eng30-01123148-s"/></externalReferences></term>
</terms></NAF>"""


def test_parse_naf_and_archive(tmp_path):
    """NAF sense annotations: multiword tokens split, WordNet 3.0 synsets only, satellites are adjectives."""
    import io
    import tarfile

    probe_wsd = load_script("probe_wsd")
    first, second = probe_wsd.parse_naf(io.BytesIO(NAF.encode()))
    assert first.words == ["We", "walked", "along", "the", "bank"]
    assert [(i.positions, i.lemma, i.synsets) for i in first.instances] == [
        ([1, 2], ("walk_along", "v"), {"eng30-01912893-v"}), ([4], ("bank", "n"), {"eng30-09213565-n"})]
    assert second.words == ["Good", "news"] and second.instances[0].lemma == ("good", "a")
    archive = tmp_path / "wsd.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in [("wsd_corpora/semcor3.0/brown1/a.naf", NAF), ("wsd_corpora/senseval2/d00.naf", "<NAF><text")]:
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    assert len(probe_wsd.read_archive(archive, "brown1")) == 2
    with pytest.raises(ValueError, match="no sense-annotated words under 'brown2'"):
        probe_wsd.read_archive(archive, "brown2")
    with pytest.raises(ValueError, match="d00.naf: not valid NAF XML"):
        probe_wsd.read_archive(archive, "senseval2")
    # Read lazily, the archive is parsed only as far as asked: the broken file after a.naf is never reached.
    from itertools import islice

    assert [s.words[0] for s in islice(probe_wsd.iter_archive(archive, "wsd_corpora"), 2)] == ["We", "Good"]
    with pytest.raises(ValueError, match="d00.naf: not valid NAF XML"):
        list(probe_wsd.iter_archive(archive, "wsd_corpora"))


def test_wsd_probe_on_shipped_model(shared_dir):
    """Nearest-sense WSD (senses from the first 2,000 useful sentences of SemCor's brown2 part,
    scored on Senseval-2): the LSTM layers know far more about a word's sense than the
    context-free char-CNN layer."""
    import subprocess

    archive = shared_dir / "data" / "semcor" / "wsd_corpora_semcor3.0_and_allwords_eval.naf.tar.gz"
    if not archive.exists():
        pytest.skip(f"{archive} not found")
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "probe_wsd.py"), str(archive), "--train-part", "brown2", "--max-train-sentences", "2000",
         "--threads", "1"],
        check=True, capture_output=True, text=True,
    ).stdout
    acc = {line[:30].strip(): float(line[30:].strip().rstrip("%")) for line in out.splitlines() if line.endswith("%")}
    assert set(acc) == {"most frequent sense", "layer 0 (char CNN)", "layer 1 (LSTM 1)", "layer 2 (LSTM 2)", "mean of layers"}
    assert "2,225 senseval2 sense-annotated words" in out
    assert acc["layer 2 (LSTM 2)"] > acc["layer 0 (char CNN)"] + 5, acc
    assert acc["layer 1 (LSTM 1)"] > acc["layer 0 (char CNN)"] + 5, acc


def test_sense_separation_measures():
    import numpy as np

    probe_senses = load_script("probe_senses")
    # Two senses on two axes, with a little spread: apart, and each occurrence nearest its own sense.
    apart = np.array([[1, 0.1], [1, -0.1], [1, 0], [0.1, 1], [-0.1, 1]])
    r = probe_senses.separation(apart, ["a", "a", "a", "b", "b"])
    assert r["accuracy"] == 1.0 and r["same"] > 0.95 and r["other"] < 0.2
    # Identical vectors: nothing to tell the senses apart, so each tie goes to the most frequent sense.
    same = probe_senses.separation(np.ones((5, 3)), ["b", "a", "a", "a", "b"])
    assert same["same"] == pytest.approx(1.0) and same["other"] == pytest.approx(1.0) and same["accuracy"] == 0.6
    for bad in ["bank", "bank:x", ":n"]:
        with pytest.raises(Exception, match="LEMMA:POS"):
            probe_senses.parse_word(bad)


def test_sense_probe_on_shipped_model(shared_dir, tmp_path):
    """Every annotated "interest" (noun) of SemCor's brown2 part: the top LSTM layer tells its
    senses apart far better than the most frequent sense; the context-free layer 0 cannot."""
    import subprocess

    archive = shared_dir / "data" / "semcor" / "wsd_corpora_semcor3.0_and_allwords_eval.naf.tar.gz"
    if not archive.exists():
        pytest.skip(f"{archive} not found")
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "probe_senses.py"), str(archive), "--part", "brown2", "--word", "interest:n",
         "--word", "zzyzx:n", "--threads", "1", "--output", str(tmp_path / "senses.txt")],
        check=True, capture_output=True, text=True,
    ).stdout
    assert "interest:n in brown2: 76 occurrences of 7 senses" in out and "most frequent sense 32.9%" in out
    assert "zzyzx:n: fewer than two senses" in out
    rows = {line[:18].strip(): line[18:].split() for line in out.splitlines() if line.startswith(("layer", "mean"))}
    assert set(rows) == {"layer 0 (char CNN)", "layer 1 (LSTM 1)", "layer 2 (LSTM 2)", "mean of layers"}
    same, other, acc = (float(x.rstrip("%")) for x in rows["layer 2 (LSTM 2)"])
    assert same > other + 0.03 and acc > 32.9 + 10, rows
    assert float(rows["layer 0 (char CNN)"][2].rstrip("%")) < 32.9 + 1, rows
    assert out.strip() in (tmp_path / "senses.txt").read_text(encoding="utf-8")


def test_model_history_plot(tmp_path):
    """The quality plot draws every record of a history file, against tokens seen and against CPU hours."""
    pytest.importorskip("matplotlib")
    import subprocess

    def record(label, tokens, hours, ppl):
        layers = {"layer 0 (char CNN)": 50.0, "layer 1 (LSTM 1)": 60.0, "layer 2 (LSTM 2)": 61.0, "mean of layers": 59.0}
        return {"label": label, "tokens_seen": tokens, "cpu_hours": hours, "gpu_hours": 0.0, "perplexity": ppl,
                "unigram_perplexity": 500.0, "pos": {"most frequent tag": 89.0, **layers},
                "wsd": {"most frequent sense": 62.0, **layers}, "demo": {"bank": [0.9, 0.95], "play": [0.95, 0.9]}}

    history = tmp_path / "history.json"
    # out of order, and a later run that saw fewer tokens per hour: each row still plots left to right
    history.write_text(json.dumps([record("b", 30e6, 2.0, 90.0), record("a", 20e6, 1.0, 120.0),
                                   record("c", 25e6, 3.0, 95.0)]), encoding="utf-8")
    out = tmp_path / "plots" / "quality.png"
    done = subprocess.run([sys.executable, str(SCRIPTS / "model_history.py"), "plot", str(history), str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"label": "no figures", "tokens_seen": 1e6}]), encoding="utf-8")
    failed = subprocess.run([sys.executable, str(SCRIPTS / "model_history.py"), "plot", str(broken), str(out)],
                            capture_output=True, text=True)
    assert failed.returncode != 0 and "cpu_hours" in failed.stderr
