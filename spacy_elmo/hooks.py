"""Doc user hooks that make ``Token``, ``Span`` and ``Doc`` ``.vector``,
``.has_vector`` and ``.similarity`` use the ELMo vectors of the Doc.

Without them spaCy's ``similarity`` returns 1.0 for two tokens (or spans) with the
same text, whatever their contexts, and warns W007 because the vocab has no static
vectors. The hooks are plain module-level functions (via ``functools.partial``), so
a Doc with them can be pickled. spaCy does not serialize user hooks: after
``Doc.to_bytes``/``from_bytes``, ``DocBin`` or ``nlp.pipe(n_process=...)`` a Doc has
``doc._.elmo`` (and ``doc.tensor``, not kept by DocBin) but no hooks;
``restore_elmo_hooks(docs)`` puts them back.

Sources of the vectors: "tensor" (``doc.tensor``), "elmo_mean" (the mean of the
layers in ``doc._.elmo``), "elmo_top" (its top layer).
"""
import functools
import warnings
from typing import Iterable, Iterator, Optional, Union

import numpy as np
from spacy.errors import Warnings
from spacy.tokens import Doc, Span, Token

VIEWS = ("mean", "top", "none")
VIEW_ATTR = "elmo_view"


def _doc_rows(doc: Doc, source: str) -> Optional[np.ndarray]:
    """The per-token vectors of a Doc, shape (len(doc), D), or None when the Doc no
    longer holds them (e.g. dropped by ``doc_cleaner``)."""
    if source == "tensor":
        tensor = doc.tensor
        if tensor is None or tensor.ndim != 2 or tensor.shape[0] != len(doc):
            return None
        return tensor
    layers = doc._.elmo if Doc.has_extension("elmo") else None
    if layers is None or layers.shape[1] != len(doc):
        return None
    return layers


def _vector(obj: Union[Token, Span, Doc], source: str) -> np.ndarray:
    doc = obj if isinstance(obj, Doc) else obj.doc
    rows = _doc_rows(doc, source)
    if rows is None:
        return np.zeros((0,), dtype="float32")
    if isinstance(obj, Token):
        start, end = obj.i, obj.i + 1
    elif isinstance(obj, Span):
        start, end = obj.start, obj.end
    else:
        start, end = 0, len(doc)
    if source == "tensor":
        picked = rows[start:end]
        width = rows.shape[1]
    else:  # (layers, tokens, D)
        picked = rows[-1, start:end] if source == "elmo_top" else rows[:, start:end].mean(axis=0)
        width = rows.shape[2]
    if end <= start:
        return np.zeros((width,), dtype="float32")
    return np.asarray(picked.mean(axis=0), dtype="float32")


def _has_vector(obj: Union[Token, Span, Doc], source: str) -> bool:
    return bool(np.any(_vector(obj, source)))


def _similarity(obj: Union[Token, Span, Doc], other: object, source: str) -> float:
    a = np.asarray(obj.vector)
    b = np.asarray(getattr(other, "vector"))
    if a.size and b.size and a.shape != b.shape:
        raise ValueError(
            f"similarity: the ELMo vector of this {type(obj).__name__} has width {a.shape[-1]}, "
            f"but the {type(other).__name__} it is compared with has a vector of width {b.shape[-1]}"
        )
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        warnings.warn(Warnings.W008.format(obj=type(obj).__name__))
        return 0.0
    return float(a @ b / (na * nb))


def _pick_source(doc: Doc, view: str) -> Optional[str]:
    if view in ("mean", "top") and _doc_rows(doc, "tensor") is not None:
        return "tensor"
    if _doc_rows(doc, "elmo_mean") is not None:
        return "elmo_top" if view == "top" else "elmo_mean"
    return None


def set_elmo_hooks(doc: Doc, view: str = "mean") -> Doc:
    """Set the user hooks of ``doc`` (vector, has_vector, similarity of the Doc, its
    Spans and its Tokens) to use the ELMo vectors; returns the Doc.

    view: the component's ``tensor`` setting. "mean" / "top" read ``doc.tensor``, or
        the same view of ``doc._.elmo`` where doc.tensor was not kept (``DocBin``);
        "none" reads the mean of ``doc._.elmo``. A Doc with neither gets no hooks.
    """
    if view not in VIEWS:
        raise ValueError(f"set_elmo_hooks: unknown view {view!r} (expected one of {VIEWS})")
    source = _pick_source(doc, view)
    if source is None:
        return doc
    vector = functools.partial(_vector, source=source)
    has_vector = functools.partial(_has_vector, source=source)
    similarity = functools.partial(_similarity, source=source)
    for hooks in (doc.user_hooks, doc.user_span_hooks, doc.user_token_hooks):
        hooks["vector"] = vector
        hooks["has_vector"] = has_vector
        hooks["similarity"] = similarity
    if not Doc.has_extension(VIEW_ATTR):
        Doc.set_extension(VIEW_ATTR, default=None)
    doc._.set(VIEW_ATTR, view)  # kept in user_data, so restore_elmo_hooks finds it
    # A vector computed before the hooks were set would otherwise be kept.
    doc.vector = None
    doc.vector_norm = None
    return doc


def restore_elmo_hooks(docs: Iterable[Doc]) -> Iterator[Doc]:
    """Set the hooks again on Docs read back from bytes (``Doc.from_bytes``, ``DocBin``
    with ``store_user_data=True``, the results of ``nlp.pipe(n_process=...)``), with the
    view the component used (``doc._.elmo_view``). Docs the component did not set hooks
    on are passed through unchanged."""
    if not Doc.has_extension(VIEW_ATTR):
        Doc.set_extension(VIEW_ATTR, default=None)
    for doc in docs:
        view = doc._.get(VIEW_ATTR)
        if view in VIEWS:
            set_elmo_hooks(doc, view)
        yield doc
