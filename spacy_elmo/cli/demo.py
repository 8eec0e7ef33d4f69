"""``demo``: contextual vectors at work, on polysemous words."""
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import typer
from spacy.tokens import Token

from ._app import app, clear_errors

# (word, two sentences with the same sense, one with another sense)
SENSES: List[Tuple[str, str, str, str]] = [
    ("bank", "The river bank was flooded.", "We walked along the bank of the stream.", "The bank raised interest rates."),
    ("play", "We saw a play at the theatre.", "The actors rehearsed the new play for weeks.", "The children play in the garden."),
    ("bat", "The bat flew out of the cave at night.", "A bat hunts insects in the dark.", "He swung the bat and hit the ball."),
]
# (word, its tokens in those three sentences): what sense_tokens gives
SenseTokens = Sequence[Tuple[str, Tuple[Token, Token, Token]]]


def word_token(nlp, text: str, word: str) -> Token:
    doc = nlp(text)
    for tok in doc:
        if tok.lower_ == word:
            return tok
    raise ValueError(f"'{word}' not found in {text!r}")


def sense_tokens(nlp, senses: Sequence[Tuple[str, str, str, str]] = SENSES) -> SenseTokens:
    """For each word: its token in the two same-sense sentences and in the other-sense one
    (each sentence run through ``nlp`` once, for every table of the demo)."""
    return [(word, tuple(word_token(nlp, t, word) for t in texts)) for word, *texts in senses]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def sense_similarities(tokens: SenseTokens) -> List[Tuple[str, float, float]]:
    """For each word of ``sense_tokens``: cosine(same sense), cosine(other sense), on
    ``Token.vector`` (``doc.tensor``, the mean of the ELMo layers)."""
    return [(word, cosine(a.vector, b.vector), cosine(a.vector, o.vector)) for word, (a, b, o) in tokens]


def layer_parts(n_layers: int, width: int) -> List[Tuple[str, int, slice]]:
    """The parts of ``doc._.elmo`` that ``--by-layer`` compares: layer 0 (context-free, the
    same vector in both halves) whole, each LSTM layer as its forward and backward half."""
    half = width // 2
    parts = [("layer 0", 0, slice(0, width))]
    for layer in range(1, n_layers):
        parts += [(f"layer {layer} fwd", layer, slice(0, half)), (f"layer {layer} bwd", layer, slice(half, width))]
    return parts


def layer_similarities(tokens: SenseTokens) -> List[Tuple[str, List[Tuple[str, float, float]]]]:
    """For each word of ``sense_tokens`` and each part of ``layer_parts``: cosine(same sense),
    cosine(other sense), on the word's rows of ``doc._.elmo``."""
    rows = []
    for word, toks in tokens:
        a, b, o = (tok.doc._.elmo[:, tok.i] for tok in toks)
        rows.append((word, [(name, cosine(a[i, sl], b[i, sl]), cosine(a[i, sl], o[i, sl])) for name, i, sl in layer_parts(*a.shape)]))
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
    tokens = sense_tokens(nlp)
    typer.echo(f"{'word':<8}{'same sense':>12}{'other sense':>13}")
    for word, same, other in sense_similarities(tokens):
        typer.echo(f"{word:<8}{same:>12.3f}{other:>13.3f}{'   ok' if same > other else '   (no)'}")
    for word, a, b, other in SENSES:
        typer.echo(f"  {word}: [{a}] vs [{b}] / [{other}]")
    if by_layer:
        rows = layer_similarities(tokens)
        typer.echo("\nsame / other sense on each layer (fwd, bwd: the LSTM directions)")
        typer.echo(f"{'word':<8}" + "".join(f"{name:>15}" for name, _, _ in rows[0][1]))
        for word, parts in rows:
            typer.echo(f"{word:<8}" + "".join(f"{f'{same:.3f} / {other:.3f}':>15}" for _, same, other in parts))
