"""The benchmark's step-by-step reference against the golden fixture, and a smoke run
of the inference benchmark."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from spacy_elmo.bilm import ElmoBiLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from reference import ReferenceElmo, char_ids  # noqa: E402


@pytest.mark.parametrize("batch_size", [1, 5, 32])
def test_reference_matches_fixture(tiny_bilm: ElmoBiLM, tiny_dir: Path, batch_size: int) -> None:
    sentences = json.loads((tiny_dir / "sentences.json").read_text(encoding="utf-8"))
    expected = np.load(tiny_dir / "expected.npz")
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
