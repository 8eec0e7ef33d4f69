"""The published-weights downloader, against a local HTTP server (with Range support)
that serves the tiny fixture weights. Nothing is downloaded from the internet."""
import hashlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch

from spacy_elmo.published import PUBLISHED, DownloadError, PublishedModel, download, fetch_published


class Server:
    """Serves ``files`` (URL path -> bytes); honours ``Range: bytes=N-`` with 206. A path
    in ``drop`` is cut after that many bytes of its next response (the connection is closed
    midway), once. ``requests`` logs (path, Range header) of every GET."""

    def __init__(self) -> None:
        self.files: Dict[str, bytes] = {}
        self.drop: Dict[str, int] = {}
        self.requests: List[Tuple[str, Optional[str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng:
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                body = data[start:]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                cut = server.drop.pop(self.path, None)
                if cut is None:
                    self.wfile.write(body)
                    return
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def tiny_files(tiny_dir) -> Dict[str, bytes]:
    return {
        "/tiny/options.json": (tiny_dir / "options.json").read_bytes(),
        "/tiny/weights.hdf5": (tiny_dir / "weights.hdf5").read_bytes(),
    }


@pytest.fixture
def tiny_name(monkeypatch, tiny_files) -> str:
    """A published name pointing at the fixture files, with their size and sha256."""
    weights = tiny_files["/tiny/weights.hdf5"]
    model = PublishedModel(
        "tiny-test",
        "the tiny fixture",
        "http://127.0.0.1:9/unused",  # always replaced by a mirror in these tests
        "tiny/options.json",
        "tiny/weights.hdf5",
        weights_size=len(weights),
        weights_sha256=hashlib.sha256(weights).hexdigest(),
    )
    monkeypatch.setitem(PUBLISHED, model.name, model)
    return model.name


def assert_same_state(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_full_download_through_the_registered_loader(tiny_files, tiny_name, tiny_bilm, tmp_path, monkeypatch):
    from spacy.util import registry

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    with Server() as server:
        server.files.update(tiny_files)
        load = registry.resolve({"x": {"@misc": "spacy-elmo.PublishedLoader.v1", "name": tiny_name, "mirror": server.url}})["x"]
        bilm = load()
        assert_same_state(bilm, tiny_bilm)
        cached = tmp_path / "cache" / tiny_name
        assert (cached / "weights.hdf5").read_bytes() == tiny_files["/tiny/weights.hdf5"]
        assert sorted(p.name for p in cached.iterdir()) == ["options.json", "weights.hdf5"]
        n = len(server.requests)
        assert_same_state(load(), tiny_bilm)  # the second load reads the cache only
        assert len(server.requests) == n == 2


def test_pipeline_initialises_from_a_published_name(tiny_files, tiny_name, tmp_path, monkeypatch, tiny_dir):
    import spacy

    from conftest import make_elmo_nlp

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    with Server() as server:
        server.files.update(tiny_files)
        monkeypatch.setenv("SPACY_ELMO_MIRROR", server.url)
        from spacy_elmo.loaders import resolve_weights

        nlp = spacy.blank("en")
        nlp.add_pipe("elmo")
        nlp.config["initialize"]["components"]["elmo"] = {"loader": resolve_weights(tiny_name)}
        nlp.initialize()
    ref = make_elmo_nlp(tiny_dir)
    text = "The river bank was flooded."
    np.testing.assert_array_equal(nlp(text)._.elmo, ref(text)._.elmo)


def test_interrupted_download_resumes_from_the_part_file(tiny_files, tiny_name, tmp_path):
    weights = tiny_files["/tiny/weights.hdf5"]
    with Server() as server:
        server.files.update(tiny_files)
        server.drop["/tiny/weights.hdf5"] = 200_000
        with pytest.raises(DownloadError, match="interrupted.*run again to resume"):
            fetch_published(tiny_name, mirror=server.url, cache=tmp_path, progress=False, retries=0)
        part = tmp_path / tiny_name / "weights.hdf5.part"
        assert part.stat().st_size == 200_000
        assert not (tmp_path / tiny_name / "weights.hdf5").exists()
        options, path = fetch_published(tiny_name, mirror=server.url, cache=tmp_path, progress=False, retries=0)
        assert server.requests[-1] == ("/tiny/weights.hdf5", "bytes=200000-")
    assert path.read_bytes() == weights
    assert not part.exists()


def test_interrupted_download_retries_within_one_call(tiny_files, tiny_name, tmp_path):
    with Server() as server:
        server.files.update(tiny_files)
        server.drop["/tiny/weights.hdf5"] = 123_457
        _, path = fetch_published(tiny_name, mirror=server.url, cache=tmp_path, progress=False)
        weight_requests = [r for r in server.requests if r[0] == "/tiny/weights.hdf5"]
    assert weight_requests == [("/tiny/weights.hdf5", None), ("/tiny/weights.hdf5", "bytes=123457-")]
    assert path.read_bytes() == tiny_files["/tiny/weights.hdf5"]


def test_checksum_mismatch_is_an_error_and_not_cached(tiny_files, tiny_name, tmp_path):
    corrupt = bytearray(tiny_files["/tiny/weights.hdf5"])
    corrupt[300_000] ^= 0xFF
    with Server() as server:
        server.files.update(tiny_files)
        server.files["/tiny/weights.hdf5"] = bytes(corrupt)
        with pytest.raises(DownloadError, match="corrupt.*sha256.*not cached"):
            fetch_published(tiny_name, mirror=server.url, cache=tmp_path, progress=False)
        assert sorted(p.name for p in (tmp_path / tiny_name).iterdir()) == ["options.json"]
        # the next call downloads again (nothing corrupt was kept) and succeeds
        server.files.update(tiny_files)
        _, path = fetch_published(tiny_name, mirror=server.url, cache=tmp_path, progress=False)
        assert server.requests[-1] == ("/tiny/weights.hdf5", None)
    assert path.read_bytes() == tiny_files["/tiny/weights.hdf5"]


def test_not_hdf5_without_a_known_checksum_is_an_error_and_not_cached(tiny_files, tmp_path):
    # No published size or checksum (as for the AllenNLP files): the file must still open
    # as HDF5 with the datasets the options imply.
    with Server() as server:
        server.files["/w.hdf5"] = b"<html>AccessDenied</html>" * 100
        with pytest.raises(DownloadError, match="not an HDF5 file.*not cached"):
            options = tmp_path / "options.json"
            options.write_bytes(tiny_files["/tiny/options.json"])
            from spacy_elmo.published import _check_weights

            download(f"{server.url}/w.hdf5", tmp_path / "w.hdf5", progress=False,
                     check=lambda part: _check_weights(options, part))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["options.json"]


def test_wrong_size_is_an_error(tiny_files, tmp_path):
    with Server() as server:
        server.files["/w.bin"] = b"x" * 1000
        with pytest.raises(DownloadError, match="1,000 bytes, but the published size is 999"):
            download(f"{server.url}/w.bin", tmp_path / "w.bin", size=999, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_http_error_is_clear(tmp_path):
    with Server() as server:
        with pytest.raises(DownloadError, match="HTTP 404"):
            download(f"{server.url}/missing.hdf5", tmp_path / "m.hdf5", progress=False)


def test_names_and_errors_without_download(tmp_path, monkeypatch):
    from spacy.util import registry

    from spacy_elmo.loaders import resolve_weights

    for name in ("small", "medium", "original", "original-5.5b", "pubmed", "pt-wikipedia", "pt-brwac", "ja"):
        assert resolve_weights(name) == {"@misc": "spacy-elmo.PublishedLoader.v1", "name": name}
        model = PUBLISHED[name]
        assert model.base.startswith("https://") and model.weights.endswith(".hdf5")
    with pytest.raises(ValueError, match="unknown published ELMo model 'large'.*small, medium"):
        registry.resolve({"x": {"@misc": "spacy-elmo.PublishedLoader.v1", "name": "large"}})
    with pytest.raises(ValueError, match="published model name"):
        resolve_weights("large")
    # an existing directory of that name wins over the published name
    monkeypatch.chdir(tmp_path)
    Path("small").mkdir()
    with pytest.raises(ValueError, match="expected a spacy-elmo model directory"):
        resolve_weights("small")


def test_cache_dir(monkeypatch, tmp_path):
    from spacy_elmo.published import cache_dir

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("SPACY_ELMO_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "spacy_elmo"
