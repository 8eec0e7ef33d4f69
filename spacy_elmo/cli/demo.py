"""``demo``: contextual vectors at work, on polysemous words."""
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import typer

from ._app import app, clear_errors

# (word, two sentences with the same sense, one with another sense)
SENSES: List[Tuple[str, str, str, str]] = [
    ("bank", "The river bank was flooded.", "We walked along the bank of the stream.", "The bank raised interest rates."),
    ("play", "We saw a play at the theatre.", "The actors rehearsed the new play for weeks.", "The children play in the garden."),
    ("bat", "The bat flew out of the cave at night.", "A bat hunts insects in the dark.", "He swung the bat and hit the ball."),
]


def word_token(nlp, text: str, word: str):
    doc = nlp(text)
    for tok in doc:
        if tok.lower_ == word:
            return tok
    raise ValueError(f"'{word}' not found in {text!r}")


def word_vector(nlp, text: str, word: str) -> np.ndarray:
    return word_token(nlp, text, word).vector


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def sense_similarities(nlp, senses: Sequence[Tuple[str, str, str, str]] = SENSES) -> List[Tuple[str, float, float]]:
    """For each word: cosine(same sense), cosine(other sense), on ``Token.vector``
    (``doc.tensor``, the mean of the ELMo layers)."""
    rows = []
    for word, a, b, other in senses:
        va, vb, vo = (word_vector(nlp, t, word) for t in (a, b, other))
        rows.append((word, cosine(va, vb), cosine(va, vo)))
    return rows


def layer_parts(n_layers: int, width: int) -> List[Tuple[str, int, slice]]:
    """The parts of ``doc._.elmo`` that ``--by-layer`` compares: layer 0 (context-free, the
    same vector in both halves) whole, each LSTM layer as its forward and backward half."""
    half = width // 2
    parts = [("layer 0", 0, slice(0, width))]
    for layer in range(1, n_layers):
        parts += [(f"layer {layer} fwd", layer, slice(0, half)), (f"layer {layer} bwd", layer, slice(half, width))]
    return parts


def layer_similarities(nlp, senses: Sequence[Tuple[str, str, str, str]] = SENSES) -> List[Tuple[str, List[Tuple[str, float, float]]]]:
    """For each word and each part of ``layer_parts``: cosine(same sense), cosine(other sense),
    on the word's rows of ``doc._.elmo``."""
    rows = []
    for word, a, b, other in senses:
        toks = [word_token(nlp, t, word) for t in (a, b, other)]
        layers = [tok.doc._.elmo[:, tok.i] for tok in toks]
        parts = layer_parts(*layers[0].shape)
        rows.append((word, [(name, cosine(layers[0][i, sl], layers[1][i, sl]), cosine(layers[0][i, sl], layers[2][i, sl])) for name, i, sl in parts]))
    return rows


def load_nlp(weights: Optional[Path]):
    import spacy

    from ..loaders import resolve_weights

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    if weights is not None:
        nlp.config["initialize"]["components"]["elmo"] = {"loader": resolve_weights(weights)}
    nlp.initialize()
    return nlp


@app.command("demo")
@clear_errors
def demo_cli(
    weights: Optional[Path] = typer.Option(None, "--weights", help="model dir or published model name, e.g. small (default: the shipped English model)"),
    by_layer: bool = typer.Option(False, "--by-layer", help="also print the similarities on each layer and LSTM direction"),
) -> None:
    """Show that ELMo vectors tell word senses apart (cosine similarities)."""
    nlp = load_nlp(weights)
    typer.echo(f"{'word':<8}{'same sense':>12}{'other sense':>13}")
    for word, same, other in sense_similarities(nlp):
        typer.echo(f"{word:<8}{same:>12.3f}{other:>13.3f}{'   ok' if same > other else '   (no)'}")
    for word, a, b, other in SENSES:
        typer.echo(f"  {word}: [{a}] vs [{b}] / [{other}]")
    if by_layer:
        rows = layer_similarities(nlp)
        typer.echo("\nsame / other sense on each layer (fwd, bwd: the LSTM directions)")
        typer.echo(f"{'word':<8}" + "".join(f"{name:>15}" for name, _, _ in rows[0][1]))
        for word, parts in rows:
            typer.echo(f"{word:<8}" + "".join(f"{f'{same:.3f} / {other:.3f}':>15}" for _, same, other in parts))
