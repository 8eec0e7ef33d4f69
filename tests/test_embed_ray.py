"""``embed --engine ray`` on a local Ray cluster (``ray.init(num_cpus=2)``): the output
equals the single-process output, and a killed run resumes without redoing the
shards it finished."""
import json
import os
import signal
import sys
import time

import h5py
import numpy as np
import pytest

from spacy_elmo.embed import EmbedSettings, embed_file
from test_embed import SAME, corpus, start_run, write_lines

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[test]" (the test extra holds ray[data])')


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance with 2 CPUs. Ray gives its raylet a fixed 30 s to register
    with the GCS (ray/_private/node.py); on a heavily loaded machine that can run out,
    so try up to three times."""
    for attempt in (1, 2, 3):
        try:
            ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
            break
        except Exception as err:  # Ray raises a bare Exception on a startup timeout
            ray.shutdown()
            if attempt == 3:
                pytest.fail(
                    f"a local Ray instance did not start 3 times (its raylet must register with the GCS within "
                    f"30 s; load average {os.getloadavg()}): {err}"
                )
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def same_files(path_a, path_b):
    with h5py.File(path_a, "r") as a, h5py.File(path_b, "r") as b:
        assert set(a.keys()) == set(b.keys())
        assert a["sentence_to_index"][0] == b["sentence_to_index"][0]
        for key in a:
            if key != "sentence_to_index":
                assert a[key].shape == b[key].shape
                np.testing.assert_allclose(a[key][()], b[key][()], **SAME)


def test_ray_run_killed_resumes_and_equals_one_process(tmp_path, tiny_dir, ray_cluster):
    from spacy_elmo.embed.ray import embed_file_ray

    lines = corpus(240, blank_every=11)
    src = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / "ray.h5"
    shards = tmp_path / "ray.h5.shards"
    cmd = [sys.executable, "-m", "spacy_elmo", "embed", str(src), str(out), "--weights", str(tiny_dir),
           "--engine", "ray", "--ray-address", ray_cluster, "--n-process", "2", "--shard-size", "4",
           "--batch-size", "2", "--layers", "average", "--quiet"]
    log = tmp_path / "stderr.log"
    proc = start_run(cmd, log)
    try:
        deadline = time.monotonic() + 600  # a hang guard: a loaded machine is slow
        index = shards / "index.json"
        while proc.poll() is None and (not index.exists() or len(json.loads(index.read_text())["shards"]) < 3):
            assert time.monotonic() < deadline, "the ray run did not finish a shard"
            time.sleep(0.05)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:  # the kill under test, or clean-up after a failed check
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not out.exists()
    finished = json.loads((shards / "index.json").read_text())["shards"]
    assert 3 <= len(finished) < 60
    stamps = {v["file"]: os.stat(shards / v["file"]).st_mtime_ns for v in finished.values()}
    n_done = sum(v["stop"] - v["start"] for v in finished.values())

    settings = EmbedSettings(weights=str(tiny_dir), layers="average")
    report = embed_file_ray(src, out, settings, batch_size=2, n_workers=2, shard_size=4, merge=False, progress=False)
    assert (report.n_skipped, report.n_embedded) == (n_done, len(lines) - n_done)
    assert all(os.stat(shards / name).st_mtime_ns == stamp for name, stamp in stamps.items())
    assert not out.exists() and len(json.loads((shards / "index.json").read_text())["shards"]) == 60

    merged = embed_file_ray(src, out, settings, shard_size=4, progress=False)  # all done: merge only
    assert (merged.n_embedded, merged.n_skipped) == (0, len(lines)) and not shards.exists()
    local = tmp_path / "local.h5"
    embed_file(src, local, settings, batch_size=16, progress=False)
    same_files(local, out)  # the same datasets, vectors (<= 1e-5) and sentence_to_index


def test_ray_actors_use_the_precision(tmp_path, tiny_dir, ray_cluster):
    from spacy_elmo.embed.ray import embed_file_ray

    src = write_lines(tmp_path / "in.txt", corpus(16))
    int8 = EmbedSettings(weights=str(tiny_dir), precision="int8")
    out, local, exact = tmp_path / "ray.h5", tmp_path / "local.h5", tmp_path / "f32.h5"
    embed_file_ray(src, out, int8, batch_size=4, n_workers=2, shard_size=8, progress=False)
    embed_file(src, local, int8, batch_size=4, progress=False)  # the same batches as the actors'
    embed_file(src, exact, EmbedSettings(weights=str(tiny_dir)), batch_size=4, progress=False)
    same_files(local, out)
    with h5py.File(out, "r") as f, h5py.File(exact, "r") as g:
        assert json.loads(f.attrs["spacy_elmo"])["precision"] == "int8"
        assert max(np.abs(f[k][()] - g[k][()]).max() for k in g if k != "sentence_to_index") > 1e-4
    with pytest.raises(ValueError, match="precision: 'int8' in the file, 'float32' now"):
        embed_file_ray(src, out, EmbedSettings(weights=str(tiny_dir)), shard_size=8, progress=False)
