"""Bad input and lost data around prepare / pretrain / perplexity / export (issue 13):
each case through the real command line, on a small generated corpus and the tiny preset."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import REPO
from spacy_elmo.cli import app
from spacy_elmo.pretrain.output import LOCK_NAME, OutputLock

TINY = REPO / "configs" / "pretrain" / "tiny.cfg"
WORDS = ("the river bank was flooded after rain . we walked along the bank of a stream . "
         "the bank raised its interest rates again . children play in the garden every day .").split()


def cli(*args: str):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("safety")
    lines = [" ".join(WORDS[(i * 7) % 40:(i * 7) % 40 + 12]).capitalize() for i in range(300)]
    (out / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, output = cli("prepare", out / "train.txt", "--output", out / "train.npz")
    assert code == 0, output
    return out


def pretrain(data: Path, output: Path, *extra: str):
    return cli("pretrain", TINY, "--output", output, "--paths.train", data / "train.npz", "--paths.dev", "null",
               "--vocab.size", "40", "--softmax.cutoffs", "[20]", "--training.threads", "1", "--training.log_every", "1",
               "--training.max_steps", "2", *extra)


@pytest.fixture(scope="module")
def model(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "model"
    code, output = pretrain(data, out)
    assert code == 0, output
    return out


@pytest.mark.parametrize("setting,value", [("training.eval_sentences", "-1"), ("training.grad_clip", "-1"),
                                           ("training.final_lr_ratio", "-2"), ("model.lstm.dimm", "3"),
                                           ("softmax.cutof", "[3]"), ("vocab.sise", "3"), ("paths.trian", "x"),
                                           ("training.lr", "1e6"), ("training.ema_decay", "1")])
def test_bad_settings_are_errors_naming_them(data, tmp_path, setting, value):
    code, output = pretrain(data, tmp_path / "out", f"--{setting}", value)
    assert code == 1 and setting.split(".")[-1] in one_error_line(output)
    assert not (tmp_path / "out").exists()


def test_foreign_output_dir_refused_unless_force(data, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": 1}')
    (out / "vocab.txt").write_text("my words\n")
    code, output = pretrain(data, out)
    assert code == 1 and "--force" in one_error_line(output)
    assert (out / "config.json").read_text() == '{"mine": 1}' and (out / "vocab.txt").read_text() == "my words\n"
    (out / "notes.md").write_text("kept")
    (out / "config.json").unlink(), (out / "vocab.txt").unlink()
    code, output = pretrain(data, out, "--force")
    assert code == 0, output
    assert (out / "notes.md").read_text() == "kept" and (out / "checkpoint.pt").exists()


def test_output_is_a_file_or_unwritable(data, tmp_path):
    (tmp_path / "file").write_text("x")
    code, output = pretrain(data, tmp_path / "file")
    assert code == 1 and "is a file" in one_error_line(output)
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        code, output = pretrain(data, ro / "out")
        assert code == 1 and "ro" in one_error_line(output)


def test_second_run_into_a_locked_output_is_refused(data, tmp_path):
    out = tmp_path / "locked"
    with OutputLock(out):
        code, output = pretrain(data, out)
        assert code == 1 and "in use by another pretraining run" in one_error_line(output)
    assert not (out / LOCK_NAME).exists()
    (out / LOCK_NAME).write_text("pid 999999 on gone\n")  # stale: nobody holds it
    code, output = pretrain(data, out)
    assert code == 0, output


def test_resume_cleans_litter_truncates_metrics_and_refuses_changed_settings(data, tmp_path):
    out = tmp_path / "run"
    code, output = pretrain(data, out, "--training.checkpoint_every", "1")
    assert code == 0, output
    (out / ".checkpoint.pt.abc123.tmp").write_bytes(b"partial")  # left by a killed run
    with (out / "metrics.jsonl").open("a") as f:  # records past the checkpoint, and a torn line
        f.write(json.dumps({"step": 3, "loss": 1.0}) + "\n{\"step\": 4, \"lo")
    code, output = pretrain(data, out, "--training.max_steps", "3")
    assert code == 0, output
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert oct((out / "checkpoint.pt").stat().st_mode & 0o777) == oct(0o644 & ~_umask())
    for setting, value in (("training.seed", "5"), ("training.batch_tokens", "512"), ("softmax.type", "full")):
        code, output = pretrain(data, out, "--training.max_steps", "4", f"--{setting}", value)
        assert code == 1 and setting.split(".")[-1] in one_error_line(output)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 3


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_diverging_run_stops_with_an_error_and_keeps_the_checkpoint(data, tmp_path):
    out = tmp_path / "diverge"
    code, output = pretrain(data, out, "--training.max_steps", "1")
    assert code == 0
    # Weights so large (still finite) that the next forward pass overflows, as a diverged run's do.
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    state["model"] = {k: v * 1e30 if v.is_floating_point() else v for k, v in state["model"].items()}
    torch.save(state, out / "checkpoint.pt")
    code, output = pretrain(data, out, "--training.max_steps", "6", "--training.checkpoint_every", "1")
    assert code == 1 and "not finite" in one_error_line(output)
    after = torch.load(out / "checkpoint.pt", weights_only=False)
    assert after["step"] == 1  # nothing written past the last checkpoint


def test_empty_checkpoint_and_cuda_without_gpu(data, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"")
    code, output = pretrain(data, out)
    assert code == 1 and "checkpoint.pt is not a readable checkpoint (empty file)" in one_error_line(output)
    if not torch.cuda.is_available():
        code, output = pretrain(data, tmp_path / "cuda", "--training.device", "cuda")
        assert code == 1 and "no CUDA device" in one_error_line(output)


def test_prepare_refuses_binary_truncated_and_fake_archives(data, tmp_path):
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02garbage\xff\xfe")
    (tmp_path / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    whole = gzip.compress(("some text here . " * 2000).encode())
    (tmp_path / "cut.txt.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "fake.tar.gz").write_text("not an archive")
    cases = [("bin.txt", "NUL bytes"), ("latin.txt", "not UTF-8"), ("cut.txt.gz", "truncated or damaged gzip"),
             ("fake.tar.gz", "not a readable .tar.gz")]
    for name, message in cases:
        code, output = cli("prepare", tmp_path / name, "--output", tmp_path / "x.npz")
        assert code == 1 and message in one_error_line(output), (name, output)
    code, output = cli("prepare", data / "train.txt", "--kind", "imdb", "--output", tmp_path / "x.npz")
    assert code == 1 and "--kind plain" in one_error_line(output)
    assert not (tmp_path / "x.npz").exists()


def test_prepared_corpus_without_suffix_is_read_as_prepared(data, tmp_path, model):
    renamed = tmp_path / "corpus.bin"
    renamed.write_bytes((data / "train.npz").read_bytes())
    code, a = cli("perplexity", model, renamed)
    code2, b = cli("perplexity", model, data / "train.npz")
    figure = lambda out: [line for line in out.replace("]", "\n").splitlines() if line.startswith("perplexity")]
    assert code == code2 == 0 and figure(a) == figure(b) and len(figure(a)) == 1, (a, b)


def test_perplexity_with_a_foreign_vocab_is_an_error(model, data, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_bytes((model / name).read_bytes())
    (other / "vocab.txt").write_text("<S>\n</S>\n<unk>\nthe\n")
    code, output = cli("perplexity", other, data / "train.npz")
    assert code == 1 and "vocab.txt has 4 words" in one_error_line(output)


def test_export_keeps_dot_files_refuses_files_and_overwrites_only_with_force(model, tmp_path):
    out = tmp_path / "exported"
    (out / ".git").mkdir(parents=True)
    (out / ".env").write_text("SECRET=1")
    code, output = cli("export", model, out, "--format", "elmo")
    assert code == 0, output
    assert (out / ".env").read_text() == "SECRET=1" and (out / ".git").is_dir()
    code, output = cli("export", model, out, "--format", "elmo", "--half")
    assert code == 1 and "--force" in one_error_line(output)
    code, output = cli("export", out, out, "--format", "elmo", "--half", "--force")  # into its own directory
    assert code == 0 and (out / ".env").exists() and json.loads((out / "config.json").read_text())["dtype"] == "float16"
    code, output = cli("export", model, tmp_path / "int8", "--format", "elmo", "--dtype", "int8")
    assert code == 0 and json.loads((tmp_path / "int8" / "config.json").read_text())["dtype"] == "int8"
    for args, message in [(("--dtype", "int8"), "--half and --dtype are for --format elmo"),
                          (("--format", "elmo", "--dtype", "int4"), "unknown weights dtype 'int4'")]:
        code, output = cli("export", model, tmp_path / "bad", *args)
        assert code == 1 and message in one_error_line(output) and not (tmp_path / "bad").exists()
    (tmp_path / "file").write_text("precious")
    for fmt in ("elmo", "allennlp"):
        code, output = cli("export", model, tmp_path / "file", "--format", fmt)
        assert code == 1 and "is a file" in one_error_line(output)
    assert (tmp_path / "file").read_text() == "precious"


def test_cli_error_in_a_fresh_process_is_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "spacy_elmo", "perplexity", str(tmp_path / "none"), str(tmp_path / "t.txt")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.count("Error:") == 1 and "Traceback" not in res.stderr, res.stderr
