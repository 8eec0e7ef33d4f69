"""Export a saved model to the published AllenNLP layout or to the own format.

Only the format's own files are written into the output directory (each atomically);
its other files (a model card, ``.git``) are never touched. Files of the same names that
already exist are overwritten only with ``force``.
"""
from pathlib import Path
from typing import Optional, Tuple

FORMATS = ("allennlp", "elmo")
ALLENNLP_FILES = ("options.json", "weights.hdf5")


def export_files(fmt: str) -> Tuple[str, ...]:
    """The names of the files an export in ``fmt`` writes."""
    from .bilm.serialize import MODEL_FILES

    return ALLENNLP_FILES if fmt == "allennlp" else tuple(MODEL_FILES)


def export(
    model_dir: Path, out_dir: Path, fmt: str = "allennlp", half: bool = False, force: bool = False,
    dtype: Optional[str] = None,
) -> Path:
    """Write the model of ``model_dir`` to ``out_dir``.

    fmt: "allennlp" (options.json + weights.hdf5, without the softmax) or "elmo"
        (the own format, with the softmax and vocab.txt).
    half: with "elmo", float16 weights (the same as ``dtype="float16"``).
    dtype: with "elmo", the weights' storage type: "float32" (default), "float16" or "int8"
        (int8 matrices with float32 scales, see ``bilm.int8``: about half float16's size).
    force: overwrite files of the format's names in ``out_dir`` (e.g. exporting a model
        into its own directory at half precision).
    """
    from .bilm import ElmoBiLM
    from .bilm.serialize import VOCAB_NAME, read_vocab, storage_dtype

    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r} (expected 'allennlp' or 'elmo')")
    if fmt == "allennlp" and (half or dtype not in (None, "float32")):
        raise ValueError("export: the AllenNLP layout stores float32 weights; --half and --dtype are for --format elmo")
    try:
        dtype = storage_dtype(half, dtype)
    except ValueError as err:
        raise ValueError(f"export: {err}") from None
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"export: {out_dir} is a file; the export writes a directory")
    existing = [name for name in export_files(fmt) if (out_dir / name).exists()]
    if existing and not force:
        raise ValueError(f"export: {out_dir} already holds {', '.join(existing)}; pass --force to overwrite them")
    bilm = ElmoBiLM.load(model_dir)
    if fmt == "allennlp":
        bilm.to_allennlp(out_dir)
    else:
        vocab = read_vocab(model_dir) if (Path(model_dir) / VOCAB_NAME).exists() else None
        bilm.write_files(out_dir, vocab=vocab, dtype=dtype)
        if vocab is None and (out_dir / VOCAB_NAME).exists():
            (out_dir / VOCAB_NAME).unlink()  # a stale vocabulary of an overwritten model
    return out_dir
