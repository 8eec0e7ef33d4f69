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
