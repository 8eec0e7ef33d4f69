"""Summarise the project's runs: a Markdown table and a plot of the learned ELMo layer weights.

    python scripts/report.py --metrics-dir metrics --training-dir training \\
        --output metrics/report.md --plot metrics/layer_weights.png

A run NAME is ``metrics/NAME.json`` (the output of ``spacy evaluate``) together with
``training/NAME/`` (``model-best/`` and the ``timing.json`` written by ``scripts/timed.py``).
The task follows from the scores: ``ents_f`` -> NER (F1), ``cats_micro_f`` -> exclusive textcat
(accuracy: with one predicted label per Doc, micro F = accuracy). Missing pieces show as "–".

For each run whose pipeline has an ``elmo`` component, the task's learned scalar mix is read
from the trained pipeline (softmax(s_j) over the biLM layers and gamma, Peters et al. 2018,
Figure 2) and plotted, if matplotlib is installed (``pip install spacy-elmo[plot]``).
"""
import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import typer

LAYER_NAMES = ["layer 0 (char CNN)", "layer 1 (LSTM 1)", "layer 2 (LSTM 2)"]


@dataclass
class Run:
    name: str
    task: str
    metric: str
    score: Optional[float]
    words_per_second: Optional[float] = None
    train_seconds: Optional[float] = None
    max_steps: Optional[int] = None
    pipeline: List[str] = field(default_factory=list)
    model_dir: Optional[Path] = None

    @property
    def is_elmo(self) -> bool:
        return "elmo" in self.pipeline

    @property
    def embedding(self) -> str:
        if self.is_elmo:
            return "ELMo"
        if "tok2vec" in self.pipeline:
            return "spaCy tok2vec (baseline)"
        return "–"


@dataclass
class LayerWeights:
    run: str
    task: str
    component: str
    weights: List[float]  # softmax(s_j)
    gamma: float


def task_of(scores: Dict[str, Any]) -> Optional[Tuple[str, str, Optional[float]]]:
    """(task, metric name, score) for the scores of ``spacy evaluate``; None if unknown."""
    if scores.get("ents_f") is not None:
        return "NER (CoNLL-2003)", "F1", scores["ents_f"]
    if scores.get("cats_micro_f") is not None:
        return "Sentiment (SST-5)", "accuracy", scores["cats_micro_f"]
    return None


def _read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _model_dir(run_dir: Path) -> Optional[Path]:
    for sub in ("model-best", "model-last"):
        if (run_dir / sub / "config.cfg").exists():
            return run_dir / sub
    return None


def collect_runs(metrics_dir: Path, training_dir: Path) -> List[Run]:
    from spacy.util import load_config

    runs = []
    for path in sorted(Path(metrics_dir).glob("*.json")):
        scores = _read_json(path)
        found = task_of(scores) if isinstance(scores, dict) else None
        if found is None:
            continue
        task, metric, score = found
        run = Run(path.stem, task, metric, score, words_per_second=scores.get("speed"))
        run_dir = Path(training_dir) / path.stem
        timing = _read_json(run_dir / "timing.json")
        if timing and timing.get("returncode", 0) == 0:
            run.train_seconds = timing.get("seconds")
        run.model_dir = _model_dir(run_dir)
        if run.model_dir is not None:
            config = load_config(run.model_dir / "config.cfg", interpolate=False)
            run.pipeline = list(config["nlp"]["pipeline"])
            run.max_steps = config["training"].get("max_steps")
        runs.append(run)
    task_order = {"NER (CoNLL-2003)": 0, "Sentiment (SST-5)": 1}
    runs.sort(key=lambda r: (task_order.get(r.task, 9), r.task, r.is_elmo, r.name))
    return runs


def _fmt_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def render_table(runs: List[Run]) -> str:
    lines = [
        "| task | model | run | dev score | words/s (dev) | training time | max steps |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        score = f"{100 * r.score:.2f} {r.metric}" if r.score is not None else "–"
        wps = f"{r.words_per_second:,.0f}" if r.words_per_second else "–"
        steps = str(r.max_steps) if r.max_steps is not None else "–"
        lines.append(
            f"| {r.task} | {r.embedding} | `{r.name}` | {score} | {wps} | {_fmt_time(r.train_seconds)} | {steps} |"
        )
    return "\n".join(lines)


def render_weights_table(entries: List[LayerWeights]) -> str:
    lines = [
        "| task | run | component | " + " | ".join(f"s{j}" for j in range(3)) + " | γ |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for e in entries:
        ws = " | ".join(f"{w:.3f}" for w in e.weights)
        lines.append(f"| {e.task} | `{e.run}` | {e.component} | {ws} | {e.gamma:.3f} |")
    return "\n".join(lines)


def find_scalar_mixes(model) -> List[Any]:
    """The torch ScalarMix modules of the ELMo listeners inside a Thinc model."""
    from spacy_elmo.layers import get_scalar_mixes

    return get_scalar_mixes(model)


def find_scalar_mix(model):
    """The first ScalarMix inside a Thinc model; a clear error when there is none."""
    mixes = find_scalar_mixes(model)
    if not mixes:
        raise ValueError(
            f"no ELMo scalar mix found in model {model.name!r}: expected the 'elmo_scalar_mix' "
            "node of a spacy-elmo.ElmoListener.v1 (is this component's tok2vec one?)"
        )
    return mixes[0]


def mix_values(mix) -> Tuple[List[float], float]:
    """(softmax(s_j), gamma) of a ScalarMix as plain floats."""
    import torch

    with torch.no_grad():
        weights = torch.softmax(mix.weights.detach().float().cpu(), dim=0).tolist()
        gamma = float(mix.gamma.detach().float().cpu().reshape(-1)[0])
    return weights, gamma


def pipeline_layer_weights(run: Run) -> List[LayerWeights]:
    """Load a trained pipeline and read the scalar mix of each component that listens to ELMo."""
    import spacy

    nlp = spacy.load(run.model_dir)
    out = []
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if name == "elmo" or model is None:
            continue
        for mix in find_scalar_mixes(model):
            weights, gamma = mix_values(mix)
            out.append(LayerWeights(run.name, run.task, name, weights, gamma))
    if not out:
        raise ValueError(f"{run.model_dir}: pipeline {nlp.pipe_names} has an elmo component but no component with an ELMo scalar mix")
    return out


def plot_layer_weights(entries: List[LayerWeights], path: Path) -> Path:
    """Bar chart of softmax(s_j) per layer for each task (cf. the paper's Figure 2), gamma in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_layers = max(len(e.weights) for e in entries)
    width = 0.8 / len(entries)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    for i, e in enumerate(entries):
        xs = [j + (i - (len(entries) - 1) / 2) * width for j in range(len(e.weights))]
        ax.bar(xs, e.weights, width=width, label=f"{e.task} [{e.component}], γ = {e.gamma:.2f}")
    ax.axhline(1 / n_layers, color="grey", linestyle=":", linewidth=1, label="uniform")
    ax.set_xticks(range(n_layers))
    ax.set_xticklabels((LAYER_NAMES + [f"layer {j}" for j in range(3, n_layers)])[:n_layers])
    ax.set_ylabel("softmax-normalised weight s_j")
    ax.set_ylim(0, 1)
    ax.set_title("Learned ELMo layer weights per task")
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    desc = f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs"
    try:
        import torch

        if torch.cuda.is_available():
            desc += f", GPU: {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return desc


def write_report(
    metrics_dir: Path,
    training_dir: Path,
    output: Path,
    plot: Optional[Path],
) -> str:
    runs = collect_runs(metrics_dir, training_dir)
    parts = ["# Results on the dev sets", ""]
    if runs:
        parts += [render_table(runs), ""]
    else:
        parts += [f"No evaluation results found in `{metrics_dir}`.", ""]
    parts += [
        "Dev score: entity F1 (NER) or accuracy (SST-5, 5 classes), in %. Words/s: `spacy evaluate` "
        "on the dev set. Training time: wall clock of `spacy train`, initialisation and evaluations included.",
        "",
    ]
    entries: List[LayerWeights] = []
    problems: List[str] = []
    for run in runs:
        if not run.is_elmo or run.model_dir is None:
            continue
        try:
            entries.extend(pipeline_layer_weights(run))
        except Exception as err:  # report what could be read, say what could not
            problems.append(f"`{run.name}`: {err}")
    if entries:
        parts += ["## Learned ELMo layer weights", "", render_weights_table(entries), ""]
        if plot is not None:
            try:
                written = plot_layer_weights(entries, plot)
                rel = os.path.relpath(Path(written).resolve(), Path(output).resolve().parent)
                parts += [f"![learned layer weights]({Path(rel).as_posix()})", ""]
            except ImportError:
                problems.append("matplotlib is not installed (`pip install spacy-elmo[plot]`): no plot written")
    if problems:
        parts += ["## Not reported", ""] + [f"- {p}" for p in problems] + [""]
    parts += [f"Machine: {machine_description()}.", ""]
    text = "\n".join(parts)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    return text


def main(
    metrics_dir: Path = typer.Option(Path("metrics"), help="folder of `spacy evaluate` JSON files, one per run"),
    training_dir: Path = typer.Option(Path("training"), help="folder of training outputs, one sub-folder per run"),
    output: Path = typer.Option(Path("metrics/report.md"), help="Markdown report to write"),
    plot: Path = typer.Option(Path("metrics/layer_weights.png"), help="PNG plot of the learned layer weights"),
) -> None:
    """Write the results table (and the layer-weight plot) of the project's runs."""
    text = write_report(metrics_dir, training_dir, output, plot)
    typer.echo(text)
    typer.echo(f"Wrote {output}")


if __name__ == "__main__":
    typer.run(main)
