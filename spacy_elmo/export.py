"""Export a saved model to the published AllenNLP layout or to the own format."""
from pathlib import Path

FORMATS = ("allennlp", "elmo")


def export(model_dir: Path, out_dir: Path, fmt: str = "allennlp", half: bool = False) -> Path:
    """Write the model of ``model_dir`` to ``out_dir``.

    fmt: "allennlp" (options.json + weights.hdf5, without the softmax) or "elmo"
        (the own format, with the softmax and vocab.txt).
    half: with "elmo", float16 weights.
    """
    from .bilm import ElmoBiLM
    from .bilm.serialize import VOCAB_NAME, read_vocab

    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r} (expected 'allennlp' or 'elmo')")
    bilm = ElmoBiLM.load(model_dir)
    if fmt == "allennlp":
        bilm.to_allennlp(out_dir)
    else:
        vocab = read_vocab(model_dir) if (Path(model_dir) / VOCAB_NAME).exists() else None
        bilm.save(out_dir, vocab=vocab, half=half)
    return Path(out_dir)
