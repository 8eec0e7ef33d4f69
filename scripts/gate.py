"""Does a pretrained checkpoint ship? The ship rule (README, "Experiments") as one command.

    python scripts/gate.py training/p30_int8 --output training/gate/p30_400 \\
        --against ner=90.09 --against textcat=42.42 -- --components.elmo.cache_mb 4096

For each task in turn (``ner``: CoNLL-2003 with ``configs/ner.cfg``; ``textcat``: SST-5 with
``configs/textcat.cfg``), ``spacy train`` runs once per seed (``--system.seed``) with the
candidate ELMo (``--paths.elmo``), and the run's best dev score, as ``model-best`` keeps it, is
read from its ``meta.json`` (``ents_f`` for NER, ``cats_micro_f`` for SST-5: with one label a
Doc, micro F is accuracy), times 100. A task passes when the mean over the seeds is over the
figure given with ``--against``: the shipped model's mean over the same seeds, measured the same
way on the same machine kind (scores move with the machine kind and with the ``elmo``
component's ``cache_mb``, docs/experiments.md). The candidate ships only if every task passes;
the first task that fails ends the gate, unless ``--all``.

Runs go to ``OUTPUT/<task><seed>/``. A run that finished has ``OUTPUT/<task><seed>/score.json``
and is not run again, so an interrupted gate resumes where it stopped (a finished run with other
arguments, such as another candidate, is an error rather than a score). The verdict and every
score go to ``OUTPUT/gate.json``, written atomically. Every run has the training budget of
``project.yml`` (its ``max_steps``, ``max_epochs``, ``eval_frequency`` and ``patience``: 2,000
steps, evaluated every 200), as the recorded seeds had. Arguments after ``--`` go to every
``spacy train`` run and override that budget. Each run gets ``OMP_NUM_THREADS`` from ``--threads`` (1 by default: every
recorded seed ran on one CPU thread, and a run's scores move with its thread count).

``--jobs N`` runs up to N of these ``spacy train`` runs at once, in the same order (the seeds of
the first task, then those of the next), each writing its output to ``OUTPUT/<task><seed>/train.log``.
A run's scores do not depend on what else the machine runs, so the verdict is the same as with one
job; on a 2-core machine ``--jobs 2`` (with ``--threads 1``) halves the wall time. Once a task's
mean is known to fail, no further run starts; runs already started finish and are kept, and the
scores of a task left with only some of its seeds are in ``gate.json`` under ``unfinished``.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Tuple

import srsly
import typer

from spacy_elmo.util import atomic_write_text

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Task:
    config: str
    train: str
    dev: str
    score_key: str
    metric: str


TASKS: Dict[str, Task] = {
    "ner": Task("configs/ner.cfg", "conll2003_train.spacy", "conll2003_dev.spacy", "ents_f", "F1"),
    "textcat": Task("configs/textcat.cfg", "sst5_train.spacy", "sst5_dev.spacy", "cats_micro_f", "accuracy"),
}


BUDGET = ("max_steps", "max_epochs", "eval_frequency", "patience")


def project_budget(project: Path = REPO / "project.yml") -> List[str]:
    """``--training.*`` overrides for the training budget that ``project.yml``'s vars set."""
    variables = srsly.read_yaml(project).get("vars", {})
    missing = [key for key in BUDGET if key not in variables]
    if missing:
        raise KeyError(f"{project} sets no {', '.join(missing)} in its vars")
    return [arg for key in BUDGET for arg in (f"--training.{key}", str(variables[key]))]


def with_budget(extra: List[str]) -> List[str]:
    """``project_budget()`` followed by ``extra``, less the budget keys that ``extra`` sets itself."""
    budget = project_budget()
    given = {arg.split("=", 1)[0] for arg in extra if arg.startswith("--training.")}
    pairs = [budget[i : i + 2] for i in range(0, len(budget), 2)]
    return [arg for pair in pairs if pair[0] not in given for arg in pair] + list(extra)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (``spacy_elmo.util.atomic``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def parse_against(values: List[str]) -> Dict[str, float]:
    """``["ner=90.09", "textcat=42.42"]`` -> ``{"ner": 90.09, "textcat": 42.42}``, in order."""
    out: Dict[str, float] = {}
    for value in values:
        name, sep, figure = value.partition("=")
        if not sep or name not in TASKS:
            raise ValueError(f"--against {value!r}: expected TASK=MEAN with TASK one of {', '.join(TASKS)}")
        try:
            out[name] = float(figure)
        except ValueError:
            raise ValueError(f"--against {value!r}: {figure!r} is not a number") from None
    if not out:
        raise ValueError("give at least one --against TASK=MEAN (the shipped model's mean on this machine kind)")
    return out


def best_score(run_dir: Path, task: Task) -> float:
    """The best dev score of a finished ``spacy train`` run, times 100, rounded to 2 decimals."""
    meta_path = run_dir / "model-best" / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: the spacy train run in {run_dir} saved no model-best")
    performance = json.loads(meta_path.read_text(encoding="utf-8")).get("performance", {})
    if performance.get(task.score_key) is None:
        raise KeyError(f"{meta_path} has no performance.{task.score_key} (is this a {task.config} run?)")
    return round(100 * float(performance[task.score_key]), 2)


def train_seed(candidate: Path, name: str, seed: int, output: Path, corpus: Path, train_args: List[str],
               threads: int = 1, to_log: bool = False) -> Dict[str, Any]:
    """One ``spacy train`` run of task ``name`` at ``seed`` (or its record, if it finished before);
    ``train_args`` go to ``spacy train`` after the paths and the seed (``with_budget``'s list).
    With ``to_log``, the run's output goes to ``train.log`` in its folder instead of the terminal."""
    task = TASKS[name]
    run_dir = output / f"{name}{seed}"
    record_path = run_dir / "score.json"
    command = [sys.executable, "-m", "spacy", "train", str(REPO / task.config), "--output", str(run_dir),
               "--paths.train", str(corpus / task.train), "--paths.dev", str(corpus / task.dev),
               "--paths.elmo", str(candidate), "--system.seed", str(seed), *train_args]
    arguments = command[3:] + [f"OMP_NUM_THREADS={threads}"]
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if record.get("arguments") != arguments:
            raise ValueError(f"{run_dir} holds a run with other arguments (another candidate, budget or "
                             f"thread count): give another --output")
        return record
    for split in (task.train, task.dev):
        if not (corpus / split).is_file():
            raise FileNotFoundError(f"{corpus / split} not found: convert the data first (docs/experiments.md)")
    typer.echo(f"[gate] {name} seed {seed}: spacy train -> {run_dir}")
    start = time.perf_counter()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if threads > 0 else None
    if to_log:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "train.log", "w", encoding="utf-8") as log:
            returncode = subprocess.call(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        where = f"see {run_dir / 'train.log'}"
    else:
        returncode = subprocess.call(command, env=env)
        where = "see its output above"
    if returncode != 0:
        raise RuntimeError(f"spacy train for {name} seed {seed} failed (exit code {returncode}); {where}")
    record = {"task": name, "seed": seed, "score": best_score(run_dir, task),
              "seconds": round(time.perf_counter() - start, 1), "arguments": arguments}
    write_json_atomic(record_path, record)
    return record


def joined(scores: List[float]) -> str:
    """Scores as the gate prints them: ``90.01 / 90.04 / 90.71``."""
    return " / ".join(f"{score:.2f}" for score in scores)


def run_gate(candidate: Path, against: Dict[str, float], output: Path, corpus: Path, seeds: List[int],
             all_tasks: bool = False, extra: Optional[List[str]] = None, threads: int = 1,
             jobs: int = 1) -> Dict[str, Any]:
    """Run the gate and return (and write to ``output/gate.json``) its verdict."""
    if not candidate.is_dir():
        raise FileNotFoundError(f"candidate {candidate} is not a directory (a spacy-elmo model directory)")
    if not seeds:
        raise ValueError("no seeds given")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {','.join(map(str, seeds))}: a seed is given twice")
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: expected at least 1")
    train_args = with_budget(list(extra or []))
    names = list(against)
    queue: Deque[Tuple[str, int]] = deque((name, seed) for name in names for seed in seeds)
    scores: Dict[str, Dict[int, float]] = {name: {} for name in names}
    results: Dict[str, Any] = {}
    stopped = False
    # leaving this block, by the end or by an error, waits for the runs under way (they keep their records)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running: Dict[Future, Tuple[str, int]] = {}
        while running or (queue and not stopped):
            while queue and not stopped and len(running) < jobs:
                name, seed = queue.popleft()
                future = pool.submit(train_seed, candidate, name, seed, output, corpus, train_args, threads, jobs > 1)
                running[future] = (name, seed)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                name, seed = running.pop(future)
                scores[name][seed] = future.result()["score"]
            # the tasks whose seeds have all finished, in order
            while not stopped and len(results) < len(names) and len(scores[names[len(results)]]) == len(seeds):
                name = names[len(results)]
                task_scores = [scores[name][s] for s in seeds]
                mean = round(statistics.fmean(task_scores), 2)
                passed = mean > against[name]
                results[name] = {"metric": TASKS[name].metric, "seeds": seeds, "scores": task_scores, "mean": mean,
                                 "against": against[name], "passed": passed}
                typer.echo(f"[gate] {name}: {joined(task_scores)}, mean {mean:.2f} "
                           f"against {against[name]:.2f}: {'over' if passed else 'not over'}")
                if not passed and not all_tasks:
                    stopped = True
    ships = len(results) == len(against) and all(r["passed"] for r in results.values())
    # a task whose seeds started before the gate stopped keeps the scores of those that finished
    unfinished = {name: {"seeds": [s for s in seeds if s in scores[name]],
                         "scores": [scores[name][s] for s in seeds if s in scores[name]]}
                  for name in names if name not in results and scores[name]}
    verdict = {"candidate": str(candidate), "ships": ships, "tasks": results, "unfinished": unfinished,
               "not_run": [name for name in names if name not in results and not scores[name]]}
    write_json_atomic(output / "gate.json", verdict)
    notes = [f"{name} unfinished: seed{'s' if len(u['seeds']) > 1 else ''} {', '.join(map(str, u['seeds']))} "
             f"gave {joined(u['scores'])}" for name, u in unfinished.items()]
    if verdict["not_run"]:
        notes.append(f"not run: {', '.join(verdict['not_run'])}")
    typer.echo(f"[gate] {'ships' if ships else 'does not ship'}" + (f" ({'; '.join(notes)})" if notes else ""))
    return verdict


def main(
    ctx: typer.Context,
    candidate: Path = typer.Argument(..., help="the candidate's spacy-elmo model directory (`export --format elmo`)"),
    output: Path = typer.Option(..., "--output", "-o", help="folder for the runs and gate.json"),
    against: List[str] = typer.Option([], "--against", help="TASK=MEAN, the shipped model's mean on this machine kind; repeat, in the order to run"),
    corpus: Path = typer.Option(REPO / "corpus", "--corpus", show_default="corpus/ of the repository", help="folder with conll2003_{train,dev}.spacy and sst5_{train,dev}.spacy"),
    seeds: str = typer.Option("0,1,2", "--seeds", help="comma-separated seeds"),
    all_tasks: bool = typer.Option(False, "--all", help="run every task even after one fails"),
    threads: int = typer.Option(1, "--threads", help="OMP_NUM_THREADS of each spacy train run; 0 leaves the environment as it is"),
    jobs: int = typer.Option(1, "--jobs", help="spacy train runs at once (each logs to its folder's train.log when over 1)"),
) -> None:
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"--seeds {seeds!r}: expected comma-separated integers") from None
    try:
        run_gate(candidate, parse_against(against), output, corpus, seed_list, all_tasks, list(ctx.args), threads, jobs)
    except (ValueError, FileNotFoundError, KeyError, RuntimeError) as err:
        typer.echo(f"Error: {err}", err=True)
        raise typer.Exit(1)


if __name__ == "__main__":
    app = typer.Typer(add_completion=False)
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(main)
    app()
