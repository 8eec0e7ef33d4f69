"""The published ELMo weights by name: where they are, and a resumable, verified download.

Nothing here runs at import time. A model's files are downloaded once into the user cache
(``SPACY_ELMO_CACHE``, else ``~/.cache/spacy_elmo``), into ``<cache>/<name>/``. A download
goes to ``<file>.part`` first, resumes from it with an HTTP ``Range`` request when it was
interrupted, is checked (size, sha256 where a public source gives one, valid JSON or HDF5,
and the weights' datasets against the options) and only then moved into place with
``os.replace``. A file that fails a check is deleted, never cached.

Facts and their public sources are listed in ``docs/published.md``.
"""
import hashlib
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

S3 = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A download failed or gave a file that does not pass its checks."""


@dataclass(frozen=True)
class PublishedModel:
    """One published model: ``base`` + "/" + ``options`` (or ``weights``) is a file's URL.

    weights_size (Optional[int]): bytes of the weights file where a public source gives it
        exactly; otherwise the server's Content-Length is the size checked.
    weights_sha256 (Optional[str]): hex sha256 of the weights file where a public source
        gives one (none of the AllenNLP files has one: see docs/published.md).
    """

    name: str
    description: str
    base: str
    options: str
    weights: str
    weights_size: Optional[int] = None
    weights_sha256: Optional[str] = None
    options_sha256: Optional[str] = None


def _allennlp(name: str, stem: str, description: str) -> PublishedModel:
    return PublishedModel(name, description, S3, f"{stem}/elmo_{stem}_options.json", f"{stem}/elmo_{stem}_weights.hdf5")


PUBLISHED: Dict[str, PublishedModel] = {
    m.name: m
    for m in (
        _allennlp("small", "2x1024_128_2048cnn_1xhighway", "English, 1B Word Benchmark; LSTM 1024/128, 1 highway, 13.6M parameters"),
        _allennlp("medium", "2x2048_256_2048cnn_1xhighway", "English, 1B Word Benchmark; LSTM 2048/256, 1 highway, 28.0M parameters"),
        _allennlp("original", "2x4096_512_2048cnn_2xhighway", "English, 1B Word Benchmark; LSTM 4096/512, 2 highways, 93.6M parameters"),
        _allennlp(
            "original-5.5b",
            "2x4096_512_2048cnn_2xhighway_5.5B",
            "English, Wikipedia 1.9B + WMT08-12 news 3.6B tokens; shapes as original (AllenNLP's recommended default)",
        ),
        PublishedModel(
            "pubmed",
            "English biomedical text (PubMed), contributed by Matthew Peters; shapes as original",
            f"{S3}/contributed/pubmed",
            "elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
        ),
        PublishedModel(
            "pt-wikipedia",
            "Portuguese (Wikipedia), contributed by the Federal University of Goias (UFG)",
            f"{S3}/contributed/pt/wikipedia",
            "options.json",
            "elmo_pt_weights.hdf5",
        ),
        PublishedModel(
            "pt-brwac",
            "Portuguese (brWaC corpus), contributed by the Federal University of Goias (UFG)",
            f"{S3}/contributed/pt/brwac",
            "options.json",
            "elmo_pt_weights_dgx1.hdf5",
        ),
        PublishedModel(
            "ja",
            "Japanese, contributed by ExaWizards (Bataa and Wu, ACL 2019)",
            "https://exawizardsallenlp.blob.core.windows.net",
            "data/options.json",
            "data/weights.hdf5",
        ),
    )
}


def cache_dir() -> Path:
    """``SPACY_ELMO_CACHE`` if set, else ``~/.cache/spacy_elmo``."""
    env = os.environ.get("SPACY_ELMO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "spacy_elmo"


def get_published(name: str) -> PublishedModel:
    if name not in PUBLISHED:
        raise KeyError(f"unknown published ELMo model {name!r}; the names are: {', '.join(PUBLISHED)}")
    return PUBLISHED[name]


def fetch_published(
    name: str, *, mirror: Optional[str] = None, cache: Optional[Path] = None, progress: bool = True, retries: int = 3
) -> Tuple[Path, Path]:
    """The cached ``(options_path, weights_path)`` of a published model, downloaded
    (and checked) on first use.

    mirror (Optional[str]): a base URL that replaces the model's own (the files keep their
        relative paths under it), e.g. a local copy of the AllenNLP bucket; default the
        ``SPACY_ELMO_MIRROR`` environment variable, else the model's own URL.
    cache (Optional[Path]): the cache folder; default ``cache_dir()``.
    """
    from .bilm.allennlp import read_options

    model = get_published(name)
    base = (mirror or os.environ.get("SPACY_ELMO_MIRROR") or model.base).rstrip("/")
    folder = Path(cache) if cache is not None else cache_dir()
    folder = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    options_path = folder / Path(model.options).name
    weights_path = folder / Path(model.weights).name
    if not options_path.exists():
        download(f"{base}/{model.options}", options_path, sha256=model.options_sha256, progress=False,
                 retries=retries, check=_check_json)
    read_options(options_path)
    if not weights_path.exists():

        def check(part: Path) -> None:
            _check_weights(options_path, part)

        download(f"{base}/{model.weights}", weights_path, size=model.weights_size, sha256=model.weights_sha256,
                 progress=progress, retries=retries, check=check)
    return options_path, weights_path


def _check_json(path: Path) -> None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DownloadError(f"not a JSON options file: {err}") from None


def _check_weights(options_path: Path, path: Path) -> None:
    """The file opens as HDF5 and every dataset the options imply is there, in its shape."""
    from .bilm import ElmoBiLM, WeightsError

    try:
        ElmoBiLM.from_allennlp(options_path, path)
    except WeightsError as err:
        raise DownloadError(str(err)) from None


def download(
    url: str,
    dest: Path,
    *,
    size: Optional[int] = None,
    sha256: Optional[str] = None,
    progress: bool = True,
    retries: int = 3,
    check=None,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part``, resuming an existing ``.part``
    with a Range request; verify size, sha256 and ``check(part)`` (which raises
    ``DownloadError``), then move the file into place atomically. A file that fails a check
    is deleted and ``DownloadError`` is raised; an interrupted one keeps its ``.part`` (the
    next call resumes) after ``retries`` further attempts.
    """
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    attempt = 0
    while True:
        try:
            total = _fetch_to_part(url, part, progress=progress, timeout=timeout)
            break
        except (OSError, http.client.HTTPException) as err:
            if isinstance(err, urllib.error.HTTPError) and err.code not in (408, 429, 500, 502, 503, 504):
                raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from None
            attempt += 1
            if attempt > retries:
                have = part.stat().st_size if part.exists() else 0
                raise DownloadError(
                    f"{url}: download interrupted ({err}); {have:,} bytes kept in {part}, "
                    "run again to resume"
                ) from None
            time.sleep(min(2.0 ** (attempt - 1), 10.0) * 0.1)
    problems = []
    got = part.stat().st_size
    for expected, what in ((size, "published size"), (total, "server's size")):
        if expected is not None and got != expected:
            problems.append(f"{got:,} bytes, but the {what} is {expected:,}")
    if not problems and sha256 is not None:
        digest = _sha256(part)
        if digest != sha256.lower():
            problems.append(f"sha256 {digest}, expected {sha256}")
    if not problems and check is not None:
        try:
            check(part)
        except DownloadError as err:
            problems.append(str(err))
    if problems:
        part.unlink()
        raise DownloadError(f"{url}: the downloaded file is corrupt ({'; '.join(problems)}); it was deleted, not cached")
    os.replace(part, dest)
    return dest


def _fetch_to_part(url: str, part: Path, *, progress: bool, timeout: float) -> Optional[int]:
    """Append the rest of ``url`` to ``part``; return the file's full size if the server says it."""
    from tqdm import tqdm

    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "spacy-elmo"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the .part already holds the whole file
            total = _content_range_total(err.headers.get("Content-Range"))
            if total == have:
                return total
            part.unlink()
        raise
    with response:
        if have and response.status == 206:
            total = _content_range_total(response.headers.get("Content-Range"))
            mode = "ab"
        else:  # no .part, or the server ignored the Range header: start over
            have, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length is not None else None
        with part.open(mode) as f, tqdm(
            total=total, initial=have, unit="B", unit_scale=True, desc=part.name[: -len(".part")],
            disable=not progress,
        ) as bar:
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                f.write(chunk)
                bar.update(len(chunk))
    if total is not None and part.stat().st_size < total:
        raise ConnectionError(f"connection closed after {part.stat().st_size:,} of {total:,} bytes")
    return total


def _content_range_total(value: Optional[str]) -> Optional[int]:
    # "bytes 100-199/200" or "bytes */200"
    if not value or "/" not in value:
        return None
    tail = value.rsplit("/", 1)[1].strip()
    return int(tail) if tail.isdigit() else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()
