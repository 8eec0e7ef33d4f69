"""The benchmarks' references: the step-by-step inference reference against the golden
fixture, a smoke run of the inference benchmark, and the pretraining step of 778aaa6 against
the trainer."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo.bilm import ElmoBiLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from reference import ReferenceElmo, char_ids  # noqa: E402
from reference_pretrain import ReferenceStep  # noqa: E402


@pytest.mark.parametrize("batch_size", [1, 5, 32])
def test_reference_matches_fixture(tiny_bilm: ElmoBiLM, golden_dir: Path, batch_size: int) -> None:
    sentences = json.loads((golden_dir / "sentences.json").read_text(encoding="utf-8"))
    expected = np.load(golden_dir / "expected.npz")
    reference = ReferenceElmo(tiny_bilm.options, tiny_bilm.state_dict())
    for i, acts in enumerate(reference.embed_sentences(sentences, batch_size=batch_size)):
        np.testing.assert_allclose(acts, expected[f"activations_{i:02d}"], atol=1e-5, rtol=1e-5)
        np.testing.assert_array_equal([char_ids(t) for t in sentences[i]], expected[f"char_ids_{i:02d}"][1:-1])


def test_benchmark_smoke(shared_dir: Path) -> None:
    if not (shared_dir / "data" / "conll2003" / "valid.txt.gz").exists():
        pytest.skip("CoNLL-2003 dev not available")
    from bench_inference import main

    (row,) = main(["--shapes", "tiny", "--max-sentences", "5", "--ref-tokens", "40", "--threads", "1"])
    assert row["b_diff"] < 1e-5
    assert row["a_tok_s"] > 0 and row["b_warm_tok_s"] > 0


def test_reference_matches_the_generated_tiny_model(tmp_path: Path) -> None:
    """Without the golden fixture: the step-by-step reference and the model agree on the
    seeded random model of tests/make_tiny.py, whose clips change the outputs."""
    from make_tiny import SENTENCES, write_tiny

    folder = write_tiny(tmp_path / "tiny")
    bilm = ElmoBiLM.from_allennlp(folder / "options.json", folder / "weights.hdf5")
    reference = ReferenceElmo(bilm.options, bilm.state_dict())
    want = reference.embed_sentences(SENTENCES, batch_size=5)
    for got, acts in zip(bilm.embed_sentences(SENTENCES), want):
        np.testing.assert_allclose(got, acts, atol=1e-5, rtol=1e-5)
    for clip in ("cell_clip", "proj_clip"):
        unclipped = ReferenceElmo(bilm.options, bilm.state_dict())
        setattr(unclipped, clip, None)
        diff = max(np.abs(a - b).max() for a, b in zip(unclipped.embed_sentences(SENTENCES), want))
        assert diff > 0.1, (clip, diff)
    again = write_tiny(tmp_path / "again")
    assert json.loads((again / "options.json").read_text()) == bilm.options
    same = ElmoBiLM.from_allennlp(again / "options.json", again / "weights.hdf5")
    for name, value in bilm.state_dict().items():
        torch.testing.assert_close(same.state_dict()[name], value, rtol=0, atol=0)


def test_pretrain_reference_step_tracks_the_trainer(wikitext_slice: Path) -> None:
    """bench_pretrain's yardstick: 778aaa6's step, in float32 and under bf16 autocast, gives the
    trainer's losses on the same weights and batches, step after step (the tiny preset has no
    dropout; the trainer does less arithmetic, not other arithmetic)."""
    from conftest import tiny_config
    from spacy_elmo.pretrain.trainer import Trainer

    losses = {}
    for amp, tolerance in (("none", 1e-5), ("bf16", 1e-3)):
        new, old = (Trainer(tiny_config(wikitext_slice, **{"training.amp": amp, "training.device": "cpu"}),
                            wikitext_slice / f"reference_{amp}_{name}", log=lambda s: None) for name in ("new", "old"))
        ref = ReferenceStep(old.bilm, old.training, old.train.ids, old.offsets, old.lengths, old.char_table,
                            old.train_targets, amp=amp)
        losses[amp] = []
        for _ in range(3):
            batch = ref.next_batch()
            np.testing.assert_array_equal(batch, new._next_batch())
            want, got = ref(batch), new.train_step(batch)[0]
            assert abs(got - want) <= tolerance * abs(want), (amp, got, want)
            losses[amp].append(want)
    assert losses["bf16"] != losses["none"]  # the reference did run under autocast
    with pytest.raises(ValueError, match="amp must be"):
        ReferenceStep(old.bilm, old.training, old.train.ids, old.offsets, old.lengths, old.char_table,
                      old.train_targets, amp="fp16")
