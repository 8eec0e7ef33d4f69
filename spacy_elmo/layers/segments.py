"""How a Doc is cut into biLM sentences.

Segments are the Doc's sentences when it has sentence boundaries, else the
sentences spaCy's ``Sentencizer`` rule would find (the Doc is not changed).
Whitespace-only tokens are left out (their rows stay zero), and a segment longer
than ``max_length`` tokens is cut into pieces, so memory stays bounded.
"""
from typing import List, Sequence, Tuple

import numpy as np
from spacy.pipeline import Sentencizer
from spacy.tokens import Doc

_SENTENCIZER = Sentencizer()


def sentence_starts(doc: Doc) -> List[bool]:
    if doc.has_annotation("SENT_START"):
        return [bool(tok.is_sent_start) for tok in doc]
    return list(_SENTENCIZER.predict([doc])[0])


def doc_segments(doc: Doc, max_length: int) -> List[np.ndarray]:
    """Token indices of each biLM sentence of ``doc`` (whitespace tokens left out)."""
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    segments: List[np.ndarray] = []
    current: List[int] = []
    for tok, start in zip(doc, sentence_starts(doc)):
        if start and current:
            segments.append(np.asarray(current, dtype=np.int64))
            current = []
        if tok.text.strip():
            current.append(tok.i)
    if current:
        segments.append(np.asarray(current, dtype=np.int64))
    pieces: List[np.ndarray] = []
    for seg in segments:
        pieces.extend(seg[i : i + max_length] for i in range(0, len(seg), max_length))
    return pieces


def batch_segments(docs: Sequence[Doc], max_length: int) -> Tuple[List[str], List[int], List[np.ndarray]]:
    """Flat token strings and segment lengths of a batch, plus each doc's token
    indices in that flat order."""
    words: List[str] = []
    lengths: List[int] = []
    rows: List[np.ndarray] = []
    for doc in docs:
        segs = doc_segments(doc, max_length)
        for seg in segs:
            words.extend(doc[int(i)].text for i in seg)
            lengths.append(len(seg))
        rows.append(np.concatenate(segs) if segs else np.zeros((0,), dtype=np.int64))
    return words, lengths, rows
