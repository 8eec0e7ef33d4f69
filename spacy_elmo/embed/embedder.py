"""The work of one worker: lines in, ELMo layers out, through the ``elmo`` pipe.

Every engine (one process, a process pool, Ray actors) builds one ``Embedder`` per
worker, so the model is loaded once per worker and every engine computes exactly
what the component puts in ``doc._.elmo``.
"""
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from spacy.tokens import Doc

from ..bilm.precision import check_device, check_precision

LAYER_CHOICES = ("all", "top", "average")
DTYPE_CHOICES = ("float32", "float16")


@dataclass(frozen=True)
class EmbedSettings:
    """What an embedding run computes (stored in the output, checked on resume).

    weights: a model directory (the project's own format, or options.json + one
        .hdf5 in the published layout), the name of a published model, or None for
        the English model shipped with spacy-elmo.
    layers: "all" (3, n, 2P), "top" (n, 2P) or "average" (n, 2P, the mean of the layers).
    dtype: "float32" or "float16" for the stored vectors.
    tokenize: False: a line is one sentence of whitespace-separated tokens (AllenNLP's
        convention). True: a line is raw text, tokenized by spaCy and cut into
        sentences by the component's own segmentation.
    max_length: longest biLM sentence in tokens (the component's ``max_length``).
    lang: language of the spaCy tokenizer used with ``tokenize``.
    precision: how the biLM computes (the component's ``precision``): "float32",
        "int8" (CPU) or "bf16" / "fp16" (CUDA); see ``bilm.precision``.
    """

    weights: Optional[str] = None
    layers: str = "all"
    dtype: str = "float32"
    tokenize: bool = False
    max_length: int = 256
    lang: str = "en"
    precision: str = "float32"

    def __post_init__(self) -> None:
        check_precision(self.precision, "--precision")
        if self.layers not in LAYER_CHOICES:
            raise ValueError(f"--layers must be one of {', '.join(LAYER_CHOICES)}, got {self.layers!r}")
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPE_CHOICES)}, got {self.dtype!r}")
        if self.max_length < 1:
            raise ValueError(f"--max-length must be at least 1, got {self.max_length}")

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def check_device(self, gpu: bool) -> None:
        """A ValueError when ``precision`` cannot run where the biLM will (a CUDA GPU
        if ``gpu``, else the CPU), raised before anything is loaded or written."""
        import torch

        check_device(self.precision, torch.device("cuda" if gpu else "cpu"), "--precision")


def on_gpu() -> bool:
    """Whether a model built in this process goes to the GPU (``spacy.require_gpu``)."""
    from thinc.api import get_current_ops

    return get_current_ops().device_type == "gpu"


def loader_config(weights: Optional[str]) -> Optional[Dict[str, Any]]:
    """The ``[initialize.components.elmo.loader]`` block for ``--weights``: None for
    the shipped model, else a directory in either format or a published model's name."""
    from ..loaders import resolve_weights

    return None if weights is None else resolve_weights(weights)


def prefetch_weights(settings: EmbedSettings) -> None:
    """Download a published model once here, before workers start (so that they do
    not all download it at the same time)."""
    loader = loader_config(settings.weights)
    if loader is not None and loader["@misc"] == "spacy-elmo.PublishedLoader.v1":
        from ..published import fetch_published

        fetch_published(loader["name"])


class Embedder:
    """A blank pipeline with an initialised ``elmo`` component (``tensor = "none"``)."""

    def __init__(self, settings: EmbedSettings) -> None:
        import spacy

        self.settings = settings
        self.nlp = spacy.blank(settings.lang)
        config = {"tensor": "none", "max_length": settings.max_length, "precision": settings.precision}
        self.nlp.add_pipe("elmo", config=config)
        loader = loader_config(settings.weights)
        if loader is not None:
            self.nlp.config["initialize"]["components"]["elmo"] = {"loader": loader}
        self.nlp.initialize()
        self.elmo = self.nlp.get_pipe("elmo")

    @property
    def width(self) -> int:
        return int(self.elmo.bilm.output_dim)

    def make_doc(self, line: str) -> Doc:
        """The Doc of one input line: its whitespace tokens as one sentence, or
        (``tokenize``) the spaCy tokenization of the raw text."""
        if self.settings.tokenize:
            return self.nlp.make_doc(line)
        words = line.split()
        starts = [True] + [False] * (len(words) - 1) if words else None
        return Doc(self.nlp.vocab, words=words, sent_starts=starts)

    def docs(self, lines: Sequence[str], batch_size: int = 64) -> List[Doc]:
        """Docs of ``lines`` with ``doc._.elmo`` set."""
        return list(self.elmo.pipe((self.make_doc(line) for line in lines), batch_size=batch_size))

    def embed(self, lines: Sequence[str]) -> List[np.ndarray]:
        """The stored array of each line: its layers as ``settings.layers`` and
        ``settings.dtype`` say (an empty line gives a zero-length array)."""
        return [select_layers(doc._.elmo, self.settings) for doc in self.docs(lines, batch_size=max(1, len(lines)))]


def select_layers(layers: np.ndarray, settings: EmbedSettings) -> np.ndarray:
    """``(L, n, 2P)`` layers as stored: all, the top one, or their mean."""
    if settings.layers == "top":
        out = layers[-1]
    elif settings.layers == "average":
        out = layers.mean(axis=0)
    else:
        out = layers
    return np.ascontiguousarray(out, dtype=np.dtype(settings.dtype))
