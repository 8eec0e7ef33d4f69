"""``init-pipeline`` and ``demo`` with bad arguments: one ``Error:`` line and exit
status 1; an existing pipeline is not overwritten without ``--force``."""
import json
import subprocess
import sys

import h5py
import numpy as np
import spacy
from typer.testing import CliRunner

from spacy_elmo.cli import app

runner = CliRunner()


def run_cli(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def assert_one_error_line(code, output, pattern):
    assert code == 1, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    assert pattern in lines[0], output


def test_init_pipeline_refuses_to_overwrite(tiny_model_dir, tmp_path):
    out = tmp_path / "pipe"
    code, output = run_cli("init-pipeline", tiny_model_dir, out)
    assert code == 0, output
    cfg_before = (out / "config.cfg").read_text()
    (out / "notes.txt").write_text("mine")
    (out / "config.cfg").write_text(cfg_before + "\n# my edit\n")
    code, output = run_cli("init-pipeline", tiny_model_dir, out)
    assert_one_error_line(code, output, "is not empty")
    assert (out / "config.cfg").read_text().endswith("# my edit\n")  # untouched
    code, output = run_cli("init-pipeline", tiny_model_dir, out, "--force")
    assert code == 0, output
    assert (out / "notes.txt").read_text() == "mine"  # only the pipeline's own files written
    assert (out / "config.cfg").read_text() == cfg_before
    assert spacy.load(out)("A bank.")._.elmo.shape[0] == 3
    # An existing file as the output.
    (tmp_path / "file").write_text("x")
    code, output = run_cli("init-pipeline", tiny_model_dir, tmp_path / "file", "--force")
    assert_one_error_line(code, output, "is a file")
    assert (tmp_path / "file").read_text() == "x"


def test_init_pipeline_bad_arguments(tiny_model_dir, tiny_dir, tmp_path):
    code, output = run_cli("init-pipeline", tmp_path / "missing", tmp_path / "o1")
    assert_one_error_line(code, output, "expected a spacy-elmo model directory")
    code, output = run_cli("init-pipeline", tiny_model_dir, tmp_path / "o2", "--lang", "zz")
    assert_one_error_line(code, output, "unknown language code 'zz'")
    bad = tmp_path / "nan"
    bad.mkdir()
    (bad / "options.json").write_text((tiny_dir / "options.json").read_text())
    (bad / "weights.hdf5").write_bytes((tiny_dir / "weights.hdf5").read_bytes())
    with h5py.File(bad / "weights.hdf5", "r+") as h5:
        h5["char_embed"][0, 0] = np.inf
    code, output = run_cli("init-pipeline", bad, tmp_path / "o3")
    assert_one_error_line(code, output, "dataset 'char_embed' holds non-finite values")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o3").exists()


def test_demo_bad_weights_in_a_real_process(tmp_path):
    """Through the real entry point: no traceback, one line, exit 1."""
    (tmp_path / "config.json").write_text(json.dumps({"lstm": {}}))
    for weights in (tmp_path / "missing", tmp_path):
        out = subprocess.run(
            [sys.executable, "-m", "spacy_elmo", "demo", "--weights", str(weights)],
            capture_output=True, text=True,
        )
        assert out.returncode == 1, out.stderr
        lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
        assert "Traceback" not in out.stderr
