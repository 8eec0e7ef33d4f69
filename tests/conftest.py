import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The shared data/fixtures folder; override with SPACY_ELMO_SHARED.
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", REPO.parent / "shared"))
TINY = SHARED / "fixtures" / "tiny"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.fail(f"shared folder not found at {SHARED}; set SPACY_ELMO_SHARED")
    return SHARED


@pytest.fixture(scope="session")
def tiny_dir(shared_dir) -> Path:
    return TINY


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


def read_conll(path: Path, limit: int):
    """(words, IOB2 tags) of the first ``limit`` sentences of a CoNLL-2003 file, read by
    the project's converter (scripts/convert_ner.py)."""
    import importlib.util
    import itertools

    spec = importlib.util.spec_from_file_location("_conftest_convert_ner", REPO / "scripts" / "convert_ner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(s.words, s.tags) for s in itertools.islice(module.read_iob(path), limit)]
