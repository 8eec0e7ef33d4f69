"""Pretraining commands: ``prepare``, ``pretrain``, ``perplexity`` and ``export``."""
import functools
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

import typer

from ._app import app

F = TypeVar("F", bound=Callable[..., Any])


def _clear_errors(command: F) -> F:
    """Bad input (a missing file, an empty corpus, an unknown config value) ends the
    command with its one-line message and exit status 1 instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (ValueError, OSError, KeyError) as err:
            message = err.args[0] if isinstance(err, KeyError) and err.args else err
            typer.echo(f"Error: {message}", err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def prepare(texts: List[Path], output: Path, kind: str = "auto", lang: str = "en") -> Dict[str, int]:
    """Tokenize (``spacy.blank(lang)``) and sentence-split raw text files once into a
    prepared corpus file."""
    from ..pretrain.data import prepare_corpus

    if not texts:
        raise ValueError("prepare: no input text files given")
    corpus = prepare_corpus(texts, kind, lang=lang)
    corpus.save(output)
    return {"sentences": corpus.n_sentences, "tokens": corpus.n_tokens, "types": len(corpus.types)}


def pretrain(config_path: Path, output: Path, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Train a biLM as the config says; resumes from ``output``'s checkpoint if there is one."""
    from ..pretrain.config import load_pretrain_config
    from ..pretrain.distributed import distributed_from_env
    from ..pretrain.trainer import Trainer

    config = load_pretrain_config(config_path, overrides)
    with distributed_from_env(cuda=config["training"]["device"] != "cpu"):
        return Trainer(config, output).run()


def perplexity(model_dir: Path, text: Path, kind: str = "auto", batch_tokens: int = 4096) -> float:
    """Held-out perplexity of a pretrained model (one with its softmax) on a text file,
    tokenized as pretraining does."""
    from ..bilm import ElmoBiLM
    from ..bilm.serialize import read_vocab
    from ..pretrain.corpus import target_map
    from ..pretrain.data import load_corpus, prepare_corpus
    from ..pretrain.trainer import evaluate

    bilm = ElmoBiLM.load(model_dir)
    if bilm.softmax is None:
        raise ValueError(f"{model_dir}: the model has no softmax (published weights), so no perplexity")
    vocab = read_vocab(model_dir)
    corpus = load_corpus(text) if kind == "auto" else prepare_corpus([text], kind)
    return evaluate(bilm, corpus, target_map(corpus, vocab), batch_tokens=batch_tokens)


def export(model_dir: Path, out_dir: Path, fmt: str = "allennlp", half: bool = False) -> Path:
    """Write a model as options.json + weights.hdf5 ("allennlp") or the own format ("elmo")."""
    from ..bilm import ElmoBiLM
    from ..bilm.serialize import VOCAB_NAME, read_vocab

    bilm = ElmoBiLM.load(model_dir)
    if fmt == "allennlp":
        bilm.to_allennlp(out_dir)
    elif fmt == "elmo":
        vocab = read_vocab(model_dir) if (Path(model_dir) / VOCAB_NAME).exists() else None
        bilm.save(out_dir, vocab=vocab, half=half)
    else:
        raise ValueError(f"export: unknown format {fmt!r} (expected 'allennlp' or 'elmo')")
    return Path(out_dir)


@app.command("prepare")
@_clear_errors
def prepare_cli(
    texts: List[Path] = typer.Argument(..., help="raw text files (.txt, .gz, or an aclImdb .tar.gz)"),
    output: Path = typer.Option(..., "--output", "-o", help="prepared corpus file (.npz)"),
    kind: str = typer.Option("auto", "--kind", help="auto, plain, wikitext or imdb"),
    lang: str = typer.Option("en", "--lang", help="language code of spaCy's tokenizer (spacy.blank(LANG)), e.g. de, fr"),
) -> None:
    """Tokenize and sentence-split raw text once into the corpus file pretraining reads."""
    stats = prepare(texts, output, kind, lang=lang)
    typer.echo(f"Wrote {output}: {stats['sentences']:,} sentences, {stats['tokens']:,} tokens, {stats['types']:,} types")


@app.command("pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@_clear_errors
def pretrain_cli(
    ctx: typer.Context,
    config_path: Path = typer.Argument(..., help="pretraining config (e.g. configs/pretrain/tiny.cfg)"),
    output: Path = typer.Option(..., "--output", "-o", help="output directory (model + checkpoints)"),
) -> None:
    """Train a biLM (resumes from OUTPUT's checkpoint). Override settings like --training.max_steps 1000."""
    from spacy.cli._util import parse_config_overrides

    result = pretrain(config_path, output, parse_config_overrides(ctx.args))
    if int(os.environ.get("RANK", "0")) == 0:
        typer.echo(f"Done at step {result['step']}; model in {output}")


def unigram_baseline(model_dir: Path, train: Path, text: Path, kind: str = "auto") -> float:
    """Add-one unigram perplexity of ``text`` over the model's output vocabulary, with the
    counts of ``train`` and the same counting as ``perplexity``."""
    from ..bilm.serialize import read_vocab
    from ..pretrain.corpus import unigram_perplexity
    from ..pretrain.data import load_corpus, prepare_corpus

    corpus = load_corpus(text) if kind == "auto" else prepare_corpus([text], kind)
    return unigram_perplexity(load_corpus(train), corpus, read_vocab(model_dir))


@app.command("perplexity")
@_clear_errors
def perplexity_cli(
    model_dir: Path = typer.Argument(..., help="pretrained model directory"),
    text: Path = typer.Argument(..., help="text file (raw, .gz) or prepared corpus (.npz)"),
    kind: str = typer.Option("auto", "--kind", help="auto, plain, wikitext or imdb"),
    baseline_train: Optional[Path] = typer.Option(
        None, "--baseline-train", help="also print an add-one unigram baseline counted on this training text"
    ),
    threads: int = typer.Option(0, "--threads", help="torch CPU threads (0: torch's default)"),
) -> None:
    """Held-out perplexity of a pretrained model on a text file."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    typer.echo(f"perplexity {perplexity(model_dir, text, kind):.2f}")
    if baseline_train is not None:
        typer.echo(f"unigram baseline perplexity {unigram_baseline(model_dir, baseline_train, text, kind):.2f}")


@app.command("export")
@_clear_errors
def export_cli(
    model_dir: Path = typer.Argument(..., help="model directory in the own format"),
    out_dir: Path = typer.Argument(..., help="output directory"),
    fmt: str = typer.Option("allennlp", "--format", help="allennlp (options.json + weights.hdf5) or elmo"),
    half: bool = typer.Option(False, "--half", help="with --format elmo: half-precision weights"),
) -> None:
    """Export a model to the published AllenNLP layout or the own format."""
    typer.echo(f"Wrote {export(model_dir, out_dir, fmt, half)}")
