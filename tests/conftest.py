import gzip
import json
import os
from pathlib import Path
from typing import List

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
# The shared data/fixtures folder; override with SPACY_ELMO_SHARED. Without it the tests
# that read its data (golden AllenNLP outputs, CoNLL/SST/SemCor) skip; the rest use the
# tiny random biLM of tests/make_tiny.py and the generated text of tests/tiny_data.py.
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", REPO.parent / "shared"))
TINY = SHARED / "fixtures" / "tiny"
NO_SHARED = f"needs the shared data folder ({SHARED} not found; set SPACY_ELMO_SHARED)"
NO_GOLDEN = f"needs the AllenNLP golden fixtures ({TINY} not found; set SPACY_ELMO_SHARED)"


NO_CUDA = "needs a CUDA device"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False, help="run slow tests")
    parser.addoption("--gpu", action="store_true", default=False,
                     help="run the device tests (golden outputs, batch independence, training, resume) and the "
                          "CUDA-only tests on CUDA; they skip where torch finds no CUDA device")


def pytest_collection_modifyitems(config, items):
    for item in items:  # ``-m gpu`` selects the tests that --gpu moves to CUDA
        if "device" in getattr(item, "fixturenames", ()) or item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.gpu)
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda"):  # a CUDA-only test: only with --gpu
        if not item.config.getoption("--gpu"):
            pytest.skip("CUDA-only test: run with --gpu")
        import torch

        if not torch.cuda.is_available():
            pytest.skip(NO_CUDA)


@pytest.fixture(scope="session")
def device(request):
    """The torch device of the device tests: the CPU, or with --gpu the first CUDA device
    (the test skips where there is none; it never runs on the CPU in its place)."""
    import torch

    if not request.config.getoption("--gpu"):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    return torch.device("cuda", 0)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data folder; the test skips without it."""
    if not SHARED.is_dir():
        pytest.skip(NO_SHARED)
    return SHARED


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    """The AllenNLP tiny fixture with golden outputs (expected.npz); the test skips without it."""
    if not (TINY / "expected.npz").is_file():
        pytest.skip(NO_GOLDEN)
    return TINY


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A tiny biLM in the AllenNLP layout (options.json, weights.hdf5, sentences.json):
    the shared golden fixture when there is one (so that ``tiny_bilm`` gives the golden
    outputs), else the seeded random model of tests/make_tiny.py, written here."""
    if (TINY / "expected.npz").is_file():
        return TINY
    from make_tiny import write_tiny

    return write_tiny(tmp_path_factory.mktemp("tiny_allennlp"))


def token_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine of each pair of vectors along the last axis of ``a`` and ``b``."""
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def tiny_sentences(tiny_dir: Path) -> List[List[str]]:
    """The tokenized sentences of the tiny fixture (its sentences.json)."""
    return json.loads((tiny_dir / "sentences.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def sentences(tiny_dir: Path) -> List[List[str]]:
    """``tiny_sentences`` of ``tiny_dir``: the sentences of the golden outputs."""
    return tiny_sentences(tiny_dir)


def english_lines(split: str, n: int) -> List[str]:
    """The first ``n`` lines of WikiText-2 ``split`` ("train" or "valid") from the shared
    folder, or ``n`` generated English-like lines (tests/tiny_data.py) without it."""
    path = SHARED / "data" / "wikitext2" / f"{split}.txt.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [next(f) for _ in range(n)]
    from tiny_data import english_lines as generated

    return [line + "\n" for line in generated(n, seed={"train": 0, "valid": 1}[split])]


TINY_PRETRAIN = REPO / "configs" / "pretrain" / "tiny.cfg"


@pytest.fixture(scope="session")
def wikitext_slice(tmp_path_factory) -> Path:
    """The first 3,000 lines of WikiText-2 train and 400 of valid (generated text without
    the shared folder), as text and prepared (``train.npz``, ``valid.npz``)."""
    from spacy_elmo.pretrain.data import prepare_corpus

    out = tmp_path_factory.mktemp("wikitext")
    for split, n in (("train", 3000), ("valid", 400)):
        (out / f"wikitext_{split}.txt").write_text("".join(english_lines(split, n)), encoding="utf-8")
        prepare_corpus([out / f"wikitext_{split}.txt"]).save(out / f"{split}.npz")
    return out


def tiny_config(data: Path, **overrides):
    """The validated tiny pretraining preset on ``data`` (a ``wikitext_slice``), one thread."""
    from spacy_elmo.pretrain.config import load_pretrain_config

    base = {"paths.train": str(data / "train.npz"), "paths.dev": str(data / "valid.npz"), "training.threads": 1}
    base.update(overrides)
    return load_pretrain_config(TINY_PRETRAIN, base)


@pytest.fixture(scope="session")
def tiny_bilm(tiny_dir):
    from spacy_elmo import ElmoBiLM

    return ElmoBiLM.from_allennlp(tiny_dir / "options.json", tiny_dir / "weights.hdf5")


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_bilm, tmp_path_factory) -> Path:
    """The tiny fixture weights in the project's own format."""
    path = tmp_path_factory.mktemp("tiny_elmo") / "model"
    tiny_bilm.save(path)
    return path


def make_elmo_nlp(tiny_dir: Path, **cfg):
    """A blank English pipeline with an ``elmo`` initialised from the tiny fixture."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=cfg)
    nlp.config["initialize"]["components"]["elmo"] = {
        "loader": {
            "@misc": "spacy-elmo.AllenNLPLoader.v1",
            "options_path": str(tiny_dir / "options.json"),
            "weights_path": str(tiny_dir / "weights.hdf5"),
        }
    }
    nlp.initialize()
    return nlp


@pytest.fixture(scope="module")
def elmo_nlp(tiny_dir):
    return make_elmo_nlp(tiny_dir)


def load_script(name: str):
    """The project script ``scripts/<name>.py`` as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_project_scripts_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_conll(path: Path, limit: int):
    """(words, IOB2 tags) of the first ``limit`` sentences of a CoNLL-2003 file, read by
    the project's converter (scripts/convert_ner.py)."""
    import itertools

    return [(s.words, s.tags) for s in itertools.islice(load_script("convert_ner").read_iob(path), limit)]
