"""Quality per CPU-hour of a pretrained English model: measure a checkpoint, keep the figures,
plot them against the tokens seen.

    python scripts/model_history.py measure MODEL_DIR HISTORY.json --label "phase 4, step 2000" \
        --tokens-seen 24.1e6 --cpu-hours 4.2 --test corpus/pretrain/test.npz \
        --baseline-train corpus/pretrain/train.npz --data-dir ../shared/data
    python scripts/model_history.py plot HISTORY.json docs/en_elmo_cpu_quality.png

``measure`` runs, on MODEL_DIR: held-out perplexity (``python -m spacy_elmo perplexity``, with the
add-one unigram baseline on the same vocabulary), the part-of-speech probe (probe_pos.py), the
word-sense probe (probe_wsd.py) and the three demo words, then appends (or replaces, by label)
one record in HISTORY.json. Each figure is parsed from the tool that computes it; nothing is
computed twice here.
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

HERE = Path(__file__).resolve().parent
app = typer.Typer(add_completion=False, help=__doc__)
LAYERS = ("layer 0 (char CNN)", "layer 1 (LSTM 1)", "layer 2 (LSTM 2)", "mean of layers")


def _run(args: List[str]) -> str:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def _percentages(table: str) -> Dict[str, float]:
    """``name   12.34%`` rows of a probe's table."""
    rows = {}
    for line in table.splitlines():
        m = re.match(r"^(.*?)\s+([0-9.]+)%\s*$", line)
        if m:
            rows[m.group(1).strip()] = float(m.group(2))
    return rows


def _probe(script: str, args: List[str]) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.txt"
        _run([str(HERE / script), *args, "--threads", "1", "--output", str(out)])
        return _percentages(out.read_text(encoding="utf-8"))


def _demo(model_dir: Path) -> Dict[str, List[float]]:
    sys.path.insert(0, str(HERE.parent))
    from spacy_elmo.cli.demo import load_nlp, sense_similarities, sense_tokens

    return {word: [round(same, 4), round(other, 4)] for word, same, other in sense_similarities(sense_tokens(load_nlp(model_dir)))}


@app.command("measure")
def measure(
    model_dir: Path = typer.Argument(..., help="spacy-elmo model directory (with its softmax)"),
    history: Path = typer.Argument(..., help="JSON file of records (created if missing)"),
    label: str = typer.Option(..., "--label", help="name of this checkpoint, e.g. 'phase 4, step 2000'"),
    tokens_seen: float = typer.Option(..., "--tokens-seen", help="training tokens seen in all phases"),
    cpu_hours: float = typer.Option(..., "--cpu-hours", help="CPU-core hours of training in all phases"),
    gpu_hours: float = typer.Option(0.0, "--gpu-hours", help="GPU hours of training in all phases"),
    test: Path = typer.Option(..., "--test", help="held-out text (prepared .npz or raw) for perplexity"),
    baseline_train: Path = typer.Option(..., "--baseline-train", help="training text for the unigram baseline"),
    data_dir: Path = typer.Option(Path("../shared/data"), "--data-dir", help="folder with conll2003/ and semcor/"),
) -> None:
    """Measure MODEL_DIR and record it in HISTORY."""
    out = _run(["-m", "spacy_elmo", "perplexity", str(model_dir), str(test), "--baseline-train",
                str(baseline_train), "--threads", "1"])
    ppl = float(re.search(r"^perplexity ([0-9.]+)", out, re.M).group(1))
    unigram = float(re.search(r"unigram baseline perplexity ([0-9.]+)", out).group(1))
    pos = _probe("probe_pos.py", [str(data_dir / "conll2003" / "train.txt.gz"),
                                  str(data_dir / "conll2003" / "valid.txt.gz"), "--weights", str(model_dir)])
    wsd = _probe("probe_wsd.py", [str(data_dir / "semcor" / "wsd_corpora_semcor3.0_and_allwords_eval.naf.tar.gz"),
                                  "--weights", str(model_dir)])
    record: Dict[str, Any] = {
        "label": label, "tokens_seen": tokens_seen, "cpu_hours": cpu_hours, "gpu_hours": gpu_hours, "test": test.name,
        "perplexity": ppl, "unigram_perplexity": unigram, "pos": pos, "wsd": wsd, "demo": _demo(model_dir),
    }
    records = json.loads(history.read_text(encoding="utf-8")) if history.exists() else []
    records = [r for r in records if r["label"] != label] + [record]
    records.sort(key=lambda r: r["tokens_seen"])
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    typer.echo(json.dumps(record, indent=1))


def _best(scores: Dict[str, float]) -> float:
    return max(scores[name] for name in LAYERS if name in scores)


@app.command("plot")
def plot(
    history: Path = typer.Argument(..., help="JSON file written by `measure`"),
    output: Path = typer.Argument(..., help="PNG to write"),
    title: Optional[str] = typer.Option("en_elmo_cpu: quality against training", "--title"),
) -> None:
    """Plot perplexity, the probes and the demo margins against tokens seen (log scale, top row)
    and against CPU-core hours (bottom row; GPU hours, where a GPU trained, in its axis label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    everything = json.loads(history.read_text(encoding="utf-8"))
    needed = ("tokens_seen", "cpu_hours", "perplexity", "unigram_perplexity", "pos", "wsd", "demo")
    for r in everything:
        missing = [k for k in needed if k not in r]
        if missing:
            raise typer.BadParameter(f"record {r.get('label', '?')!r} has no {', '.join(missing)}", param_hint="HISTORY")
    if not everything:
        raise typer.BadParameter(f"{history} holds no records", param_hint="HISTORY")
    gpu = max(r.get("gpu_hours") or 0.0 for r in everything)  # cumulative, like cpu_hours
    rows = (("tokens_seen", 1e6, "training tokens seen (millions, log scale)"),
            ("cpu_hours", 1, "CPU-core hours" + (f" (+{gpu:.2f} GPU-hours)" if gpu else "")))
    fig, grid = plt.subplots(2, 4, figsize=(17, 7.2))
    for axes, (key, unit, xlabel) in zip(grid, rows):
        records = sorted(everything, key=lambda r: r[key])  # each row's lines run left to right
        x = [r[key] / unit for r in records]
        ax = axes[0]
        ax.plot(x, [r["perplexity"] for r in records], "o-", label="biLM")
        ax.set_ylabel("WikiText-2 test perplexity")
        ax.set_title("perplexity (unigram: %.0f)" % records[-1]["unigram_perplexity"])
        for ax, probe, base, name in ((axes[1], "pos", "most frequent tag", "POS probe (CoNLL-2003 dev)"),
                                      (axes[2], "wsd", "most frequent sense", "WSD (Senseval-2)")):
            ax.plot(x, [_best(r[probe]) for r in records], "o-", label="best layer")
            ax.plot(x, [r[probe][base] for r in records], "--", color="grey", label=base)
            ax.set_ylabel("accuracy %")
            ax.set_title(name)
            ax.legend(fontsize=8)
        ax = axes[3]
        for word in records[-1]["demo"]:
            ax.plot(x, [r["demo"][word][0] - r["demo"][word][1] if word in r["demo"] else float("nan")
                        for r in records], "o-", label=word)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_ylabel("cos(same sense) - cos(other sense)")
        ax.set_title("demo words (> 0: separated)")
        ax.legend(fontsize=8)
        for ax in axes:
            ax.set_xlabel(xlabel)
    for ax in grid[0]:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"{title}, against tokens seen (top) and training time (bottom)", fontsize=10)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    typer.echo(f"Wrote {output}")


if __name__ == "__main__":
    app()
