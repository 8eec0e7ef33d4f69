"""``python -m spacy_elmo`` for a torchrun worker that also reports how it ended: after the
real command line returns, it writes ``rank{RANK}.json`` into ``$SPACY_ELMO_TEST_REPORT``
with the exit code and what each ``Trainer.run`` returned (step, stopped). The tests use
it to see every rank, not only rank 0, which alone logs."""
import json
import os
import runpy
from typing import Any, Dict, List

from spacy_elmo.pretrain import trainer

results: List[Dict[str, Any]] = []
_run = trainer.Trainer.run


def _recording_run(self: trainer.Trainer) -> Dict[str, Any]:
    result = _run(self)
    results.append(result)
    return result


trainer.Trainer.run = _recording_run  # type: ignore[method-assign]
code: Any = 0
try:
    runpy.run_module("spacy_elmo", run_name="__main__", alter_sys=True)
except SystemExit as err:
    code = err.code
finally:
    report = os.path.join(os.environ["SPACY_ELMO_TEST_REPORT"], f"rank{os.environ['RANK']}.json")
    with open(report, "w", encoding="utf-8") as f:
        json.dump({"exit": code, "results": results}, f)
