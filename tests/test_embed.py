"""``embed``: AllenNLP's HDF5 layout, vectors equal to the component's, resume after
a real kill, bad input, worker processes, the DocBin mode."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from conftest import make_elmo_nlp
from spacy_elmo.cli import app
from spacy_elmo.embed import EmbedSettings, embed_docbin, embed_file

SAME = dict(atol=1e-5, rtol=0)
WORDS = "the river bank was flooded after heavy rain and we walked along its edge at night".split()


def corpus(n: int, blank_every: int = 0):
    """Sentences of varied lengths (and blank lines every ``blank_every`` lines)."""
    lines = []
    for i in range(n):
        if blank_every and i % blank_every == blank_every - 1:
            lines.append("")
        else:
            k = 1 + (i * 7) % len(WORDS)
            lines.append(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(k)) + " .")
    return lines


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the test process dies (e.g. killed by a timeout),
    so that no run outlives its test."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_run(cmd, log: Path) -> subprocess.Popen:
    """Start an embed run whose stderr goes to ``log`` (a file, not a pipe: a full pipe
    would block the run)."""
    with log.open("wb") as err:
        return subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def component_layers(nlp, words):
    """``doc._.elmo`` of one whitespace-tokenized sentence, through the component."""
    doc = Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1) if words else None)
    return nlp.get_pipe("elmo")(doc)._.elmo


def test_hdf5_layout_and_vectors_equal_the_component(tmp_path, tiny_dir, elmo_nlp):
    lines = corpus(23, blank_every=10) + ["  the   river  bank  "]
    src = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / "out.h5"
    report = embed_file(src, out, EmbedSettings(weights=str(tiny_dir)), batch_size=5, progress=False)
    assert (report.n_lines, report.n_embedded, report.n_skipped) == (24, 24, 0)
    width = elmo_nlp.get_pipe("elmo").bilm.output_dim
    with h5py.File(out, "r") as f:
        assert set(f.keys()) == {str(i) for i in range(24)} | {"sentence_to_index"}
        assert f["sentence_to_index"].shape == (1,)
        mapping = json.loads(f["sentence_to_index"][0])
        assert mapping == {line.strip(): str(i) for i, line in enumerate(lines)}
        for i, line in enumerate(lines):
            data = f[str(i)]
            assert data.dtype == np.float32
            assert data.shape == (3, len(line.split()), width)
            if line.split():
                np.testing.assert_allclose(data[()], component_layers(elmo_nlp, line.split()), **SAME)


@pytest.mark.parametrize("layers,dtype", [("top", "float32"), ("average", "float16")])
def test_top_and_average_layers(tmp_path, tiny_dir, elmo_nlp, layers, dtype):
    lines = corpus(6)
    src = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / f"{layers}.h5"
    embed_file(src, out, EmbedSettings(weights=str(tiny_dir), layers=layers, dtype=dtype), progress=False)
    with h5py.File(out, "r") as f:
        for i, line in enumerate(lines):
            full = component_layers(elmo_nlp, line.split())
            expected = full[-1] if layers == "top" else full.mean(axis=0)
            assert f[str(i)].dtype == np.dtype(dtype) and f[str(i)].shape == expected.shape
            tol = 1e-5 if dtype == "float32" else 2e-3 * max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(f[str(i)][()].astype(np.float32), expected, atol=tol, rtol=0)


def test_tokenize_mode_uses_spacy_tokens_and_component_segmentation(tmp_path, tiny_dir):
    texts = ["The river bank was flooded. We walked along it!", "Hello, world"]
    src = write_lines(tmp_path / "raw.txt", texts)
    out = tmp_path / "raw.h5"
    embed_file(src, out, EmbedSettings(weights=str(tiny_dir), tokenize=True), progress=False)
    nlp = make_elmo_nlp(tiny_dir)
    with h5py.File(out, "r") as f:
        for i, text in enumerate(texts):
            doc = nlp(text)
            assert f[str(i)].shape == doc._.elmo.shape
            np.testing.assert_allclose(f[str(i)][()], doc._.elmo, **SAME)


def test_two_processes_equal_one(tmp_path, tiny_dir):
    src = write_lines(tmp_path / "in.txt", corpus(40, blank_every=13))
    one, two = tmp_path / "one.h5", tmp_path / "two.h5"
    settings = EmbedSettings(weights=str(tiny_dir))
    embed_file(src, one, settings, batch_size=4, progress=False)
    embed_file(src, two, settings, batch_size=7, n_process=2, progress=False)
    with h5py.File(one, "r") as a, h5py.File(two, "r") as b:
        assert set(a.keys()) == set(b.keys())
        assert a["sentence_to_index"][0] == b["sentence_to_index"][0]
        for key in a:
            if key != "sentence_to_index":
                np.testing.assert_allclose(a[key][()], b[key][()], **SAME)


def test_killed_run_leaves_a_readable_file_and_resumes(tmp_path, tiny_dir, elmo_nlp):
    lines = corpus(1500)
    src = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / "out.h5"
    cmd = [sys.executable, "-m", "spacy_elmo", "embed", str(src), str(out), "--weights", str(tiny_dir),
           "--batch-size", "2", "--quiet"]
    log = tmp_path / "stderr.log"
    proc = start_run(cmd, log)
    try:
        deadline = time.monotonic() + 120
        while (not out.exists() or out.stat().st_size < 200_000) and proc.poll() is None:
            assert time.monotonic() < deadline, "the embed run did not start writing"
            time.sleep(0.05)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:  # the kill under test, or clean-up after a failed check
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    with h5py.File(out, "r") as f:  # readable after the kill, holding whole batches
        keys = sorted(int(k) for k in f.keys())
        assert "sentence_to_index" not in f and not f.attrs.get("complete", False)
        assert 0 < len(keys) < len(lines) and keys == list(range(len(keys)))
        assert all(f[str(k)].shape[1] == len(lines[k].split()) for k in keys)
    report = embed_file(src, out, EmbedSettings(weights=str(tiny_dir)), batch_size=64, progress=False)
    assert (report.n_skipped, report.n_embedded) == (len(keys), len(lines) - len(keys))
    with h5py.File(out, "r") as f:
        assert set(f.keys()) == {str(i) for i in range(len(lines))} | {"sentence_to_index"}
        assert json.loads(f["sentence_to_index"][0]) == {line: str(i) for i, line in enumerate(lines)}
        for i in sorted({0, len(keys) - 1, len(keys), len(keys) + 1, len(lines) - 1} | set(range(0, len(lines), 97))):
            np.testing.assert_allclose(f[str(i)][()], component_layers(elmo_nlp, lines[i].split()), **SAME)
    again = embed_file(src, out, EmbedSettings(weights=str(tiny_dir)), progress=False)
    assert (again.n_embedded, again.n_skipped) == (0, len(lines))


def test_resume_refuses_other_options_or_input(tmp_path, tiny_dir):
    src = write_lines(tmp_path / "in.txt", corpus(5))
    out = tmp_path / "out.h5"
    embed_file(src, out, EmbedSettings(weights=str(tiny_dir)), progress=False)
    with pytest.raises(ValueError, match="layers"):
        embed_file(src, out, EmbedSettings(weights=str(tiny_dir), layers="top"), progress=False)
    write_lines(src, corpus(6))
    with pytest.raises(ValueError, match="input_sha1"):
        embed_file(src, out, EmbedSettings(weights=str(tiny_dir)), progress=False)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(ValueError, match="not written by spacy-elmo"):
        embed_file(src, foreign, EmbedSettings(weights=str(tiny_dir)), progress=False)
    embed_file(src, out, EmbedSettings(weights=str(tiny_dir), layers="top"), overwrite=True, progress=False)
    with h5py.File(out, "r") as f:
        assert len(f) == 7 and f["0"].ndim == 2


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "the input is empty"),
        (b"\n  \n\t\n", "the input is empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "line 1 contains NUL bytes"),
        (b"fine line\ncaf\xe9 latin-1\n", "line 2 is not UTF-8"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, tiny_dir, content, message):
    src = tmp_path / "bad.txt"
    src.write_bytes(content)
    out = tmp_path / "out.h5"
    result = CliRunner().invoke(app, ["embed", str(src), str(out), "--weights", str(tiny_dir)])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert not out.exists()


def test_cli_writes_and_reports(tmp_path, tiny_dir):
    src = write_lines(tmp_path / "in.txt", corpus(9))
    out = tmp_path / "out.h5"
    args = ["embed", str(src), str(out), "--weights", str(tiny_dir), "--layers", "top", "--batch-size", "4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Embedded 9 of 9 lines" in result.output and "tokens/s" in result.output
    with h5py.File(out, "r") as f:
        assert len(f) == 10 and f["3"].ndim == 2
    result = CliRunner().invoke(app, args)
    assert "Embedded 0 of 9 lines, 9 already done" in result.output
    result = CliRunner().invoke(app, args + ["--ray-address", "127.0.0.1:6379"])
    assert result.exit_code == 1 and "Error: --ray-address and --num-gpus-per-worker need --engine ray" in result.output


def test_docbin_mode(tmp_path, tiny_dir, elmo_nlp):
    import spacy

    nlp = spacy.blank("en")
    docs = [nlp("The river bank was flooded. It rained."), nlp("Hello world"), nlp("")]
    src, out = tmp_path / "in.spacy", tmp_path / "out.spacy"
    DocBin(docs=docs).to_disk(src)
    report = embed_docbin(src, out, EmbedSettings(weights=str(tiny_dir)), progress=False)
    assert report.n_embedded == 3
    back = list(DocBin().from_disk(out).get_docs(nlp.vocab))
    assert [d.text for d in back] == [d.text for d in docs]
    for doc in back:
        np.testing.assert_allclose(doc._.elmo, elmo_nlp(doc.text)._.elmo, **SAME)
    with pytest.raises(ValueError, match="all layers, float32"):
        embed_docbin(src, out, EmbedSettings(weights=str(tiny_dir), layers="top"), progress=False)
    (tmp_path / "junk.spacy").write_bytes(b"not a docbin")
    with pytest.raises(ValueError, match="not a readable .spacy"):
        embed_docbin(tmp_path / "junk.spacy", out, EmbedSettings(weights=str(tiny_dir)), progress=False)
