"""``embed --precision``: int8 vectors close to float32 in every local mode, the
precision recorded in the output and checked on resume, and a precision that does
not fit the device refused before anything is written."""
import json

import h5py
import numpy as np
import pytest
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.embed import EmbedSettings, embed_docbin
from spacy_elmo.embed.hdf5 import META_ATTR
from spacy_elmo.embed.shards import ShardIndex

from conftest import token_cosines
from test_embed import SAME, corpus, write_lines


def datasets(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f if k != "sentence_to_index"}, json.loads(f.attrs[META_ATTR])


def assert_close_but_not_equal(approx, exact):
    """Per-token cosine > 0.97 in every layer, and not the float32 vectors themselves. (The
    AllenNLP tiny fixture gives 0.99+; the seeded random tiny biLM used without ../shared,
    whose clips bite, about 0.984.)"""
    assert approx.shape == exact.shape
    a, b = approx.reshape(-1, approx.shape[-1]), exact.reshape(-1, exact.shape[-1])
    cos = token_cosines(a, b)
    assert cos.min() > 0.97, cos.min()
    assert np.abs(approx - exact).max() > 1e-4


def cli(*args):
    result = CliRunner().invoke(app, ["embed", *map(str, args)])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    return result, errors


def test_int8_close_to_float32_in_every_local_mode(tmp_path, tiny_dir):
    src = write_lines(tmp_path / "in.txt", corpus(12))
    base = ["--weights", tiny_dir, "--batch-size", 4, "--quiet"]
    for name, extra in [("f32", []), ("int8", ["--precision", "int8"]), ("int8x2", ["--precision", "int8", "--n-process", 2])]:
        result, _ = cli(src, tmp_path / f"{name}.h5", *base, *extra)
        assert result.exit_code == 0, result.output
    exact, meta = datasets(tmp_path / "f32.h5")
    int8, meta8 = datasets(tmp_path / "int8.h5")
    int8x2, _ = datasets(tmp_path / "int8x2.h5")
    assert (meta["precision"], meta8["precision"]) == ("float32", "int8")
    assert set(int8) == set(exact) == set(int8x2) == {str(i) for i in range(12)}
    for key in exact:
        assert_close_but_not_equal(int8[key], exact[key])
        np.testing.assert_allclose(int8x2[key], int8[key], **SAME)  # the workers use int8 too

    import spacy

    nlp = spacy.blank("en")
    docbin = tmp_path / "in.spacy"
    DocBin(docs=[nlp("The river bank was flooded. It rained."), nlp("Hello world")]).to_disk(docbin)
    outs = {}
    for precision in ("float32", "int8"):
        outs[precision] = tmp_path / f"{precision}.spacy"
        embed_docbin(docbin, outs[precision], EmbedSettings(weights=str(tiny_dir), precision=precision), progress=False)
    exact_docs, int8_docs = (list(DocBin().from_disk(outs[p]).get_docs(nlp.vocab)) for p in ("float32", "int8"))
    for doc8, doc in zip(int8_docs, exact_docs):
        assert_close_but_not_equal(doc8._.elmo, doc._.elmo)


def test_resume_with_another_precision_is_refused(tmp_path, tiny_dir):
    src = write_lines(tmp_path / "in.txt", corpus(6))
    out = tmp_path / "out.h5"
    args = [src, out, "--weights", tiny_dir, "--quiet"]
    assert cli(*args)[0].exit_code == 0
    result, errors = cli(*args, "--precision", "int8")
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert "precision: 'float32' in the file, 'int8' now" in errors[0]

    with h5py.File(out, "a") as f:  # an output written before --precision existed
        meta = json.loads(f.attrs[META_ATTR])
        del meta["precision"]
        f.attrs[META_ATTR] = json.dumps(meta)
    result, _ = cli(*args)
    assert result.exit_code == 0 and "Embedded 0 of 6 lines, 6 already done" in result.output, result.output
    result, errors = cli(*args, "--precision", "int8")
    assert result.exit_code == 1 and "precision: 'float32' in the file, 'int8' now" in errors[0], result.output

    index_meta = {k: v for k, v in meta.items()}  # the Ray engine's shard index: the same rule
    ShardIndex(tmp_path / "shards", index_meta)
    ShardIndex(tmp_path / "shards", dict(index_meta, precision="float32"))
    with pytest.raises(ValueError, match="precision: 'float32' in the file, 'int8' now"):
        ShardIndex(tmp_path / "shards", dict(index_meta, precision="int8"))


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--precision", "bf16"], "precision 'bf16' is for CUDA GPUs"),
        (["--precision", "fp16", "--n-process", "2"], "precision 'fp16' is for CUDA GPUs"),
        (["--precision", "int4"], "unknown precision 'int4'"),
        (["--precision", "bf16", "--engine", "ray"], "precision 'bf16' is for CUDA GPUs"),
        (["--precision", "int8", "--engine", "ray", "--num-gpus-per-worker", "1"], "runs on the CPU only"),
    ],
)
def test_precision_that_does_not_fit_is_refused_before_writing(tmp_path, tiny_dir, extra, message):
    src = write_lines(tmp_path / "in.txt", corpus(3))
    out = tmp_path / "out.h5"
    result, errors = cli(src, out, "--weights", tiny_dir, *extra)
    assert result.exit_code == 1 and len(errors) == 1 and message in errors[0], result.output
    assert errors[0].startswith("Error: --precision")
    assert not out.exists() and not (tmp_path / "out.h5.shards").exists()
    docbin = tmp_path / "in.spacy"
    DocBin().to_disk(docbin)
    result, errors = cli(docbin, tmp_path / "out.spacy", "--weights", tiny_dir, "--precision", "bf16")
    assert result.exit_code == 1 and "precision 'bf16' is for CUDA GPUs" in errors[0], result.output
    assert not (tmp_path / "out.spacy").exists()
