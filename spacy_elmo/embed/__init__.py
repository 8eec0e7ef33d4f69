"""Embedding whole corpora: sentences (or raw text, or a DocBin) in, ELMo layers out.

``embed_file`` (one machine, optionally several processes) and ``embed_file_ray``
(a Ray cluster) write the HDF5 layout of AllenNLP's ``elmo`` command; ``embed_docbin``
turns a ``.spacy`` file into one whose Docs carry ``doc._.elmo``.
"""
from .embedder import LAYER_CHOICES, Embedder, EmbedSettings
from .hdf5 import read_layout
from .local import EmbedReport, embed_docbin, embed_file
from .reader import InputStats, iter_lines, scan_input

__all__ = [
    "LAYER_CHOICES",
    "Embedder",
    "EmbedSettings",
    "EmbedReport",
    "InputStats",
    "embed_docbin",
    "embed_file",
    "iter_lines",
    "read_layout",
    "scan_input",
]
